"""The CLI's Rich consoles (imported on first use through :mod:`gpufleet.cli.common`, whose
``console`` and ``err_console`` these are): see that module's doc, "Literal text"."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from gpufleet.cli.common import _CONTROL, printable


class SafeConsole(Console):
    """A Rich console that never writes a control character taken from data (create it with
    ``emoji=False`` so that ``:name:`` stays text): strings are
    cleaned before markup is parsed and every text segment again before it is written
    (Rich's own control segments, e.g. the progress bar's cursor moves, pass)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # The width is the terminal's (COLUMNS, else the tty's) when printing, not when the
        # console was made: Rich pins COLUMNS at creation, and the console lives as long as
        # the process (tests run many commands at many widths in one; gpufleet.cli.tables).
        if kwargs.get("width") is None:
            self._width = None
        if kwargs.get("height") is None:
            self._height = None

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(printable(text), **kwargs)

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterator[Segment]:
        for seg in super().render(renderable, options):
            if seg.control or not _CONTROL.search(seg.text):
                yield seg
            else:
                yield Segment(printable(seg.text), seg.style, seg.control)


# emoji=False: ``:end:`` in a message is text, not an emoji code
console = SafeConsole(emoji=False)
err_console = SafeConsole(stderr=True, emoji=False)
