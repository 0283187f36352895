"""What a host is *expected* to be (from its pool/group) and the validated software baselines.

Pure data; checks compare :class:`~gpufleet.domain.facts.HostFacts` with these.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ExpectedSpec(BaseModel):
    """Expected hardware of a host, usually set per inventory group (``gpu_h800`` -> 8x H800).

    Every field is optional: an unset expectation is simply not checked.
    Inventory variables map 1:1 with a ``gpufleet_`` prefix (``gpufleet_gpu_count=8``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_count: int | None = None
    gpu_model: str | None = None  # substring match against product_name, e.g. "H800"
    gpu_memory_mib: int | None = None
    nvlink_per_gpu: int | None = None  # expected active NVLinks per GPU (e.g. 18 on H100 SXM)
    nvswitch: bool | None = None  # expects nvidia-fabricmanager running
    fabric: str | None = None  # "ib" | "roce" | "none"
    ib_ports: int | None = None  # number of high-speed ports that must be up
    ib_rate_gbps: float | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    rack: str | None = None
    #: issue 26 item 7: the MIG strategy of the cluster's GPU Feature Discovery (``none``,
    #: ``single``, ``mixed``), which decides the ``nvidia.com/mig*`` labels (domain/mig.py).
    mig_strategy: str | None = None

    @field_validator("mig_strategy")
    @classmethod
    def _strategy(cls, v: str | None) -> str | None:
        if v is not None and v not in ("none", "single", "mixed"):
            raise ValueError(f"mig_strategy {v!r}: none, single or mixed (GFD's)")
        return v


class BaselineStatus(StrEnum):
    """Life of a baseline: proposed, proven, on its way out."""

    CANDIDATE = "candidate"
    VALIDATED = "validated"
    DEPRECATED = "deprecated"


class Baseline(BaseModel):
    """A validated image + driver + CUDA + firmware combination, mapped to purposes.

    ``None`` (or empty) means "not pinned by this baseline"; how each pinned field compares
    with the host is declared in :data:`gpufleet.domain.pins.PINS`, which must name every
    field but ``name``, ``purpose``, ``status`` and ``os_image_url``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built when used

    name: str
    purpose: str = ""
    status: BaselineStatus = BaselineStatus.CANDIDATE
    os_image: str | None = None  # matched against os-release PRETTY_NAME or "ID VERSION_ID"
    kernel: str | None = None
    driver: str | None = None
    cuda: str | None = None
    #: issue 15: the Ascend/AMD firmware package and runtime (CANN, ROCm) versions.
    accelerator_firmware: str | None = None
    runtime: str | None = None
    container_toolkit: str | None = None
    vbios: list[str] = Field(default_factory=list)
    fabric_manager: str | None = None
    hca_firmware: list[str] = Field(default_factory=list)  # accepted, as ibstat shows them
    sysctls: dict[str, str] = Field(default_factory=dict)
    #: issue 26 item 7: the MIG layout, ``all`` or GPU index -> layout (domain/mig.py), as
    #: ``baseline create --mig-config FILE:NAME`` reads a mig-parted config.
    mig: dict[str, str] = Field(default_factory=dict)
    #: Not a pin: the OS image (an http(s) URL) ``gpufleet reimage --baseline`` inserts as
    #: virtual media.
    os_image_url: str | None = None

    @field_validator("mig")
    @classmethod
    def _mig(cls, v: dict[str, str]) -> dict[str, str]:
        """``all`` or GPU indices -> a MIG layout (:func:`gpufleet.domain.mig.check_pin`)."""
        from gpufleet.domain.mig import check_pin

        return check_pin(v)

    @field_validator("os_image_url")
    @classmethod
    def _image_url(cls, v: str | None) -> str | None:
        """An http(s) URL with a host, which the BMC fetches; empty means none."""
        if v is None or not v.strip():
            return None
        v = v.strip()
        scheme, sep, rest = v.partition("://")
        if scheme not in ("http", "https") or not sep or not rest.split("/", 1)[0]:
            raise ValueError(f"os_image_url {v!r}: an http(s) URL the BMC can fetch")
        return v
