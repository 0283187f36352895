"""``nvidia-smi -q -x`` (XML, DTD v10 .. v13)."""

from __future__ import annotations

from lxml import etree

from gpufleet.collect.nvidia_smi.common import _XmlIndex, _XmlView
from gpufleet.collect.nvidia_smi.fields import _Ctx, _gpu, _report, _report_header, _too_many
from gpufleet.domain.facts import NvidiaSmiReport
from gpufleet.errors import ParseError

# ------------------------------------------------------------------------------- XML

#: lxml (libxml2): several times faster than ElementTree on a 130 kB 8-GPU report. Nothing
#: is fetched or expanded (no network, no entities, no DTD loading); comments and processing
#: instructions are dropped, as ElementTree drops them; the text is read as UTF-8 whatever
#: its declaration says (it arrived as text).
_PARSER = etree.XMLParser(
    resolve_entities=False,
    no_network=True,
    load_dtd=False,
    remove_comments=True,
    remove_pis=True,
    encoding="utf-8",
)


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
        root = etree.fromstring(text.encode("utf-8", "surrogateescape"), _PARSER)
    except etree.XMLSyntaxError as exc:
        line, column = exc.position  # column counted from 1
        raise ParseError(
            source, f"malformed XML: {exc.msg or exc}", line=line, column=column
        ) from None
    if root is None:
        raise ParseError(source, "malformed XML: no root element", line=1)
    if root.tag != "nvidia_smi_log":
        raise ParseError(
            source, f"root element is <{root.tag!s}>, expected <nvidia_smi_log>", line=1
        )
    ctx = _Ctx(source, is_xml=True)
    index: _XmlIndex = {}
    top = _XmlView(root, "nvidia_smi_log", index)
    elems = root.findall("gpu")
    _too_many(source, len(elems))
    gpus = [
        _gpu(ctx, _XmlView(elem, f"gpu[{i}]", index), i, elem.get("id"))
        for i, elem in enumerate(elems)
    ]
    return _report(source, _report_header(ctx, top), gpus)
