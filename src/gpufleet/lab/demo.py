"""``gpufleet lab demo`` as a use case: the whole onboarding on a fresh lab fleet (create,
enroll, collect, one validated reference baseline per pool, the active tests the training
profiles ask for, validate, summarise; from :data:`RACK_FROM` hosts on, one GB200 NVL72 rack
and its one incident). The lab's CLI only prints the report this returns, step by step as
``on_step`` hands it over."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from gpufleet.collect.transport import RawResult
from gpufleet.domain.spec import Baseline, BaselineStatus
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import LabFleet, _mix, apply_change, create_fleet, write_inventory
from gpufleet.lab.racks import create_racks
from gpufleet.lab.transport import ACTIVE_CAPTURE_MODELS
from gpufleet.lab.vendors import lab_vendors
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health.inspect import SweepReport, inspect
from gpufleet.service.hosts.baselines import baseline_from_host, save_baseline, set_pool_baseline
from gpufleet.service.hosts.collect import RunReport, collect
from gpufleet.service.hosts.enroll import EnrollReport, enroll
from gpufleet.service.hosts.evidence import ActiveRun, run_active
from gpufleet.service.hosts.validate import ValidateReport, validate
from gpufleet.service.views.summary import FleetSummary, fleet_summary


class Progress(Protocol):
    """What a progress display offers a long step (hosts started, each result)."""

    @property
    def on_start(self) -> Callable[[int], None]: ...

    @property
    def on_result(self) -> Callable[[RawResult], None]: ...


#: Opens a progress display for a step labelled ``label`` ("collecting", "validating").
ProgressFactory = Callable[[str], AbstractContextManager[Progress | None]]


@dataclass
class DemoBaseline:
    """The reference baseline the demo made for one pool."""

    pool: str
    baseline: Baseline
    reference: str  # the host it was copied from


@dataclass
class DemoRack:
    """Issue 27 item 8: the demo's rack, validated, then a switch fault two trays see."""

    lab_dir: Path
    lab: LabFleet
    validation: ValidateReport
    faulty: list[str]  # the trays that see the switch fault
    sweep: SweepReport  # the inspection that found it: one rack incident

    @property
    def anchor(self) -> str:
        """The rack's first tray (``gpufleet racks show`` takes any of its hosts)."""
        return self.lab.hosts[0].name


@dataclass
class DemoReport:
    """What the demo did so far (filled step by step)."""

    lab_dir: Path
    lab: LabFleet
    enrolled: EnrollReport | None = None
    collection: RunReport | None = None
    baselines: list[DemoBaseline] = field(default_factory=list)
    evidence: list[ActiveRun] = field(default_factory=list)
    validation: ValidateReport | None = None
    summary: FleetSummary | None = None
    rack: DemoRack | None = None  # from RACK_FROM hosts on


#: The DCGM diag level the demo runs: what training-multinode asks for.
DEMO_DCGM_LEVEL = 2

#: The steps, in order, as ``on_step`` names them (``rack``: ``DemoReport.rack`` is None below
#: :data:`RACK_FROM` hosts).
STEPS = ("lab", "enroll", "collect", "baselines", "evidence", "validate", "summary", "rack")


def build_lab(
    directory: Path,
    n: int,
    *,
    faults: dict[str, list[str]] | None = None,
    seed: int = 0,
    models: list[str] | None = None,
) -> LabFleet:
    """Build a lab fleet of ``n`` hosts in ``directory``: its files and a ``sim`` inventory.
    ``faults`` None: the lab's default faults."""
    directory.mkdir(parents=True, exist_ok=True)
    mixed = not models and n >= MIXED_FROM
    if mixed:
        models = mixed_models(n)
    fl = create_fleet(n, models=models or None, faults=faults, seed=seed, now=datetime.now(UTC))
    if mixed and faults is None:
        # the vendors' demo hosts carry their demo faults (an Ascend NPU in Alarm: quarantined)
        vendor_hosts = _vendor_hosts(n)
        last = fl.hosts[n - len(vendor_hosts) :]
        for host, (_, demo_faults) in zip(last, vendor_hosts, strict=True):
            if demo_faults:
                fl = apply_change(fl, host.name, add_faults=list(demo_faults))
    fl.save(directory)
    write_inventory(fl, directory / "inventory.ini", transport="sim", lab_dir=directory)
    return fl


def enroll_lab(
    fleet: Fleet,
    directory: Path,
    n: int,
    *,
    models: Sequence[str],
    faults: Mapping[str, list[str]],
    now: datetime | None = None,
) -> LabFleet:
    """A lab fleet of ``n`` hosts enrolled into ``fleet``: :func:`create_fleet` with
    ``models``, ``faults`` and ``now`` (as given: no demo defaults), saved in ``directory``
    (made if absent) with its ``sim`` inventory ``directory/inventory.ini``, then enrolled.
    The fleet the tests and benches build; neither collected nor validated."""
    fl = create_fleet(n, models=models, faults=faults, now=now)
    fl.save(directory)
    write_inventory(fl, directory / "inventory.ini", transport="sim", lab_dir=directory)
    enroll(fleet, load_inventory(directory / "inventory.ini"))
    return fl


#: From this many hosts on the demo fleet is mixed (issue 15): the last hosts are the other
#: vendors' demo hosts (their lab models' ``demo``: two Ascend 910B3 hosts, the second with an
#: NPU in Alarm, and one AMD MI100 host) beside the NVIDIA pools; from 16 hosts on
#: (``DEMO_FROM`` of lab/vendors) one healthy host of each of issue 28's vendors too (a
#: Hygon K100_AI, a Cambricon MLU370-X8, a Kunlunxin P800, a MetaX C500, an Iluvatar BI-V150
#: and an Enflame S60 host), so ``make demo``'s 32 hosts show every vendor.
MIXED_FROM = 8


def _vendor_hosts(n: int) -> list[tuple[str, tuple[str, ...]]]:
    """(model, faults) of the vendors' demo hosts of an ``n``-host demo fleet (those whose
    ``demo_from`` it reaches), in their lab models' order."""
    return [host for lab in lab_vendors() if n >= lab.demo_from for host in lab.demo]


def mixed_models(n: int) -> list[str]:
    """The model of each of ``n`` demo hosts: the lab's default NVIDIA mix, then the
    other vendors' hosts."""
    vendor = [model for model, _ in _vendor_hosts(n)]
    return _mix(n - len(vendor), None) + vendor


def reference_hosts(fl: LabFleet) -> dict[str, str]:
    """The first fault-free host of each pool: the lab's reference build for that pool."""
    out: dict[str, str] = {}
    for h in fl.hosts:
        pool = h.spec.pool
        if pool not in out and not h.faults:
            out[pool] = h.name
    return out


def evidence_hosts(fl: LabFleet) -> dict[str, list[str]]:
    """The hosts each of the demo's active tests runs on: the DCGM diag on every NVIDIA host,
    the NCCL all-reduce only where the lab's capture is of that GPU model (an A100 run says
    nothing about an H100). Evidence kind -> host names."""
    nvidia = [h for h in fl.hosts if h.spec.vendor == "nvidia"]
    nccl_model = ACTIVE_CAPTURE_MODELS["all_reduce_perf"]
    return {
        "dcgm": [h.name for h in nvidia],
        "nccl": [h.name for h in nvidia if nccl_model in h.spec.gpu_model],
    }


def validated_baselines(fleet: Fleet, fl: LabFleet) -> list[DemoBaseline]:
    """One ``validated`` baseline per pool, copied from its reference host's collected facts
    and assigned to the pool (the training profiles ask for one)."""
    out = []
    for pool, ref in reference_hosts(fl).items():
        b = baseline_from_host(fleet, ref, f"{pool}-ref", purpose=f"lab reference build of {pool}")
        b = b.model_copy(update={"status": BaselineStatus.VALIDATED})
        save_baseline(fleet, b, replace=True)
        set_pool_baseline(fleet, pool, b.name)
        out.append(DemoBaseline(pool, b, ref))
    return out


def run_evidence(
    fleet: Fleet, fl: LabFleet, progress: ProgressFactory | None = None
) -> list[ActiveRun]:
    """The proof the training profiles ask for (:func:`evidence_hosts`): DCGM at level 2 and
    NCCL, replayed by the lab from real captures (lab/transport.py) and stored as evidence
    after the hosts' last change."""
    runs: list[ActiveRun] = []
    for kind, names in evidence_hosts(fl).items():
        if names:
            with (progress or _no_progress)(f"{kind} test") as p:
                runs += run_active(
                    fleet,
                    ",".join(names),
                    kind,
                    level=DEMO_DCGM_LEVEL,
                    on_start=p.on_start if p else None,
                    on_result=p.on_result if p else None,
                )
    return runs


def _no_progress(_label: str) -> AbstractContextManager[Progress | None]:
    return nullcontext(None)


# --------------------------------------------------------------------------- the rack

#: From this many hosts on (the mixed fleet's threshold; ``make demo``: 32) the demo adds one
#: rack (issue 27 item 8).
RACK_FROM = MIXED_FROM
#: The demo's rack model: 18 compute trays (the manifest's count), one NVLink domain.
DEMO_RACK = "gb200-nvl72"
#: The trays that see the demo's switch fault (a route_unhealthy fabric).
DEMO_RACK_FAULTY = ("nvl01-t03", "nvl01-t07")


def run_rack(fleet: Fleet, directory: Path, progress: ProgressFactory = _no_progress) -> DemoRack:
    """One NVL72 rack in ``directory`` (its own lab and inventory), enrolled and validated;
    then a switch fault that two trays see (``fabric-route-unhealthy``) and one inspection
    sweep of the rack: one rack incident with one alarm, the rack's trays restricted (out of
    NVLink-domain placement), none quarantined."""
    directory.mkdir(parents=True, exist_ok=True)
    fl = create_racks(DEMO_RACK, 1)
    fl.save(directory)
    write_inventory(fl, directory / "inventory.ini", transport="sim", lab_dir=directory)
    enroll(fleet, load_inventory(directory / "inventory.ini"))
    trays = ",".join(h.name for h in fl.hosts)
    with progress("validating the rack") as p:
        validation = validate(fleet, trays, on_start=p.on_start if p else None,
                              on_result=p.on_result if p else None)
    for tray in DEMO_RACK_FAULTY:
        fl = apply_change(fl, tray, add_faults=["fabric-route-unhealthy"])
    fl.save(directory)
    sweep = inspect(fleet, trays)
    return DemoRack(directory, fl, validation, list(DEMO_RACK_FAULTY), sweep)


def run_demo(
    fleet: Fleet,
    directory: Path,
    hosts: int,
    *,
    seed: int = 0,
    on_step: Callable[[str, DemoReport], None] | None = None,
    progress: ProgressFactory = _no_progress,
    rack: bool | None = None,
) -> DemoReport:
    """Run every demo step on a fresh lab in ``directory``; ``on_step(step, report)`` after
    each of :data:`STEPS`. ``rack`` (default: from :data:`RACK_FROM` hosts on): add the rack
    (:func:`run_rack`, its lab in ``directory/rack``)."""

    def done(step: str) -> None:
        if on_step:
            on_step(step, report)

    report = DemoReport(directory, build_lab(directory, hosts, seed=seed))
    done("lab")
    report.enrolled = enroll(fleet, load_inventory(directory / "inventory.ini"))
    done("enroll")
    with progress("collecting") as p:
        report.collection = collect(
            fleet,
            on_start=p.on_start if p else None,
            on_result=p.on_result if p else None,
        )
    done("collect")
    report.baselines = validated_baselines(fleet, report.lab)
    done("baselines")
    report.evidence = run_evidence(fleet, report.lab, progress)
    done("evidence")
    with progress("validating") as p:
        report.validation = validate(
            fleet,
            collect_first=False,
            on_start=p.on_start if p else None,
            on_result=p.on_result if p else None,
        )
    done("validate")
    report.summary = fleet_summary(fleet)
    done("summary")
    if hosts >= RACK_FROM if rack is None else rack:
        report.rack = run_rack(fleet, directory / "rack", progress)
    done("rack")
    return report
