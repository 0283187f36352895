"""The CLI's tables, fitted to the terminal (issue 29 item 2): one home for every table.

A table never cuts an identifier (a host name, model, UUID, serial, fingerprint, state):
every column is declared with a :class:`Col`, an identifier column (``ident``) is never
wrapped, folded or cropped, and when the terminal is too narrow for all the columns the
low-priority ones (highest ``rank`` first; rank 0 is never hidden) are hidden, and one dim
line under the table says which: ``2 columns hidden (pool, driver): --wide shows them``.
With ``--wide`` (:data:`WIDE_HELP`, read by the error boundary into
:attr:`gpufleet.cli.common.GlobalOptions.wide`) every column is shown and the table takes the
width it needs, wider than the terminal if it must (the terminal wraps its lines, never a
cell). Text columns (reasons, messages) wrap at spaces and fold long words; they are given
at least :attr:`Col.floor` cells before a column is hidden.

Widths are terminal cells (Rich's ``cell_len``, so CJK text counts double), never ``len``.
Importing this module imports no Rich (the lean starts, :mod:`gpufleet.cli.entry`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from gpufleet.i18n import _, ngettext

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

#: The help of every table command's ``--wide``.
WIDE_HELP = _("Show every column, however wide (a narrow terminal hides low-priority ones).")

@dataclass(frozen=True)
class Col:
    """One column of a fitted table.

    ``rank``: 0, always shown; the higher, the sooner hidden on a narrow terminal (equal
    ranks: the rightmost first). ``ident``: an identifier column, never wrapped nor cut
    (each line of its cells is kept whole). ``words``: identifiers separated by spaces
    (a state over its fault, ``8x A100-SXM4-80GB``): lines may wrap between words, never
    inside one. Any other column is text: it wraps and folds, and is hidden rather than
    given fewer than ``floor`` cells, or than the widest identifier in its text (an SSH key
    fingerprint, a GPU UUID: :data:`_IDENT_WORD`)."""

    header: str
    rank: int = 0
    ident: bool = False
    words: bool = False
    justify: Literal["left", "right", "center"] = "left"
    floor: int = 10
    style: str | None = None


def num(header: str, rank: int = 0) -> Col:
    """A column of numbers (right-aligned, never split)."""
    return Col(header, rank, ident=True, justify="right")


@dataclass
class Fitted:
    """A table fitted to a width: the Rich table and the headers of the hidden columns."""

    table: Table
    hidden: list[str]

    def note(self) -> str | None:
        """The one line that says what was hidden (Rich markup), None when nothing was."""
        if not self.hidden:
            return None
        from gpufleet.cli.common import lit

        n = len(self.hidden)
        names = ", ".join(lit(" ".join(h.replace("-\n", "-").split())) for h in self.hidden)
        note = ngettext(
            "{n} column hidden ({names}): --wide shows them",
            "{n} columns hidden ({names}): --wide shows them",
            n,
        )
        return f"[dim]{note.format(n=n, names=names)}[/]"


def _lines(value: Any) -> list[int] | None:
    """The cell widths of the lines of ``value`` (markup parsed), or None when ``value`` is
    a renderable measured by Rich."""
    from rich.text import Text

    if isinstance(value, str):
        text = Text.from_markup(value, emoji=False)
    elif isinstance(value, Text):
        text = value
    else:
        return None
    return [line.cell_len for line in text.split("\n", allow_blank=True)]


def _words(value: Any) -> list[int]:
    from rich.text import Text

    if isinstance(value, str):
        plain = Text.from_markup(value, emoji=False).plain
    elif isinstance(value, Text):
        plain = value.plain
    else:
        return []
    from rich.cells import cell_len

    return [cell_len(w) for w in plain.split()]


def _need(col: Col, cells: Sequence[Any], console: Console) -> int:
    """The fewest cells ``col`` may have: an identifier's longest line (its longest word
    with ``words``), a text column's ``floor`` (or less when its widest line is narrower)."""
    from rich.measure import Measurement

    # a header wraps at spaces, unless its column never wraps
    head = max((_lines(col.header) if col.ident and not col.words else _words(col.header)) or [1])
    widths: list[int] = []
    for value in cells:
        lines = _lines(value)
        if lines is None:
            m = Measurement.get(console, console.options, value)
            widths.append(m.minimum if col.words or not col.ident else m.maximum)
        elif col.ident and not col.words:
            widths.extend(lines)
        elif col.words or col.ident:
            widths.extend(_words(value))
        else:
            widths.append(min(max(lines, default=0), col.floor))
            widths.extend(_ident_words(value))
    return max([head, *widths])


#: Identifiers inside free text (a message, a reason), kept whole as identifier columns are:
#: SSH key fingerprints and GPU/MIG UUIDs, with the punctuation around them.
_IDENT_WORD = re.compile(r"^\W*((SHA256:[A-Za-z0-9+/=]{16,})|((GPU|MIG)-[0-9a-fA-F-]{16,}))\W*$")


def _ident_words(value: Any) -> list[int]:
    """The cell widths of the identifiers (:data:`_IDENT_WORD`) among the words of a text
    cell."""
    from rich.cells import cell_len
    from rich.text import Text

    if isinstance(value, str):
        plain = Text.from_markup(value, emoji=False).plain
    else:
        plain = value.plain if isinstance(value, Text) else ""
    return [cell_len(w) for w in plain.split() if _IDENT_WORD.match(w)]


def _extra(table: Table, ncols: int) -> int:
    """The cells a table of ``ncols`` columns adds to its contents: the box's edges and
    separators (as Rich counts them) and each column's padding."""
    extra = 0
    if table.box and table.show_edge:
        extra += 2
    if table.box:
        extra += max(ncols - 1, 0)
    _, right, _, left = table.padding
    if table.collapse_padding:
        left, right = 0, abs(left - right)
    pads = [left + right] * ncols
    if pads and not table.pad_edge:
        pads[0] -= left
        pads[-1] -= right
    return extra + sum(pads)


def fit(
    cols: Sequence[Col],
    rows: Iterable[Sequence[Any]],
    *,
    wide: bool | None = None,
    width: int | None = None,
    **table_args: Any,
) -> Fitted:
    """The table of ``rows`` under ``cols``, fitted to ``width`` (the console's): columns
    hidden by rank while the identifiers would not fit whole, none with ``wide`` (default:
    the command's ``--wide``). Headers are translated (:func:`gpufleet.i18n._`);
    ``table_args`` go to Rich's ``Table`` (title, box, ...)."""
    from rich.table import Table

    from gpufleet.cli.common import OPTIONS, console

    wide = OPTIONS.wide if wide is None else wide
    width = console.width if width is None else width
    data = [list(r) for r in rows]
    # the headers as shown: translated (issue 29 item 8), measured in cells like the rest
    cols = [replace(c, header=_(c.header)) for c in cols]
    for r in data:
        if len(r) != len(cols):
            raise ValueError(f"a row of {len(r)} cells under {len(cols)} columns")
    table = Table(**table_args)
    needs = [_need(c, [r[i] for r in data], console) for i, c in enumerate(cols)]
    shown = list(range(len(cols)))

    def total() -> int:
        return sum(needs[i] for i in shown) + _extra(table, len(shown))

    if not wide:
        while total() > width:
            droppable = [i for i in shown if cols[i].rank > 0]
            if not droppable:
                break
            # the highest rank goes first; among equals, the rightmost
            shown.remove(max(droppable, key=lambda i: (cols[i].rank, i)))
    for i in shown:
        c = cols[i]
        keep = c.ident or c.words
        # a text column keeps room for the widest identifier in its text (Rich would give
        # the other columns their natural widths first and fold a fingerprint otherwise)
        ident_room = max((w for r in data for w in _ident_words(r[i])), default=0)
        table.add_column(
            c.header,
            justify=c.justify,
            style=c.style,
            no_wrap=c.ident and not c.words,
            overflow="fold",
            min_width=needs[i] if keep else (ident_room or None),
        )
    for r in data:
        table.add_row(*(r[i] for i in shown))
    if wide:  # every column at its natural width: the terminal wraps the lines, not a cell
        from rich.measure import Measurement

        natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
        if natural > width:
            table.width = natural
    elif total() > width:  # rank 0 alone is too wide: the table takes what it needs
        table.width = total()
    return Fitted(table, [cols[i].header for i in range(len(cols)) if i not in shown])


def show(
    cols: Sequence[Col],
    rows: Iterable[Sequence[Any]],
    *,
    console: Console | None = None,
    **table_args: Any,
) -> Fitted:
    """Print the fitted table (:func:`fit`) and, when columns were hidden, the note."""
    from gpufleet.cli import common

    out = common.console if console is None else console
    fitted = fit(cols, rows, width=out.width, **table_args)
    out.print(fitted.table, crop=False)  # a table wider than the terminal is not cut either
    note = fitted.note()
    if note is not None:
        out.print(note, soft_wrap=False)
    return fitted
