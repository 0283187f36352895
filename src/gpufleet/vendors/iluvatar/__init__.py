"""Iluvatar CoreX GPUs: ``ixsmi``."""

from gpufleet.vendors.iluvatar.plugin import PLUGIN as PLUGIN
