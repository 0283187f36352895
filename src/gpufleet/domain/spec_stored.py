"""A host's expected spec as the labels read it, without pydantic (issue 30 item 3, start-up).

:class:`gpufleet.domain.spec.ExpectedSpec` is the one definition of the expected spec (a
pydantic model, validated when the inventory is enrolled). ``gpufleet labels HOST`` reads a
stored spec that model wrote; importing pydantic costs it more than the rest of the read.
:func:`stored_spec` takes the stored dict as it is when it is exactly of the model's shape:
only the model's fields (:data:`FIELDS`, kept equal to the model's by a test), each of its
exact type, the MIG strategy one of its values: what the model accepts unchanged. Anything
else is None, and the caller validates with the model (which reports what is wrong).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

#: Each field of :class:`~gpufleet.domain.spec.ExpectedSpec` and the types (besides None) the
#: model takes unchanged (a float field also takes an int, as the same number).
FIELDS: dict[str, tuple[type, ...]] = {
    "gpu_count": (int,),
    "gpu_model": (str,),
    "gpu_memory_mib": (int,),
    "nvlink_per_gpu": (int,),
    "nvswitch": (bool,),
    "fabric": (str,),
    "ib_ports": (int,),
    "ib_rate_gbps": (float, int),
    "pcie_gen": (int,),
    "pcie_width": (int,),
    "rack": (str,),
    "mig_strategy": (str,),
}

#: The MIG strategies the model accepts.
MIG_STRATEGIES = ("none", "single", "mixed")


class LabelSpec(Protocol):
    """What the labels read of an expected spec (:class:`~gpufleet.domain.spec.ExpectedSpec`
    or :class:`StoredSpec`)."""

    @property
    def rack(self) -> str | None: ...
    @property
    def ib_ports(self) -> int | None: ...
    @property
    def ib_rate_gbps(self) -> float | None: ...
    @property
    def mig_strategy(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class StoredSpec:
    """The fields of a stored expected spec the labels read (see the module's doc)."""

    rack: str | None = None
    ib_ports: int | None = None
    ib_rate_gbps: float | None = None
    mig_strategy: str | None = None


def stored_spec(expected: Any) -> StoredSpec | None:
    """``expected`` (a stored spec) as :class:`StoredSpec` when the model would take it
    unchanged; None otherwise (validate it with the model)."""
    if not isinstance(expected, dict):
        return None
    for key, value in expected.items():
        types = FIELDS.get(key)
        if types is None or (value is not None and type(value) not in types):
            return None
    strategy = expected.get("mig_strategy")
    if strategy is not None and strategy not in MIG_STRATEGIES:
        return None
    rate = expected.get("ib_rate_gbps")
    return StoredSpec(
        rack=expected.get("rack"),
        ib_ports=expected.get("ib_ports"),
        ib_rate_gbps=None if rate is None else float(rate),
        mig_strategy=strategy,
    )
