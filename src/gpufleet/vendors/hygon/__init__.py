"""Hygon DCUs: ``hy-smi`` (and DTK's ``rocm-smi --json``)."""

from gpufleet.vendors.hygon.plugin import PLUGIN as PLUGIN
