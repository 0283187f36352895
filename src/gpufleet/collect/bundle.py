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
from dataclasses import dataclass

from gpufleet.errors import ParseError

_BEGIN = re.compile(r"^@@gpufleet:begin (?P<name>[\w.-]+)@@$")
_STDERR = re.compile(r"^@@gpufleet:stderr (?P<name>[\w.-]+)@@$")
_END = re.compile(r"^@@gpufleet:end (?P<name>[\w.-]+) rc=(?P<rc>-?\d+)@@$")
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


def split_bundle(text: str, source: str = "collection output") -> dict[str, Section]:
    """Parse framed script output into sections by name.

    Raises :class:`ParseError` (naming the line) when the framing is broken, e.g. when the
    output was cut off before ``@@gpufleet:done@@`` or a section appears twice.
    """
    lines = text.split("\n")
    if not lines or lines[0].strip() != _HEADER:
        first = lines[0][:60] if lines else ""
        raise ParseError(source, f"not gpufleet collection output (first line {first!r})", line=1)
    sections: dict[str, Section] = {}
    starts: dict[str, int] = {}  # section name -> line of its begin marker
    i = 1
    done = False
    while i < len(lines):
        line = lines[i]
        if line == _DONE:
            done = True
            break
        m = _BEGIN.match(line)
        if not m:
            if line.strip():
                raise ParseError(
                    source, f"unexpected text between sections: {line[:80]!r}", line=i + 1
                )
            i += 1
            continue
        name = m.group("name")
        begin_line = i + 1
        if name in starts:
            # A second copy (a tool printing our framing, or a tampered stream) could
            # replace the real output unnoticed: refuse the whole bundle.
            raise ParseError(
                source,
                f"section '{name}' appears twice (first at line {starts[name]})",
                line=begin_line,
            )
        starts[name] = begin_line
        out: list[str] = []
        err: list[str] = []
        target = out
        i += 1
        rc: int | None = None
        while i < len(lines):
            cur = lines[i]
            if _STDERR.match(cur) and cur == f"@@gpufleet:stderr {name}@@":
                target = err
            else:
                e = _END.match(cur)
                if e and e.group("name") == name:
                    rc = int(e.group("rc"))
                    break
                target.append(cur)
            i += 1
        if rc is None:
            raise ParseError(
                source, f"section '{name}' is truncated (no end marker)", line=begin_line
            )
        sections[name] = Section(name, _strip_frame(out), _strip_frame(err), rc)
        i += 1
    if not done:
        raise ParseError(source, "output ends before the final marker (truncated)", line=len(lines))
    return sections


def _strip_frame(lines: list[str]) -> str:
    # The script prints one extra newline before each marker so markers always start a line.
    text = "\n".join(lines)
    return text[:-1] if text.endswith("\n") else text
