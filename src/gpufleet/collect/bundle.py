"""Split the framed output of the remote script into per-tool sections.

Framing (one line each)::

    @@gpufleet:script v1@@
    @@gpufleet:begin NAME@@
    <stdout of the tool>
    @@gpufleet:stderr NAME@@
    <first 2 KiB of its stderr>
    @@gpufleet:end NAME rc=N@@
    ...
    @@gpufleet:done@@

The same structure is produced by the simulated lab without any shell, so the parsers and
everything downstream see exactly one format whatever the transport.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from gpufleet.collect.fit import int_of
from gpufleet.errors import ParseError

_HEADER = "@@gpufleet:script v1@@"
_DONE = "@@gpufleet:done@@"


@dataclass(frozen=True)
class Section:
    """Output of one tool run by the collection script."""

    name: str
    stdout: str
    stderr: str
    rc: int

    @property
    def ok(self) -> bool:
        return self.rc == 0


def render_bundle(sections: list[Section]) -> str:
    """Frame sections exactly as the remote script does (used by the simulated lab)."""
    parts = [_HEADER]
    for s in sections:
        parts.append(f"\n@@gpufleet:begin {s.name}@@\n{s.stdout}")
        parts.append(f"\n@@gpufleet:stderr {s.name}@@\n{s.stderr}")
        parts.append(f"\n@@gpufleet:end {s.name} rc={s.rc}@@")
    parts.append("\n" + _DONE + "\n")
    return "".join(parts)


#: Every framing line at once (``re.M``: one per line); the split reads markers only, not
#: every line of a 200 kB bundle.
_MARKER = re.compile(
    r"^@@gpufleet:(?:begin (?P<begin>[\w.-]+)|stderr (?P<stderr>[\w.-]+)"
    r"|end (?P<end>[\w.-]+) rc=(?P<rc>-?\d+)|(?P<done>done))@@$",
    re.M,
)


_PREFIX = "@@gpufleet:"


def _markers(text: str, pos: int) -> Iterator[re.Match[str]]:
    """``_MARKER.finditer(text, pos)``, found by ``str.find`` of the marker prefix: the regex
    only runs where a line starts with it, not at every line of a 200 kB bundle."""
    find, match = text.find, _MARKER.match
    while (at := find(_PREFIX, pos)) >= 0:
        if at == 0 or text[at - 1] == "\n":
            m = match(text, at)
            if m is not None:
                yield m
                pos = m.end()
                continue
        pos = at + 1


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _lines_between(text: str, start: int, stop: int) -> str | None:
    """The lines from offset ``start`` (a line start) to ``stop`` (the start of the next
    marker line), joined, without the newline that ends the last; None when there are none."""
    if stop <= start:
        return None
    return text[start : stop - 1]


def split_bundle(text: str, source: str = "collection output") -> dict[str, Section]:
    """Parse framed script output into sections by name.

    Raises :class:`ParseError` (naming the line) when the framing is broken, e.g. when the
    output was cut off before ``@@gpufleet:done@@`` or a section appears twice.

    Inside a section, only that section's own ``stderr``/``end`` markers count; any other
    framing line (another name's, a ``begin``, ``done``) is the tool's output.
    """
    nl = text.find("\n")
    first = text if nl < 0 else text[:nl]
    if first.strip() != _HEADER:
        raise ParseError(
            source, f"not gpufleet collection output (first line {first[:60]!r})", line=1
        )
    pos = len(text) if nl < 0 else nl + 1
    sections: dict[str, Section] = {}
    # Section name -> offset of its begin marker; its line is counted only for a message.
    starts: dict[str, int] = {}
    markers = _markers(text, pos)
    for m in markers:
        gap = text[pos : m.start()]
        if gap.strip():
            _unexpected(text, source, pos, gap)
        if m["done"] is not None:
            return sections
        name = m["begin"]
        if name is None:  # a stderr or end marker outside any section
            _unexpected(text, source, m.start(), m.group())
        if name in starts:
            # A second copy (a tool printing our framing, or a tampered stream) could
            # replace the real output unnoticed: refuse the whole bundle.
            raise ParseError(
                source,
                f"section '{name}' appears twice (first at line {_line_of(text, starts[name])})",
                line=_line_of(text, m.start()),
            )
        starts[name] = m.start()
        out: list[str] = []
        err: list[str] = []
        target = out
        chunk = m.end() + 1  # the line after the marker
        rc: int | None = None
        for own in markers:
            if own["stderr"] == name:
                if (lines := _lines_between(text, chunk, own.start())) is not None:
                    target.append(lines)
                target = err
                chunk = own.end() + 1
            elif own["end"] == name:
                if (lines := _lines_between(text, chunk, own.start())) is not None:
                    target.append(lines)
                # the line is counted only for a refusal: counting it for every section
                # cost more than the rest of the split (7eae507: +46% parse time)
                digits = own["rc"]
                rc = (
                    int(digits)
                    if len(digits) <= 18
                    else int_of(
                        digits, source, f"section '{name}' rc", line=_line_of(text, own.start())
                    )
                )
                pos = own.end() + 1
                break
        if rc is None:
            raise ParseError(
                source,
                f"section '{name}' is truncated (no end marker)",
                line=_line_of(text, m.start()),
            )
        sections[name] = Section(name, _strip_frame(out), _strip_frame(err), rc)
    if text[pos:].strip():
        _unexpected(text, source, pos, text[pos:])
    raise ParseError(
        source, "output ends before the final marker (truncated)", line=text.count("\n") + 1
    )


def _unexpected(text: str, source: str, pos: int, gap: str) -> None:
    """Raise for the first non-blank line of ``gap`` (which starts at offset ``pos``)."""
    line_no = _line_of(text, pos)
    for offset, line in enumerate(gap.split("\n")):
        if line.strip():
            raise ParseError(
                source,
                f"unexpected text between sections: {line[:80]!r}",
                line=line_no + offset,
            )
    raise AssertionError("unreachable: the gap has text")  # pragma: no cover


def _strip_frame(chunks: list[str]) -> str:
    # The script prints one extra newline before each marker so markers always start a line.
    text = "\n".join(chunks)
    return text[:-1] if text.endswith("\n") else text
