"""MetaX GPUs: ``mx-smi`` and ``mx-smi topo -m``."""

from gpufleet.vendors.metax.plugin import PLUGIN as PLUGIN
