"""Change campaigns: a canary, then waves, each taking only what the fleet can spare.

Pure planning and judging; the service (:mod:`gpufleet.service.campaigns.campaign`) reads the hosts,
stores the plan and drives the hosts through it.

The plan (:func:`plan_campaign`):

* **Who takes part.** Only ``available`` hosts are changed. ``allocated`` hosts wait for
  their lease (they are put in the last wave and taken if free by then; still allocated then,
  they are *deferred*: a later ``campaign run`` takes them) or are skipped, by policy
  (``--allocated wait|skip``). Quarantined hosts are skipped; so are hosts someone else put
  in maintenance (never taken over), hosts whose node someone else cordoned (Kubernetes)
  or drained (Slurm), as the last sync saw it (``external-hold`` events), and every other
  state (enrolled, validating, reclaiming, retired): the skip reason says which.
* **Canary first.** ``canary`` hosts, from different racks, form wave 0.
* **Waves by percentage.** ``10%,25%,100%`` are cumulative shares of the remaining hosts;
  wave *i* takes up to ``ceil(share_i x n)`` minus what earlier waves took (a bare number
  is a count of hosts).
* **Spread.** Within a wave hosts are taken round robin across racks; one wave takes at most
  ``max_rack_share`` of a rack (never a whole rack of two or more hosts) and at most
  ``1 - pool_floor`` of a pool's hosts, so the pool keeps its capacity floor while a wave is
  out. What does not fit spills into the next wave (extra waves are added at the end).

Judging a host after its action (:func:`driver_problem`): the *loaded* driver (the one
``nvidia-smi`` reports, which is the kernel module's) must be the target's and, when the
target changes the driver, differ from the one loaded before: a host whose new package is
installed but whose old module is still loaded has not changed. The rest (fabric manager
version equal to the driver, fabric state ``Completed`` on NVSwitch systems, pinned
sysctls, GPU count) is the ordinary validation against the target baseline
(``fabric_ready``, ``fabricmanager_version``, ``sysctls``, ``gpu_count`` checks).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError


class CampaignStatus(StrEnum):
    """Where a campaign is."""

    PLANNED = "planned"
    """Created, plan stored, nothing run."""
    RUNNING = "running"
    """A ``campaign run``/``resume`` is driving it (or crashed while doing so)."""
    AWAITING_APPROVAL = "awaiting-approval"
    """The canary passed; ``campaign approve`` lets the waves go."""
    PAUSED = "paused"
    """Stopped by ``campaign pause`` after the step in progress; ``resume`` continues."""
    HALTED = "halted"
    """Too many failures (or a failed canary); hosts already changed stay as they are."""
    ABORTED = "aborted"
    """Stopped for good by ``campaign abort``; hosts not yet acted on were released."""
    COMPLETED = "completed"
    """Every wave ran (deferred hosts, if any, are listed)."""


#: Statuses a campaign never leaves.
FINAL_STATUSES = frozenset({CampaignStatus.ABORTED, CampaignStatus.COMPLETED})


class HostStep(StrEnum):
    """How far one host got; every step is committed before the next begins."""

    PENDING = "pending"
    """Planned, not touched yet."""
    SKIPPED = "skipped"
    """Not taken (the reason says why)."""
    DEFERRED = "deferred"
    """Allocated when its wave came; a later ``campaign run`` takes it."""
    MAINTENANCE = "maintenance"
    """Put in maintenance by this campaign; the action has not started."""
    ACTION_STARTED = "action-started"
    """The action was started; if the run dies here, resume re-checks the host (collect +
    the driver judgement) instead of running the action again blindly."""
    ACTION_DONE = "action-done"
    """The action finished (or the re-check showed it had); to be validated."""
    DONE = "done"
    """Validated on the target baseline and back to available."""
    FAILED = "failed"
    """The action or the validation failed; counted against ``max_failures``."""
    ROLLED_BACK = "rolled-back"
    """Failed, rolled back and re-validated on the previous baseline."""
    RELEASED = "released"
    """Taken out by this campaign, then given back untouched (abort)."""


#: Steps in which the campaign holds the host in maintenance.
HELD_STEPS = frozenset({HostStep.MAINTENANCE, HostStep.ACTION_STARTED, HostStep.ACTION_DONE})


class ActionKind(StrEnum):
    """What a campaign does to each host."""

    PLAYBOOK = "playbook"
    COMMAND = "command"
    REIMAGE = "reimage"
    #: issue 26 item 7: the target baseline's MIG layout, by nvidia-smi (domain/mig.py).
    MIG = "mig"


class CampaignUnit(StrEnum):
    """What a wave is made of (issue 27): hosts, or whole racks (``--unit rack``: an NVL72
    rack's trays go one by one inside one maintenance window of the rack,
    :mod:`gpufleet.domain.campaign_racks`)."""

    HOST = "host"
    RACK = "rack"


class AllocatedPolicy(StrEnum):
    """What happens to allocated hosts."""

    WAIT = "wait"
    SKIP = "skip"


_SHARE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%?)\s*$")


@dataclass(frozen=True, slots=True)
class WaveSize:
    """One wave: a cumulative share (``percent``) or a number of hosts (``count``)."""

    percent: float | None = None
    count: int | None = None

    def __str__(self) -> str:
        return f"{self.percent:g}%" if self.percent is not None else str(self.count)


def parse_waves(text: str) -> list[WaveSize]:
    """``10%,25%,100%`` (cumulative shares) or counts (``2,5``); the shares must grow and
    the last wave takes everything left whatever it says."""
    out: list[WaveSize] = []
    last = 0.0
    for part in text.split(","):
        m = _SHARE.match(part)
        if not m:
            raise ConfigError(f"--waves: '{part.strip()}' is not a percentage or a count")
        value = float(m.group(1))
        if m.group(2):
            if not 0 < value <= 100 or value <= last:
                raise ConfigError(
                    f"--waves: {part.strip()} must be above the previous wave's share and at "
                    "most 100%"
                )
            last = value
            out.append(WaveSize(percent=value))
        else:
            if value != int(value) or value < 1:
                raise ConfigError(f"--waves: a count must be a whole number >= 1: {part.strip()}")
            out.append(WaveSize(count=int(value)))
    if not out:
        raise ConfigError("--waves: give at least one wave")
    return out


def parse_share(text: str, what: str) -> float:
    """``50%`` -> 0.5 (0 < share <= 100% for rack shares; pool floors may be 0%)."""
    m = _SHARE.match(text)
    if not m or not m.group(2) or not 0 <= float(m.group(1)) <= 100:
        raise ConfigError(f"{what}: '{text}' is not a percentage (0%..100%)")
    return float(m.group(1)) / 100


@dataclass(frozen=True, slots=True)
class Candidate:
    """A host as the planner sees it."""

    name: str
    state: HostState
    rack: str | None = None
    pool: str | None = None
    status_reason: str | None = None
    fault: str | None = None
    #: Why the host's node is held by someone else (cordoned, drained), as last synced.
    held: str | None = None


@dataclass(frozen=True, slots=True)
class Skip:
    """A host left out of the campaign, and why."""

    host: str
    reason: str


@dataclass
class Plan:
    """Hosts per wave (wave 0 is the canary), the hosts left out, and notes on the spread."""

    waves: list[list[str]] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # allocated, in the last wave
    notes: list[str] = field(default_factory=list)
    #: ``--unit rack``: each rack's trays in slot order (the waves hold the trays)
    racks: dict[str, list[str]] = field(default_factory=dict)

    @property
    def hosts(self) -> list[str]:
        return [h for wave in self.waves for h in wave]


@dataclass(frozen=True, slots=True)
class Limits:
    """Spread limits of one wave."""

    max_rack_share: float = 0.5
    pool_floor: float = 0.5


def skip_reason(c: Candidate, policy: AllocatedPolicy, marker: str) -> str | None:
    st = c.state
    if c.held and st in (HostState.AVAILABLE, HostState.ALLOCATED):
        return f"{c.held}: skipped, not taken over"
    if st is HostState.AVAILABLE:
        return None
    if st is HostState.ALLOCATED:
        return None if policy is AllocatedPolicy.WAIT else "allocated: skipped by policy"
    if st is HostState.QUARANTINED:
        return f"quarantined ({c.fault or 'fault'}): skipped"
    if st is HostState.MAINTENANCE:
        if c.status_reason and marker in c.status_reason:
            return None  # ours (a resumed plan): never happens at create, kept for safety
        why = f": {c.status_reason}" if c.status_reason else ""
        return f"in maintenance by someone else{why}: skipped, not taken over"
    return f"{st.value}: not taken (only available hosts are changed)"


def _round_robin(names_by_rack: dict[str, list[str]]) -> list[str]:
    out: list[str] = []
    queues = {r: list(v) for r, v in sorted(names_by_rack.items())}
    while any(queues.values()):
        for rack in sorted(queues):
            if queues[rack]:
                out.append(queues[rack].pop(0))
    return out


def plan_campaign(
    candidates: Sequence[Candidate],
    *,
    canary: int,
    waves: Sequence[WaveSize],
    policy: AllocatedPolicy = AllocatedPolicy.WAIT,
    limits: Limits = Limits(),
    marker: str = "",
) -> Plan:
    """The plan for ``candidates`` (see the module docstring); deterministic."""
    if canary < 0:
        raise ConfigError("--canary must be 0 or more")
    plan = Plan()
    ready: list[Candidate] = []
    for c in sorted(candidates, key=lambda c: c.name):
        why = skip_reason(c, policy, marker or "\0")
        if why is not None:
            plan.skipped.append(Skip(c.name, why))
        elif c.state is HostState.ALLOCATED:
            plan.waiting.append(c.name)
        else:
            ready.append(c)
    rack_of = {c.name: c.rack or "-" for c in candidates}
    pool_of = {c.name: c.pool or "-" for c in candidates}
    rack_size: dict[str, int] = {}
    pool_size: dict[str, int] = {}
    for c in candidates:
        if c.state not in (HostState.RETIRED,):
            rack_size[rack_of[c.name]] = rack_size.get(rack_of[c.name], 0) + 1
            pool_size[pool_of[c.name]] = pool_size.get(pool_of[c.name], 0) + 1

    by_rack: dict[str, list[str]] = {}
    for c in ready:
        by_rack.setdefault(rack_of[c.name], []).append(c.name)
    order = _round_robin(by_rack)

    def cap_rack(rack: str) -> int:
        size = rack_size.get(rack, 1)
        if size <= 1:
            return 1
        return max(1, min(size - 1, math.floor(size * limits.max_rack_share)))

    def cap_pool(pool: str) -> int:
        size = pool_size.get(pool, 1)
        return max(1, math.floor(size * (1 - limits.pool_floor)))

    def fill(pool_left: list[str], want: int) -> list[str]:
        took: list[str] = []
        per_rack: dict[str, int] = {}
        per_pool: dict[str, int] = {}
        for name in list(pool_left):
            if len(took) >= want:
                break
            r, p = rack_of[name], pool_of[name]
            if per_rack.get(r, 0) >= cap_rack(r) or per_pool.get(p, 0) >= cap_pool(p):
                continue
            took.append(name)
            per_rack[r] = per_rack.get(r, 0) + 1
            per_pool[p] = per_pool.get(p, 0) + 1
        for name in took:
            pool_left.remove(name)
        return took

    left = list(order)
    first = fill(left, min(canary, len(left))) if canary else []
    plan.waves.append(first)
    n = len(left)
    taken = 0
    for i, size in enumerate(waves):
        last = i == len(waves) - 1
        if last:
            want = len(left)
        elif size.percent is not None:
            want = max(0, math.ceil(size.percent / 100 * n) - taken)
        else:
            want = size.count or 0
        want = min(want, len(left))
        wave = fill(left, want)
        taken += len(wave)
        plan.waves.append(wave)
    while left:
        before = len(left)
        wave = fill(left, len(left))
        plan.waves.append(wave)
        if len(left) == before:  # cannot happen: every cap is >= 1
            raise AssertionError("plan made no progress")
        plan.notes.append(
            f"wave {len(plan.waves) - 1} added: rack/pool limits held hosts back "
            f"(at most {limits.max_rack_share:.0%} of a rack, pool floor {limits.pool_floor:.0%})"
        )
    if plan.waiting:
        plan.waves[-1] = plan.waves[-1] + plan.waiting
        plan.notes.append(
            f"{len(plan.waiting)} allocated host(s) wait for their lease in the last wave: "
            + ", ".join(plan.waiting)
        )
    # Drop empty waves after the canary (a tiny fleet); keep the canary slot (may be empty).
    plan.waves = [plan.waves[0]] + [w for w in plan.waves[1:] if w]
    return plan


def driver_problem(before: str | None, after: str | None, target: str | None) -> str | None:
    """Why the loaded driver does not show the change, or None when it does.

    ``before``/``after``: the driver version ``nvidia-smi`` reported before the action and
    now (the loaded kernel module's); ``target``: the target baseline's driver (None: the
    campaign does not pin one, nothing to judge)."""
    if target is None:
        return None
    if after is None:
        return "loaded driver unknown after the change (nvidia-smi did not answer)"
    if after.strip() != target.strip():
        still = " (the old driver is still loaded)" if before and after == before else ""
        return f"loaded driver {after}, target {target}{still}"
    return None


def should_halt(failed: int, max_failures: int, *, canary: bool) -> bool:
    """A failed canary always halts; later, more than ``max_failures`` failed hosts do."""
    if canary and failed > 0:
        return True
    return failed > max_failures


def progress_bar(done: int, total: int, width: int = 20) -> str:
    """``[#######.............]`` for ``done`` of ``total``."""
    if total <= 0:
        return "[" + "-" * width + "]"
    full = round(width * done / total)
    return "[" + "#" * full + "." * (width - full) + "]"
