"""Kunlunxin XPUs: ``xpu_smi`` / ``xpu-smi``."""

from gpufleet.vendors.kunlunxin.plugin import PLUGIN as PLUGIN
