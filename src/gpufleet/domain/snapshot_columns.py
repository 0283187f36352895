"""The accelerator columns of a fact snapshot, derived from its facts (issue 15).

``fact_snapshots.gpu_count``, ``gpu_model``, ``gpu_memory_mib`` and ``driver`` are read by the
host list, placement and capacity without decoding the facts document. They are computed here,
once, for every vendor: collection writes them (``service/hosts/collect.py``) and migration 0011
recomputes them for snapshots stored before they counted Ascend/AMD accelerators.
"""

from __future__ import annotations

from typing import Any

from gpufleet.domain.accelerators import UNKNOWN_MODEL, accelerator_versions, accelerators_of
from gpufleet.domain.facts import HostFacts


def derived_columns(facts: HostFacts) -> dict[str, Any]:
    """A snapshot's accelerator columns, whatever the vendor: ``gpu_count`` (every
    accelerator of :func:`accelerators_of`: NVIDIA GPUs, Ascend NPUs, AMD GPUs), ``gpu_model``
    (their models, sorted, comma-joined: ``NVIDIA H100 80GB HBM3``, ``910B3``, ``Instinct
    MI100``), ``gpu_memory_mib`` (the smallest memory) and ``driver`` (NVIDIA's, else the first
    vendor's in vendor order that reports one). An NVIDIA host's values are what nvidia-smi
    gave, as before."""
    accs = accelerators_of(facts)
    models = sorted({a.model for a in accs if a.model and a.model != UNKNOWN_MODEL})
    mems = [a.memory_total_mib for a in accs if a.memory_total_mib is not None]
    driver = facts.driver_version
    if driver is None:
        versions = accelerator_versions(facts)
        driver = next(
            (versions[v].driver for v in sorted(versions, key=str) if versions[v].driver), None
        )
    return {
        "driver": driver,
        "gpu_count": len(accs),
        "gpu_model": ", ".join(models) or None,
        "gpu_memory_mib": min(mems) if mems else None,
    }
