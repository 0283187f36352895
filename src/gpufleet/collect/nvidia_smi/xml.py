"""``nvidia-smi -q -x`` (XML, DTD v10 .. v13)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from gpufleet.collect.nvidia_smi.common import _XmlView
from gpufleet.collect.nvidia_smi.fields import _Ctx, _gpu, _report, _report_header, _too_many
from gpufleet.domain.facts import NvidiaSmiReport
from gpufleet.errors import ParseError

# ------------------------------------------------------------------------------- XML


def parse_nvidia_smi_xml(text: str, source: str = "nvidia-smi -q -x") -> NvidiaSmiReport:
    """Parse ``nvidia-smi -q -x`` output (DTD v10 .. v13) into a report of every GPU.

    GPU ``index`` is the position in the file, which is nvidia-smi's own index order (PCI bus
    order), not ``minor_number``. Malformed or truncated XML, or a root other than
    ``<nvidia_smi_log>``, raises :class:`ParseError` with line and column.

    ``attached_gpus`` is reported as printed and not checked against the number of ``<gpu>``
    elements: truncation already breaks well-formedness, and trimmed real captures exist.
    """
    if not text.strip():
        raise ParseError(source, "empty output, expected <nvidia_smi_log> XML")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line, column = exc.position
        raise ParseError(source, f"malformed XML: {exc}", line=line, column=column + 1) from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(source, f"root element is <{root.tag}>, expected <nvidia_smi_log>", line=1)
    ctx = _Ctx(source, is_xml=True)
    top = _XmlView(root, "nvidia_smi_log")
    elems = root.findall("gpu")
    _too_many(source, len(elems))
    gpus = [
        _gpu(ctx, _XmlView(elem, f"gpu[{i}]"), i, elem.get("id")) for i, elem in enumerate(elems)
    ]
    return _report(source, _report_header(ctx, top), gpus)
