"""AMD Instinct GPUs: ``rocm-smi --json``."""

from gpufleet.vendors.amd.plugin import PLUGIN as PLUGIN
