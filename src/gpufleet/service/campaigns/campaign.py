"""Change campaigns: plan, then drive hosts wave by wave through maintenance, the action,
re-collection and validation against the target baseline; crash-safe (every host step is
committed before the next begins).

Per host, in one wave (each arrow is a committed step in ``campaign_hosts``):

``pending`` -> ``maintenance`` (``lifecycle.transition`` maintenance_on, reason = campaign and
ticket; a host that is no longer available is skipped, or deferred when allocated) ->
``action-started`` (recorded *before* the action runs) -> ``action-done`` (the change is
recorded as a ``change-declared`` event carrying the ticket, and the host's
``gpufleet_baseline`` becomes the target) -> maintenance_off, fresh collection, the loaded
driver judged (:func:`gpufleet.domain.campaign.driver_problem`), validation against the
target baseline -> ``done`` (available) or ``failed``.

Crash safety, and the choice made for an interrupted action: a run that dies leaves the
campaign ``running`` with its owner's pid. ``campaign resume`` (or ``run``) takes over once
that process is gone, and first settles the hosts it held: a host in ``maintenance`` (action
not started) simply goes on; a host whose action *started but never finished* is **re-checked,
not re-run blindly**: its facts are collected and, if the loaded driver already is the
target's, the action counts as done (it had finished before the crash); if not, a playbook
action is run again (playbooks are idempotent by contract: the shipped roles change nothing on
a second run), while a ``--command`` or ``--reimage`` action, which gpufleet cannot know to be
idempotent, fails the host with the reason instead. A finished host (``done``, ``failed``,
``rolled-back``) is never acted on again. Hosts that were in this campaign's maintenance end
the wave validated, failed or released: none stays in ``maintenance``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.campaign import (
    FINAL_STATUSES,
    ActionKind,
    AllocatedPolicy,
    CampaignStatus,
    CampaignUnit,
    Candidate,
    HostStep,
    Limits,
    parse_share,
    parse_waves,
    plan_campaign,
)
from gpufleet.domain.changes import DeclaredChangeKind
from gpufleet.domain.events import EventKind
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError, Conflict, InvalidTransition
from gpufleet.service.allocation.holds import held
from gpufleet.service.campaigns.campaign_actions import PLAYBOOKS_DIR, ansible_playbook, mig_action
from gpufleet.service.campaigns.campaign_racks import RackRunner, plan_rack_campaign
from gpufleet.service.campaigns.campaign_run import (
    Progress,
    Runner,
    baseline_named,
    campaign_marker,
    campaign_row,
    set_status,
)
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.select import selected_names
from gpufleet.store.tables import CampaignHost, CampaignRow, Host

#: A runner silent this long (on another machine) is taken for dead by ``resume``.
STALE_OWNER = timedelta(minutes=15)


@dataclass
class CampaignSpec:
    """What ``campaign create`` asks for."""

    name: str
    target_baseline: str
    selector: str
    action_kind: ActionKind
    action: str
    ticket: str
    rollback: str | None = None
    canary: int = 1
    waves: str = "10%,25%,100%"
    max_failures: int = 1
    require_approval: bool = False
    auto_rollback: bool = False
    allocated: AllocatedPolicy = AllocatedPolicy.WAIT
    max_rack_share: str = "50%"
    pool_floor: str = "50%"
    change_kind: DeclaredChangeKind = DeclaredChangeKind.DRIVER_UPGRADE
    forks: int = 10
    timeout_s: float = 1800.0
    #: issue 26: on completion, make the target baseline the baseline of the pools of the
    #: hosts it moved (else the command that would is printed)
    advance_baseline: bool = False
    #: issue 27: ``rack``: waves of whole racks, one maintenance window per rack
    unit: CampaignUnit = CampaignUnit.HOST


@dataclass
class HostView:
    host: str
    wave: int
    step: HostStep
    reason: str | None
    action_runs: int

    def as_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "wave": self.wave,
            "step": self.step,
            "reason": self.reason,
            "action_runs": self.action_runs,
        }


@dataclass
class CampaignView:
    """A campaign as ``campaign status/report --json`` shows it."""

    name: str
    status: CampaignStatus
    ticket: str
    target_baseline: str
    action_kind: ActionKind
    action: str
    rollback: str | None
    selector: str
    options: dict[str, Any]
    current_wave: int
    halt_reason: str | None
    approved_by: str | None
    created_by: str
    hosts: list[HostView] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    racks: dict[str, list[str]] = field(default_factory=dict)  # --unit rack: trays

    @property
    def waves(self) -> list[list[HostView]]:
        n = max((h.wave for h in self.hosts), default=-1) + 1
        return [[h for h in self.hosts if h.wave == w] for w in range(n)]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for h in self.hosts:
            out[h.step] = out.get(h.step, 0) + 1
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "ticket": self.ticket,
            "target_baseline": self.target_baseline,
            "action": {"kind": self.action_kind, "value": self.action, "rollback": self.rollback},
            "selector": self.selector,
            "options": self.options,
            "current_wave": self.current_wave,
            "halt_reason": self.halt_reason,
            "approved_by": self.approved_by,
            "created_by": self.created_by,
            "counts": self.counts(),
            "waves": [
                {"wave": i, "canary": i == 0, "hosts": [h.as_json() for h in w]}
                for i, w in enumerate(self.waves)
            ],
            "skipped": self.skipped,
            "notes": self.notes,
            "racks": self.racks,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CampaignView:
        """The inverse of :meth:`as_json` (remote mode rebuilds the view from the API)."""
        a, same = d["action"], ("name", "ticket", "target_baseline", "selector", "options",
                                "current_wave", "halt_reason", "approved_by", "created_by")
        return cls(
            **{k: d[k] for k in same}, status=CampaignStatus(d["status"]),
            action_kind=ActionKind(a["kind"]), action=a["value"], rollback=a["rollback"],
            hosts=[HostView(**(h | {"step": HostStep(h["step"])}))
                   for w in d["waves"] for h in w["hosts"]],
            skipped=list(d["skipped"]), notes=list(d["notes"]),
        )


# --------------------------------------------------------------------------- reading




def _rows(s: Session, camp: CampaignRow) -> list[CampaignHost]:
    return list(
        s.scalars(
            select(CampaignHost)
            .where(CampaignHost.campaign_id == camp.id)
            .order_by(CampaignHost.wave, CampaignHost.id)
        )
    )


def _view(s: Session, camp: CampaignRow) -> CampaignView:
    rows = _rows(s, camp)
    return CampaignView(
        name=camp.name,
        status=camp.status,
        ticket=camp.ticket,
        target_baseline=camp.target_baseline,
        action_kind=camp.action_kind,
        action=camp.action,
        rollback=camp.rollback,
        selector=camp.selector,
        options=dict(camp.options),
        current_wave=camp.current_wave,
        halt_reason=camp.halt_reason,
        approved_by=camp.approved_by,
        created_by=camp.created_by,
        hosts=[
            HostView(r.host_name, r.wave, r.step, r.reason, r.action_runs)
            for r in rows
            if r.step != HostStep.SKIPPED or r.wave >= 0
        ],
        skipped=[{"host": r.host_name, "reason": r.reason or ""} for r in rows if r.wave < 0],
        notes=list(camp.plan.get("notes", [])),
        racks=dict(camp.plan.get("racks", {})),
    )


def show_campaign(fleet: Fleet, name: str) -> CampaignView:
    """One campaign with every host's wave and step."""
    with fleet.db.session() as s:
        return _view(s, campaign_row(s, name))


def list_campaigns(fleet: Fleet) -> list[CampaignView]:
    """Every campaign, newest first."""
    with fleet.db.session() as s:
        rows = s.scalars(select(CampaignRow).order_by(CampaignRow.id.desc()))
        return [_view(s, c) for c in rows]






# --------------------------------------------------------------------------- create


def create_campaign(fleet: Fleet, spec: CampaignSpec, *, dry_run: bool = False) -> CampaignView:
    """Check the request, compute the plan and store it (``dry_run``: show it, store nothing)."""
    waves = parse_waves(spec.waves)
    limits = Limits(
        parse_share(spec.max_rack_share, "--max-rack-share"),
        parse_share(spec.pool_floor, "--pool-floor"),
    )
    if spec.max_failures < 0:
        raise ConfigError("--max-failures must be 0 or more")
    if not spec.ticket.strip():
        raise ConfigError("--ticket: every campaign change carries a ticket")
    action = spec.action
    rollback = spec.rollback
    if spec.action_kind is ActionKind.PLAYBOOK:
        action = str(_playbook(action, "--playbook"))
    if spec.action_kind is ActionKind.MIG:
        action = mig_action(fleet, spec.target_baseline)
    if rollback is not None:
        rollback = str(_playbook(rollback, "--rollback-playbook"))
    if spec.auto_rollback and rollback is None:
        raise ConfigError("--auto-rollback needs --rollback-playbook")
    if spec.action_kind is ActionKind.PLAYBOOK or rollback is not None:
        ansible_playbook()  # fail closed now, not at the first wave
    marker = campaign_marker(spec.name, spec.ticket)
    with fleet.db.session() as s:
        baseline_named(s, spec.target_baseline)
        if s.scalar(select(CampaignRow.id).where(CampaignRow.name == spec.name)) is not None:
            raise ConfigError(f"a campaign named '{spec.name}' exists; pick another name")
        names = selected_names(s, spec.selector)
        hosts = list(s.scalars(select(Host).where(Host.name.in_(names))))
        holds = held(s, [h.id for h in hosts])
        candidates = [
            Candidate(h.name, HostState(h.state), h.rack or h.vars.get("gpufleet_rack"), h.pool,
                      h.status_reason, str(h.fault) if h.fault else None, holds.get(h.id))
            for h in hosts
        ]
        kw: dict[str, Any] = {"canary": spec.canary, "waves": waves, "policy": spec.allocated,
                              "limits": limits, "marker": marker}
        plan = (plan_campaign(candidates, **kw) if spec.unit is CampaignUnit.HOST
                else plan_rack_campaign(s, fleet, candidates, **kw))
        if not plan.hosts:
            raise ConfigError(
                f"campaign {spec.name}: no host of '{spec.selector}' can be changed ("
                + "; ".join(f"{k.host}: {k.reason}" for k in plan.skipped[:5])
                + ")"
            )
        now = fleet.now()
        camp = CampaignRow(
            name=spec.name,
            status=CampaignStatus.PLANNED,
            action_kind=spec.action_kind,
            action=action,
            rollback=rollback,
            target_baseline=spec.target_baseline,
            selector=spec.selector,
            ticket=spec.ticket,
            options={
                "canary": spec.canary,
                "waves": spec.waves,
                "max_failures": spec.max_failures,
                "require_approval": spec.require_approval,
                "auto_rollback": spec.auto_rollback,
                "allocated": spec.allocated.value,
                "max_rack_share": spec.max_rack_share,
                "pool_floor": spec.pool_floor,
                "change_kind": spec.change_kind.value,
                "forks": spec.forks,
                "timeout_s": spec.timeout_s,
                "advance_baseline": spec.advance_baseline,
                "unit": spec.unit.value,
            },
            plan={"waves": plan.waves, "notes": plan.notes}
            | ({"racks": plan.racks} if spec.unit is CampaignUnit.RACK else {}),
            current_wave=0,
            created_by=fleet.actor,
            created_at=now,
            updated_at=now,
        )
        s.add(camp)
        s.flush()
        ids = {h.name: h.id for h in hosts}
        for w, wave in enumerate(plan.waves):
            for name in wave:
                s.add(_host_row(camp, ids[name], name, w, HostStep.PENDING, None, now))
        for k in plan.skipped:
            s.add(_host_row(camp, ids[k.host], k.host, -1, HostStep.SKIPPED, k.reason, now))
        s.flush()
        view = _view(s, camp)
        if dry_run:
            s.rollback()
            return view
        record_event(
            s,
            fleet,
            EventKind.CAMPAIGN,
            f"campaign {spec.name} created ({spec.ticket}): {len(plan.hosts)} hosts in "
            f"{len(plan.waves)} waves to baseline {spec.target_baseline}"
            + (f" ({len(plan.racks)} racks)" if spec.unit is CampaignUnit.RACK else ""),
            data={"campaign": spec.name, "ticket": spec.ticket, "plan": plan.waves},
        )
        return view


def _host_row(
    camp: CampaignRow, host_id: int, name: str, wave: int, step: HostStep, reason: str | None,
    now: Any,
) -> CampaignHost:
    return CampaignHost(
        campaign_id=camp.id,
        host_id=host_id,
        host_name=name,
        wave=wave,
        step=step,
        reason=reason,
        action_runs=0,
        updated_at=now,
    )


def _playbook(path: str, flag: str) -> Path:
    """A playbook file, else one of the shipped playbooks by name (``upgrade-driver.yml``)."""
    p = Path(path).expanduser()
    if not p.is_file() and "/" not in path and (PLAYBOOKS_DIR / path).is_file():
        p = PLAYBOOKS_DIR / path
    if not p.is_file():
        raise ConfigError(f"{flag} {path}: no such playbook (shipped: "
                          f"{', '.join(sorted(x.name for x in PLAYBOOKS_DIR.glob('*.yml')))})")
    return p.resolve()


# --------------------------------------------------------------------------- control


def _tagged(fleet: Fleet, name: str, ticket: str) -> Fleet:
    """``fleet`` whose events all carry the campaign's ticket and name (Deliver 4): the
    collections, validations and transitions a run causes, not only its own events."""
    return dataclasses.replace(
        fleet, event_data=fleet.event_data | {"ticket": ticket, "campaign": name}
    )


def _me() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


#: Campaigns a thread of this process drives now (a worker job of ``serve --with-worker``
#: while an API call pauses or aborts it in the same process).
_DRIVING: set[str] = set()


def _job_owner(job: int) -> str:
    """The owner of a campaign driven by worker job ``job``: ``job7@HOST:PID``."""
    return f"job{job}@{_me()}"


def _owner_alive(camp: CampaignRow, fleet: Fleet) -> bool:
    if not camp.owner:
        return False
    host, _, pid = camp.owner.split("@", 1)[-1].rpartition(":")
    if host == socket.gethostname() and pid.isdigit():
        if int(pid) == os.getpid():
            # ourselves: alive only while a thread of ours drives it (else a previous call
            # in this process that returned)
            return camp.name in _DRIVING
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return stat[0] != "Z"
        return True
    return fleet.now() - camp.updated_at < STALE_OWNER




def _runner(camp: CampaignRow) -> type[Runner]:
    return RackRunner if camp.options.get("unit") == CampaignUnit.RACK else Runner


def approve_campaign(fleet: Fleet, name: str) -> CampaignView:
    """Let the waves after the canary go; who approved is recorded."""
    with fleet.db.session() as s:
        camp = campaign_row(s, name, for_update=True)
        if camp.status in FINAL_STATUSES:
            raise InvalidTransition(name, camp.status, "approve", ["planned", "running",
                                                                   "awaiting-approval", "paused"])
        camp.approved_by = fleet.actor
        camp.approved_at = fleet.now()
        camp.updated_at = fleet.now()
        record_event(
            s,
            fleet,
            EventKind.CAMPAIGN,
            f"campaign {name} approved by {fleet.actor}",
            data={"campaign": name, "ticket": camp.ticket, "approved_by": fleet.actor},
        )
        return _view(s, camp)


def pause_campaign(fleet: Fleet, name: str) -> CampaignView:
    """Stop after the wave in progress (every host of it ends validated or failed)."""
    with fleet.db.session() as s:
        camp = campaign_row(s, name)
        if camp.status not in (CampaignStatus.RUNNING, CampaignStatus.PLANNED,
                                               CampaignStatus.AWAITING_APPROVAL):
            raise InvalidTransition(name, camp.status, "pause", ["planned", "running",
                                                                 "awaiting-approval"])
    set_status(fleet, name, CampaignStatus.PAUSED, "paused")
    return show_campaign(fleet, name)


def abort_campaign(fleet: Fleet, name: str, progress: Progress | None = None) -> CampaignView:
    """Stop for good. With no runner alive, hosts this campaign holds are settled now:
    untouched ones leave maintenance (validated again), acted-on ones are validated."""
    with fleet.db.session() as s:
        camp = campaign_row(s, name)
        if camp.status in FINAL_STATUSES:
            raise InvalidTransition(name, camp.status, "abort", ["any status but aborted or "
                                                                 "completed"])
        alive = camp.status is CampaignStatus.RUNNING and _owner_alive(
            camp, fleet
        )
        ticket, runner = camp.ticket, _runner(camp)
    set_status(fleet, name, CampaignStatus.ABORTED, "aborted")
    if not alive:
        runner(_tagged(fleet, name, ticket), name,
               progress or (lambda _m: None)).settle_held(release=True)
    return show_campaign(fleet, name)


# --------------------------------------------------------------------------- running


def run_campaign(
    fleet: Fleet,
    name: str,
    progress: Progress | None = None,
    *,
    job: int | None = None,
    advance_baseline: bool = False,
    no_drain: bool | None = None,
    drain_timeout: timedelta | None = None,
) -> CampaignView:
    """Run (or resume) ``name`` until it completes, halts, waits for approval or is paused.
    ``no_drain``/``drain_timeout``: drain before each action (Slurm jobs, Kubernetes pods;
    kept for resumes).

    A completed campaign with deferred hosts (allocated when their wave came) runs again for
    them. Refused (Conflict, exit 6) while another live process drives it. ``job``: the
    worker job driving it; a later attempt of the same job takes over from the attempt
    before without waiting (the queue runs an attempt again only when the one before died
    or failed), on any machine. ``advance_baseline``: as ``campaign create
    --advance-baseline`` (recorded on the campaign, so a resume keeps it)."""
    with fleet.db.session() as s:
        camp = campaign_row(s, name, for_update=True)
        st = camp.status
        deferred = [r.wave for r in _rows(s, camp) if r.step == HostStep.DEFERRED]
        if st is CampaignStatus.COMPLETED and deferred:
            camp.current_wave = min(deferred)
            camp.finished_at = None
        elif st in FINAL_STATUSES or st is CampaignStatus.HALTED:
            raise InvalidTransition(name, st.value, "run", ["planned", "running (crashed)",
                                                            "paused", "awaiting-approval",
                                                            "completed with deferred hosts"])
        same_job = job is not None and (camp.owner or "").startswith(f"job{job}@")
        if st is CampaignStatus.RUNNING and not same_job and _owner_alive(camp, fleet):
            raise Conflict(what=f"campaign {name} (driven by {camp.owner})")
        if camp.action_kind is ActionKind.PLAYBOOK or camp.rollback:
            ansible_playbook()  # before the campaign is taken: it stays as it was
        resumed = st is not CampaignStatus.PLANNED
        if advance_baseline and not camp.options.get("advance_baseline"):
            camp.options = {**camp.options, "advance_baseline": True}
        if no_drain is not None or drain_timeout is not None:
            camp.options = {**camp.options, "no_drain": bool(no_drain)} | (
                {"drain_timeout_s": drain_timeout.total_seconds()} if drain_timeout else {})
        camp.status = CampaignStatus.RUNNING
        camp.owner = _me() if job is None else _job_owner(job)
        camp.updated_at = fleet.now()
        record_event(
            s,
            fleet,
            EventKind.CAMPAIGN,
            f"campaign {name} {'resumed' if resumed else 'started'} ({camp.ticket})",
            data={"campaign": name, "ticket": camp.ticket, "from": st.value},
        )
        ticket = camp.ticket
        runner = _runner(camp)
    _DRIVING.add(name)
    try:
        runner(_tagged(fleet, name, ticket), name, progress or (lambda _m: None)).run()
    finally:
        _DRIVING.discard(name)
    return show_campaign(fleet, name)


class CampaignDeferrer(Protocol):
    """Where :func:`enqueue_run` queues the job
    (``gpufleet.service.background.job_queue.JobQueue``)."""

    def check_ready(self) -> None:
        """Raise when this process cannot queue jobs now."""
        ...

    def defer_campaign(self, name: str, actor: str) -> int:
        """Queue one job that runs :func:`run_campaign` for ``name`` as ``actor``; its id."""
        ...


def enqueue_run(
    fleet: Fleet, name: str, queue: CampaignDeferrer, *, no_drain: bool | None = None,
    drain_timeout: timedelta | None = None,
) -> tuple[CampaignView, int]:
    """Queue ``run_campaign(name)`` (run or resume) as a worker job, as the caller; refused
    now (404, 409) when the campaign is unknown or cannot run from its status, the same as
    ``campaign run`` would be. ``no_drain``/``drain_timeout``: as ``run_campaign``'s, kept on
    the campaign for the job (and its resumes), recorded on a campaign event."""
    with fleet.db.session() as s:
        camp = campaign_row(s, name, for_update=no_drain is not None or bool(drain_timeout))
        st = camp.status
        deferred = any(r.step == HostStep.DEFERRED for r in _rows(s, camp))
        if (st in FINAL_STATUSES or st is CampaignStatus.HALTED) and not (
            st is CampaignStatus.COMPLETED and deferred
        ):
            raise InvalidTransition(name, st.value, "run", ["planned", "running (crashed)",
                                                            "paused", "awaiting-approval",
                                                            "completed with deferred hosts"])
        if st is CampaignStatus.RUNNING and _owner_alive(camp, fleet):
            raise Conflict(what=f"campaign {name} (driven by {camp.owner})")
        if no_drain is not None or drain_timeout:
            camp.options = {**camp.options, "no_drain": bool(no_drain)} | (
                {"drain_timeout_s": drain_timeout.total_seconds()} if drain_timeout else {})
            record_event(s, fleet, EventKind.CAMPAIGN, f"campaign {name}: "
                         f"{'no drain' if no_drain else 'drain'} before each action",
                         data={"campaign": name, "ticket": camp.ticket, "no_drain": bool(no_drain),
                               "drain_timeout_s": camp.options.get("drain_timeout_s")})
        view = _view(s, camp)
    queue.check_ready()
    return view, queue.defer_campaign(name, fleet.actor)


