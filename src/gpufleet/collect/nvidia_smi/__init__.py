"""Parsers for ``nvidia-smi`` output: pure functions from captured text to typed facts.

Three formats, one result type:

* ``nvidia-smi -q -x`` (XML)            -> :func:`parse_nvidia_smi_xml`
* ``nvidia-smi -q`` (indented text)     -> :func:`parse_nvidia_smi_text`
* ``nvidia-smi --query-gpu=... --format=csv`` -> :func:`parse_query_gpu_csv`

The XML and text formats carry the same tree under different names, so both are read
through a small "view" interface and one declarative table (:data:`_GPU_FIELDS`) that lists,
per :class:`~gpufleet.domain.facts.Gpu` attribute, the candidate paths in each format (newest
schema first, older fallbacks after) and the adapter that turns the string into a value.

Conventions shared by all three parsers:

* nvidia-smi's "no value" spellings (``N/A``, ``[N/A]``, ``Not Supported``, ``Unknown Error``,
  ``Requested functionality has been deprecated``, anything in ``[brackets]`` ...) become
  ``None``; a field an older driver does not print at all is ``None`` too.
* A value that is present but cannot be read (``"abc MiB"``) raises :class:`ParseError`:
  a report is either complete or refused, never half-filled.
* Sub-records (ECC counts, retired pages, remapped rows) are ``None`` when every one of their
  values is missing, so "not supported on this GPU" is distinguishable from "zero errors".
* A GPU in an error state is kept and marked (``Gpu.error``, as gpustat keeps an invalid GPU):
  "GPU is lost" / "GPU requires reset" in any value, or "Unknown Error" / "ERR!" in a value
  every working GPU reports (:data:`_VITAL`: UUID, product name, bus id, memory size).
  "Unknown Error" in other fields is ordinary "not supported" noise (real 535 captures print
  ``Addressing Mode : Unknown Error`` on healthy GPUs) and stays ``None``.
* A value that parses but does not fit the facts' bounds (100k GPUs, a 200-character UUID)
  raises :class:`ParseError` naming the field.
"""

from __future__ import annotations

from gpufleet.collect.nvidia_smi.common import normalize_pci_bus_id
from gpufleet.collect.nvidia_smi.csv import (
    QUERY_GPU_FIELDS,
    parse_query_gpu_csv,
    parse_query_gpu_report,
)
from gpufleet.collect.nvidia_smi.text import parse_nvidia_smi_text
from gpufleet.collect.nvidia_smi.xml import parse_nvidia_smi_xml

__all__ = [
    "QUERY_GPU_FIELDS",
    "normalize_pci_bus_id",
    "parse_nvidia_smi_text",
    "parse_nvidia_smi_xml",
    "parse_query_gpu_csv",
    "parse_query_gpu_report",
]
