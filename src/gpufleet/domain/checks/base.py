"""What every check shares: the result, the typed context, the registry and its decorator.

A check is ``(facts, ctx, params) -> CheckResult``: ``facts`` is what was collected, ``ctx``
(:class:`CheckContext`) what validation knows besides (time, expected spec, baseline, Xid
policy, the vendors' fault catalogues, active-test evidence), and ``params`` the plain
values the profile gives the check (validated against :data:`CHECK_PARAMS` when profiles
load). Unset expectations and
uncollected facts give ``skip``, never a guess.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.domain.evidence import DcgmDiagResult, GpuBurnResult, NcclResult
from gpufleet.domain.facts import Gpu, HostFacts
from gpufleet.domain.health import Fault
from gpufleet.domain.reasons import Reason, parse
from gpufleet.domain.spec import Baseline, ExpectedSpec
from gpufleet.domain.xid import XidPolicy

if TYPE_CHECKING:  # device_health -> rules -> preflight -> checks: a type only
    from gpufleet.domain.device_health import Catalogues


class CheckStatus(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


class CheckResult(BaseModel):
    """Outcome of one check on one host; ``evidence`` holds the numbers behind the message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    status: CheckStatus
    message: str
    evidence: dict[str, Any] = Field(default_factory=dict)
    fault: Fault | None = None
    #: The message as a code of :data:`gpufleet.domain.reasons.TEMPLATES` and its parameters
    #: (None: no template; ``message`` stays the English text either way).
    code: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)


@cache
def default_xid_policy() -> XidPolicy:
    """The packaged Xid policy, loaded once."""
    return XidPolicy.load_default()


_M = TypeVar("_M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class ActiveEvidence:
    """The latest result of each active test that still counts for the host (None: none)."""

    dcgm_diag: DcgmDiagResult | None = None
    nccl: NcclResult | None = None
    gpu_burn: GpuBurnResult | None = None
    #: What a result had to be newer than to count ("the driver change on 2026-12-01");
    #: None when the host never changed.
    since: str | None = None

    @classmethod
    def from_kinds(cls, by_kind: Mapping[str, object] | None) -> ActiveEvidence:
        """From ``{"dcgm_diag": ..., "nccl": ..., "gpu_burn": ...}`` (models or their JSON
        dumps); other kinds are no check's business and are left out."""
        if not by_kind:
            return cls()

        def load(model: type[_M], kind: str) -> _M | None:
            value = by_kind.get(kind)
            return None if value is None else model.model_validate(value)

        return cls(
            dcgm_diag=load(DcgmDiagResult, "dcgm_diag"),
            nccl=load(NcclResult, "nccl"),
            gpu_burn=load(GpuBurnResult, "gpu_burn"),
        )


@dataclass(frozen=True, slots=True)
class CheckContext:
    """Everything a check may read besides the facts and its own parameters."""

    now: datetime
    spec: ExpectedSpec = field(default_factory=ExpectedSpec)
    baseline: Baseline | None = None
    evidence: ActiveEvidence = field(default_factory=ActiveEvidence)
    xid_policy: XidPolicy = field(default_factory=default_xid_policy)
    #: GPUs left out of ``facts`` as unusable (a partial host), one description each.
    unusable: tuple[str, ...] = ()
    #: The vendors' fault catalogues with the site overlay (None: the shipped ones), as the
    #: inspection judges with them (``accelerator_health``).
    fault_catalogues: Catalogues | None = None


CheckFn = Callable[[HostFacts, CheckContext, Mapping[str, Any]], CheckResult]
ParamTypes = type | tuple[type, ...]

CHECKS: dict[str, CheckFn] = {}
#: check name -> accepted profile parameters and their types.
CHECK_PARAMS: dict[str, dict[str, ParamTypes]] = {}

NUMBER = (int, float)


def check(name: str, **params: ParamTypes) -> Callable[[CheckFn], CheckFn]:
    """Register ``fn`` as check ``name`` accepting the profile parameters ``params``."""

    def register(fn: CheckFn) -> CheckFn:
        if name in CHECKS:
            raise RuntimeError(f"check {name!r} registered twice")
        CHECKS[name] = fn
        CHECK_PARAMS[name] = dict(params)
        return fn

    return register


def res(
    name: str,
    status: CheckStatus,
    message: str | Reason,
    fault: Fault | None = None,
    **evidence: Any,
) -> CheckResult:
    """A :class:`CheckResult` with ``evidence`` from the keyword arguments. ``message``: a
    :class:`~gpufleet.domain.reasons.Reason`, or text (its code found when a template
    matches it)."""
    why = message if isinstance(message, Reason) else parse(message)
    return CheckResult(
        name=name,
        status=status,
        message=str(message),
        evidence=evidence,
        fault=fault,
        code=why.code if why else None,
        params=why.as_json()["params"] if why else {},
    )


def indices(gpus: Iterable[Gpu]) -> str:
    """``"0, 3, 5"``."""
    return ", ".join(str(g.index) for g in gpus)


def pci_addr(addr: str) -> str:
    """A PCI address in lspci's form: nvidia-smi prints an 8-digit domain
    ("00000000:19:00.0"), lspci a 4-digit one."""
    domain, _, rest = addr.lower().partition(":")
    return f"{domain[-4:].zfill(4)}:{rest}" if rest else addr.lower()
