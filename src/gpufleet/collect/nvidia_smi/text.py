"""``nvidia-smi -q`` (the indented text report)."""

from __future__ import annotations

import re

from gpufleet.collect.nvidia_smi.common import _norm_key, _TextNode, _TextView
from gpufleet.collect.nvidia_smi.fields import _Ctx, _gpu, _report, _report_header, _too_many
from gpufleet.domain.facts import NvidiaSmiReport
from gpufleet.errors import ParseError

# ------------------------------------------------------------------------------ text

_BANNER = re.compile(r"^=+\s*NVSMI LOG\s*=+$")
# "Key      : value" -- the key never contains ':'; a bare key ("MIG Mode", "GPU 0000:..")
# has no " : " separator. The value may itself contain ':' (timestamps, bus ids).
_KEY_VALUE = re.compile(r"^(?P<key>[^:]*?)\s*:(?:\s(?P<value>.*))?$")
_GPU_HEADER = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")


def _text_tree(text: str, source: str) -> tuple[_TextNode, int]:
    """Build the indentation tree of ``-q`` text; returns (root, number of the last line)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    numbered = [(n, line.rstrip()) for n, line in enumerate(lines, start=1) if line.strip()]
    if not numbered:
        raise ParseError(source, "empty output, expected nvidia-smi -q text")
    first_no, first = numbered[0]
    if not _BANNER.match(first.strip()):
        raise ParseError(
            source,
            f"not nvidia-smi -q output: expected the '==NVSMI LOG==' banner, got {first[:60]!r}",
            line=first_no,
        )
    root = _TextNode(key="", label="<top>", value=None, line=first_no, indent=-1)
    stack = [root]
    for number, line in numbered[1:]:
        if "\t" in line[: len(line) - len(line.lstrip())]:
            raise ParseError(source, "tab in indentation", line=number)
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        m = _KEY_VALUE.match(body)
        if m is not None and m["key"]:
            label, value = m["key"].strip(), (m["value"] or "").strip()
        else:
            label, value = body, None
        while stack[-1].indent >= indent:
            stack.pop()
        parent = stack[-1]
        # Siblings share one indentation; anything else is not nvidia-smi's layout.
        if parent.child_indent is None:
            parent.child_indent = indent
        elif parent.child_indent != indent:
            raise ParseError(
                source,
                f"inconsistent indentation: {indent} spaces where siblings under "
                f"'{parent.label}' have {parent.child_indent}",
                line=number,
            )
        if parent is root and value is None and not _GPU_HEADER.match(body):
            raise ParseError(source, f"unexpected line {body[:60]!r}", line=number)
        node = _TextNode(key=_norm_key(label), label=label, value=value, line=number, indent=indent)
        parent.children.append(node)
        stack.append(node)
    return root, numbered[-1][0]


def parse_nvidia_smi_text(text: str, source: str = "nvidia-smi -q") -> NvidiaSmiReport:
    """Parse the human ``nvidia-smi -q`` text format into the same report as the XML parser.

    Expects the output of a full ``nvidia-smi -q`` (no ``-i`` / ``-d`` filter): the number of
    ``GPU xxxx:xx:xx.x`` sections must equal ``Attached GPUs``. The text format has no
    closing tag, so that count is the only way to tell a complete report from one cut off
    mid-way; a mismatch raises :class:`ParseError` naming the last line. Lines that are not
    the ``==NVSMI LOG==`` layout (no banner, broken indentation) raise too.
    """
    root, last_line = _text_tree(text, source)
    ctx = _Ctx(source, is_xml=False)
    top = _TextView(root)
    header = _report_header(ctx, top)
    sections = [n for n in root.children if n.value is None]
    _too_many(source, len(sections))
    gpus = []
    for i, node in enumerate(sections):
        m = _GPU_HEADER.match(node.label)
        gpus.append(_gpu(ctx, _TextView(node), i, m["bus"] if m else None))
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
