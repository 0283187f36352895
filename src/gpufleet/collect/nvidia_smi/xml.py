"""``nvidia-smi -q -x`` (XML, DTD v10 .. v13)."""

from __future__ import annotations

from lxml import etree

from gpufleet.collect.nvidia_smi.common import (
    _trim_memos,
    _XmlFlatView,
    _XmlIndex,
    _XmlView,
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

# ------------------------------------------------------------------------------- XML

#: lxml (libxml2): several times faster than ElementTree on a 130 kB 8-GPU report. Nothing
#: is fetched or expanded (no network, no entities, no DTD loading); comments and processing
#: instructions are dropped, as ElementTree drops them; the text is read as UTF-8 whatever
#: its declaration says (it arrived as text). Whitespace-only text between elements is not
#: kept (``remove_blank_text``: ~20% of the parse; a leaf's own text, blank or not, stays, and
#: no reader looks at the blank text of an element that has children) and no ID table is
#: built (``collect_ids``).
_PARSER = etree.XMLParser(
    resolve_entities=False,
    remove_blank_text=True,
    collect_ids=False,
    no_network=True,
    load_dtd=False,
    remove_comments=True,
    remove_pis=True,
    encoding="utf-8",
)


def _sub_paths(prefix: str, table: _SubTable) -> list[str]:
    return [prefix + path for xml, _text, _conv in table.values() for path in xml]


#: Every path :func:`_gpu` looks up under a ``<gpu>`` with ``raw``/``node`` (the rest, and
#: any path missing here, is still answered, through the slower element index).
_GPU_PATHS = xml_paths(
    [path for f in _GPU_FIELDS for path in f.xml]
    + ["ecc_errors/volatile", "ecc_errors/aggregate", "mig_devices", "processes"]
    + _sub_paths("retired_pages/", _RETIRED_PAGES)
    + _sub_paths("remapped_rows/", _REMAPPED_ROWS)
    + _sub_paths("", _CLOCK_EVENT_REASONS)
    + _sub_paths("temperature/", _TEMPERATURE_THRESHOLDS)
    + _sub_paths("fabric/", _FABRIC)
    + _sub_paths("platformInfo/", _PLATFORM)
)


def parse_nvidia_smi_xml(text: str, source: str = "nvidia-smi -q -x") -> NvidiaSmiReport:
    """Parse ``nvidia-smi -q -x`` output (DTD v10 .. v13) into a report of every GPU.

    GPU ``index`` is the position in the file, which is nvidia-smi's own index order (PCI bus
    order), not ``minor_number``. Malformed or truncated XML, or a root other than
    ``<nvidia_smi_log>``, raises :class:`ParseError` with line and column.

    ``attached_gpus`` is reported as printed and not checked against the number of ``<gpu>``
    elements: truncation already breaks well-formedness, and trimmed real captures exist.
    """
    if not text or text.isspace():  # (not text.strip(): no copy of a 200 kB report)
        raise ParseError(source, "empty output, expected <nvidia_smi_log> XML")
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:  # a lone surrogate no byte decodes to
        raise ParseError(source, f"not text: {exc.reason} at offset {exc.start}") from None
    try:
        root = etree.fromstring(data, _PARSER)
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
    _trim_memos()
    index: _XmlIndex = {}
    top = _XmlView(root, "nvidia_smi_log", index)
    elems = root.findall("gpu")
    _too_many(source, len(elems))
    gpus = [
        _gpu(ctx, _XmlFlatView(elem, f"gpu[{i}]", index, _GPU_PATHS), i, elem.get("id"))
        for i, elem in enumerate(elems)
    ]
    return _report(source, _report_header(ctx, top), gpus)
