"""Cambricon MLUs: ``cnmon``."""

from gpufleet.vendors.cambricon.plugin import PLUGIN as PLUGIN
