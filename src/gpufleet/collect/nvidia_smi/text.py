"""``nvidia-smi -q`` (the indented text report)."""

from __future__ import annotations

import re

from gpufleet.collect.nvidia_smi.common import (
    _norm_key,
    _TextFlatView,
    _TextNode,
    _TextView,
    _trim_memos,
    xml_paths,
)
from gpufleet.collect.nvidia_smi.fields import (
    _GPU_FIELDS,
    _Ctx,
    _gpu,
    _report,
    _report_header,
    _too_many,
)
from gpufleet.collect.nvidia_smi.subtables import (
    _CLOCK_EVENT_REASONS,
    _FABRIC,
    _PLATFORM,
    _REMAPPED_ROWS,
    _RETIRED_PAGES,
    _TEMPERATURE_THRESHOLDS,
    _SubTable,
)
from gpufleet.domain.facts import NvidiaSmiReport
from gpufleet.errors import ParseError

# ------------------------------------------------------------------------------ text


def _sub_paths(prefix: str, table: _SubTable) -> list[str]:
    return [prefix + path for _xml, text, _conv in table.values() for path in text]


#: Every path :func:`_gpu` looks up under a GPU section with ``raw``/``node`` (the rest, and
#: any path missing here, is still answered, through the slower :class:`_TextView`).
_GPU_PATHS = xml_paths(
    [path for f in _GPU_FIELDS for path in f.text]
    + ["ecc_errors/volatile", "ecc_errors/aggregate", "processes"]
    + _sub_paths("retired_pages/", _RETIRED_PAGES)
    + _sub_paths("remapped_rows/", _REMAPPED_ROWS)
    + _sub_paths("", _CLOCK_EVENT_REASONS)
    + _sub_paths("temperature/", _TEMPERATURE_THRESHOLDS)
    + _sub_paths("fabric/", _FABRIC)
    + _sub_paths("platform_info/", _PLATFORM)
)

_BANNER = re.compile(r"^=+\s*NVSMI LOG\s*=+$")
# "Key      : value" -- the key never contains ':'; a bare key ("MIG Mode", "GPU 0000:..")
# has no " : " separator. The value may itself contain ':' (timestamps, bus ids).
_GPU_HEADER = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")


def _split_key_value(body: str) -> tuple[str, str | None]:
    """``"Key      : value"`` -> ``("Key", "value")``; a bare key -> ``(body, None)``.

    The same split as the pattern ``^(?P<key>[^:]*?)\\s*:(?:\\s(?P<value>.*))?$`` (the key
    is everything before the first ':', which must end the line or be followed by white
    space), with ``str.find`` instead of a regex per line: a 100k-line report is read once.
    """
    colon = body.find(":")
    if colon < 0:
        return body, None
    after = body[colon + 1 : colon + 2]
    if after and not after.isspace():
        return body, None  # "GPU 00000000:07:00.0": a bare key with ':' in it
    key = body[:colon].strip()
    if not key:
        return body, None
    return key, body[colon + 2 :].strip()


#: A line as printed -> (indent, label, value, normalised key, starts a GPU section), for
#: the lines read before: most lines of a report ("Pending : No", the indentation of every
#: block) repeat from GPU to GPU and host to host. Bounded: emptied when it grows past
#: :data:`_LINE_CACHE_MAX` (a report of unique lines just reads them the long way).
_LINE_CACHE: dict[str, tuple[int, str, str | None, str, bool]] = {}
_LINE_CACHE_MAX = 16_384  # ~400 bytes an entry: a few MB at most


def _read_line(line: str, number: int, source: str) -> tuple[int, str, str | None, str, bool]:
    """The parts of one non-blank line (see :data:`_LINE_CACHE`); ParseError for a tab in
    the indentation."""
    line = line.rstrip()
    body = line.lstrip(" ")
    indent = len(line) - len(body)  # spaces only, as nvidia-smi indents
    if body[0].isspace():  # other white space after the spaces (rare)
        if "\t" in line[: len(line) - len(line.lstrip())]:
            raise ParseError(source, "tab in indentation", line=number)
        body = body.lstrip()
    colon = body.find(":")
    if colon < 0:
        label, value = body, None
    else:
        after = body[colon + 1 : colon + 2]
        if after and not after.isspace():
            label, value = body, None  # "GPU 00000000:07:00.0": a bare key with ':'
        else:
            label = body[:colon].strip()
            if label:
                value = body[colon + 2 :].strip()
            else:
                label, value = body, None
    return indent, label, value, _norm_key(label), _GPU_HEADER.match(body) is not None


def _text_tree(text: str, source: str) -> tuple[_TextNode, int]:
    """Build the indentation tree of ``-q`` text; returns (root, number of the last line)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    first_no = next((n for n, line in enumerate(lines, start=1) if line.strip()), 0)
    if not first_no:
        raise ParseError(source, "empty output, expected nvidia-smi -q text")
    first = lines[first_no - 1].rstrip()
    if not _BANNER.match(first.strip()):
        raise ParseError(
            source,
            f"not nvidia-smi -q output: expected the '==NVSMI LOG==' banner, got {first[:60]!r}",
            line=first_no,
        )
    root = _TextNode(key="", label="<top>", value=None, line=first_no, indent=-1)
    stack = [root]
    indents = [-1]  # the indent of each node on the stack
    last_no = first_no
    cache = _LINE_CACHE
    if len(cache) > _LINE_CACHE_MAX:
        cache.clear()
    known = cache.get
    node_type = _TextNode
    # One pass, the per-line work cached by line (a 100k-line report is read once): the
    # same tree, checks and messages as splitting each line with _split_key_value.
    number = first_no
    for line in lines[first_no:]:
        number += 1
        parts = known(line)
        if parts is None:
            if not line or line.isspace():
                continue
            parts = cache[line] = _read_line(line, number, source)
        indent, label, value, key, gpu_header = parts
        last_no = number
        while indents[-1] >= indent:
            stack.pop()
            indents.pop()
        parent = stack[-1]
        # Siblings share one indentation; anything else is not nvidia-smi's layout.
        child_indent = parent.child_indent
        if child_indent is None:
            parent.child_indent = indent
        elif child_indent != indent:
            raise ParseError(
                source,
                f"inconsistent indentation: {indent} spaces where siblings under "
                f"'{parent.label}' have {child_indent}",
                line=number,
            )
        if parent is root and value is None and not gpu_header:
            body = line.strip()
            raise ParseError(source, f"unexpected line {body[:60]!r}", line=number)
        node = node_type(key, label, value, number, indent)
        parent.children.append(node)
        stack.append(node)
        indents.append(indent)
    return root, last_no


def parse_nvidia_smi_text(text: str, source: str = "nvidia-smi -q") -> NvidiaSmiReport:
    """Parse the human ``nvidia-smi -q`` text format into the same report as the XML parser.

    Expects the output of a full ``nvidia-smi -q`` (no ``-i`` / ``-d`` filter): the number of
    ``GPU xxxx:xx:xx.x`` sections must equal ``Attached GPUs``. The text format has no
    closing tag, so that count is the only way to tell a complete report from one cut off
    mid-way; a mismatch raises :class:`ParseError` naming the last line. Lines that are not
    the ``==NVSMI LOG==`` layout (no banner, broken indentation) raise too.
    """
    _trim_memos()
    root, last_line = _text_tree(text, source)
    ctx = _Ctx(source, is_xml=False)
    top = _TextView(root)
    header = _report_header(ctx, top)
    sections = [n for n in root.children if n.value is None]
    _too_many(source, len(sections))
    gpus = []
    for i, node in enumerate(sections):
        m = _GPU_HEADER.match(node.label)
        gpus.append(_gpu(ctx, _TextFlatView(node, _GPU_PATHS), i, m["bus"] if m else None))
    attached = header["attached_gpus"]
    if attached is None:
        raise ParseError(
            source, "no 'Attached GPUs' line: not a complete nvidia-smi -q output", line=last_line
        )
    if attached != len(gpus):
        attached_line = next(n.line for n in root.children if n.key == "attached_gpus")
        raise ParseError(
            source,
            f"output ends after {len(gpus)} of {attached} GPU sections "
            f"('Attached GPUs' at line {attached_line}): truncated?",
            line=last_line,
        )
    return _report(source, header, gpus)
