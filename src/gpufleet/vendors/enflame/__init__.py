"""Enflame GCUs: ``efsmi``."""

from gpufleet.vendors.enflame.plugin import PLUGIN as PLUGIN
