"""The vendor plugins the collection runs besides nvidia-smi (one line per vendor)."""

from __future__ import annotations

from gpufleet.collect.vendors.amd.plugin import COLLECTOR as AMD
from gpufleet.collect.vendors.ascend.plugin import COLLECTOR as ASCEND
from gpufleet.collect.vendors.base import VendorCollector

#: Every vendor collector, in script order.
COLLECTORS: tuple[VendorCollector, ...] = (ASCEND, AMD)
