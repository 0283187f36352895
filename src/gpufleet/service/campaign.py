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
import json
import os
import shlex
import socket
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.collect.transport import Outcome, RawResult
from gpufleet.domain.campaign import (
    FINAL_STATUSES,
    ActionKind,
    AllocatedPolicy,
    CampaignStatus,
    Candidate,
    HostStep,
    Limits,
    driver_problem,
    parse_share,
    parse_waves,
    plan_campaign,
    should_halt,
)
from gpufleet.domain.changes import DeclaredChangeKind
from gpufleet.domain.events import EventKind
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.spec import Baseline
from gpufleet.domain.states import Event, HostState
from gpufleet.errors import ConfigError, Conflict, GpufleetError, InvalidTransition, NotFound
from gpufleet.service.collect import collect
from gpufleet.service.fleet import Fleet, record_event
from gpufleet.service.lifecycle import retrying, transition
from gpufleet.service.pipeline import Claimed, Pipeline, claim_hosts, claim_lease, holds_claim
from gpufleet.service.select import selected_names
from gpufleet.service.validate import validate
from gpufleet.store.repo import baseline_for_host, host_by_name
from gpufleet.store.tables import BaselineRow, CampaignHost, CampaignRow, FactSnapshot, Host

#: The playbooks gpufleet ships (``upgrade-driver.yml``, ``system-init.yml``): a ``--playbook``
#: name not found as a file is looked up here.
PLAYBOOKS_DIR = Path(str(resources.files("gpufleet") / "playbooks"))
#: The Ansible roles gpufleet ships (system_init, gpu_driver): on ANSIBLE_ROLES_PATH of every
#: campaign playbook run.
ROLES_DIR = PLAYBOOKS_DIR / "roles"
#: A runner silent this long (on another machine) is taken for dead by ``resume``.
STALE_OWNER = timedelta(minutes=15)
_RC_MARK = "gpufleet-campaign-rc="

Progress = Callable[[str], None]


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


@dataclass
class HostView:
    host: str
    wave: int
    step: str
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
    status: str
    ticket: str
    target_baseline: str
    action_kind: str
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
        }


# --------------------------------------------------------------------------- reading


def _campaign(s: Session, name: str, *, for_update: bool = False) -> CampaignRow:
    stmt = select(CampaignRow).where(CampaignRow.name == name)
    if for_update:
        stmt = stmt.with_for_update()
    row = s.scalar(stmt)
    if row is None:
        raise NotFound(f"no campaign named '{name}'")
    return row


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
    )


def show_campaign(fleet: Fleet, name: str) -> CampaignView:
    """One campaign with every host's wave and step."""
    with fleet.db.session() as s:
        return _view(s, _campaign(s, name))


def list_campaigns(fleet: Fleet) -> list[CampaignView]:
    """Every campaign, newest first."""
    with fleet.db.session() as s:
        rows = s.scalars(select(CampaignRow).order_by(CampaignRow.id.desc()))
        return [_view(s, c) for c in rows]


def _baseline(s: Session, name: str) -> Baseline:
    row = s.scalar(select(BaselineRow).where(BaselineRow.name == name))
    if row is None:
        raise NotFound(f"no baseline named '{name}'")
    return Baseline.model_validate(row.spec | {"name": row.name, "status": row.status})


def _marker(name: str, ticket: str) -> str:
    return f"campaign {name} ({ticket})"


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
    if rollback is not None:
        rollback = str(_playbook(rollback, "--rollback-playbook"))
    if spec.auto_rollback and rollback is None:
        raise ConfigError("--auto-rollback needs --rollback-playbook")
    marker = _marker(spec.name, spec.ticket)
    with fleet.db.session() as s:
        _baseline(s, spec.target_baseline)
        if s.scalar(select(CampaignRow.id).where(CampaignRow.name == spec.name)) is not None:
            raise ConfigError(f"a campaign named '{spec.name}' exists; pick another name")
        names = selected_names(s, spec.selector)
        hosts = list(s.scalars(select(Host).where(Host.name.in_(names))))
        plan = plan_campaign(
            [
                Candidate(
                    h.name,
                    HostState(h.state),
                    h.rack or h.vars.get("gpufleet_rack"),
                    h.pool,
                    h.status_reason,
                    str(h.fault) if h.fault else None,
                )
                for h in hosts
            ],
            canary=spec.canary,
            waves=waves,
            policy=spec.allocated,
            limits=limits,
            marker=marker,
        )
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
            },
            plan={"waves": plan.waves, "notes": plan.notes},
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
            f"{len(plan.waves)} waves to baseline {spec.target_baseline}",
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


def _me() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_alive(camp: CampaignRow, fleet: Fleet) -> bool:
    if not camp.owner:
        return False
    host, _, pid = camp.owner.rpartition(":")
    if host == socket.gethostname() and pid.isdigit():
        if int(pid) == os.getpid():
            return False  # ourselves (a previous call in this process that returned)
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


def _set_status(
    fleet: Fleet, name: str, status: CampaignStatus, message: str, **values: Any
) -> None:
    with fleet.db.session() as s:
        camp = _campaign(s, name, for_update=True)
        camp.status = status
        camp.updated_at = fleet.now()
        for k, v in values.items():
            setattr(camp, k, v)
        if status in FINAL_STATUSES:
            camp.finished_at = fleet.now()
        record_event(
            s,
            fleet,
            EventKind.CAMPAIGN,
            f"campaign {name} {message}",
            data={"campaign": name, "ticket": camp.ticket, "status": status.value},
        )


def approve_campaign(fleet: Fleet, name: str) -> CampaignView:
    """Let the waves after the canary go; who approved is recorded."""
    with fleet.db.session() as s:
        camp = _campaign(s, name, for_update=True)
        if CampaignStatus(camp.status) in FINAL_STATUSES:
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
        camp = _campaign(s, name)
        if CampaignStatus(camp.status) not in (CampaignStatus.RUNNING, CampaignStatus.PLANNED,
                                               CampaignStatus.AWAITING_APPROVAL):
            raise InvalidTransition(name, camp.status, "pause", ["planned", "running",
                                                                 "awaiting-approval"])
    _set_status(fleet, name, CampaignStatus.PAUSED, "paused")
    return show_campaign(fleet, name)


def abort_campaign(fleet: Fleet, name: str, progress: Progress | None = None) -> CampaignView:
    """Stop for good. With no runner alive, hosts this campaign holds are settled now:
    untouched ones leave maintenance (validated again), acted-on ones are validated."""
    with fleet.db.session() as s:
        camp = _campaign(s, name)
        if CampaignStatus(camp.status) in FINAL_STATUSES:
            raise InvalidTransition(name, camp.status, "abort", ["any status but aborted or "
                                                                 "completed"])
        alive = CampaignStatus(camp.status) is CampaignStatus.RUNNING and _owner_alive(
            camp, fleet
        )
    _set_status(fleet, name, CampaignStatus.ABORTED, "aborted")
    if not alive:
        _Runner(fleet, name, progress or (lambda _m: None)).settle_held(release=True)
    return show_campaign(fleet, name)


# --------------------------------------------------------------------------- running


def run_campaign(fleet: Fleet, name: str, progress: Progress | None = None) -> CampaignView:
    """Run (or resume) ``name`` until it completes, halts, waits for approval or is paused.

    Refused (Conflict, exit 6) while another live process drives it."""
    with fleet.db.session() as s:
        camp = _campaign(s, name, for_update=True)
        st = CampaignStatus(camp.status)
        if st in FINAL_STATUSES or st is CampaignStatus.HALTED:
            raise InvalidTransition(name, st.value, "run", ["planned", "running (crashed)",
                                                            "paused", "awaiting-approval"])
        if st is CampaignStatus.RUNNING and _owner_alive(camp, fleet):
            raise Conflict(what=f"campaign {name} (driven by {camp.owner})")
        resumed = st is not CampaignStatus.PLANNED
        camp.status = CampaignStatus.RUNNING
        camp.owner = _me()
        camp.updated_at = fleet.now()
        record_event(
            s,
            fleet,
            EventKind.CAMPAIGN,
            f"campaign {name} {'resumed' if resumed else 'started'} ({camp.ticket})",
            data={"campaign": name, "ticket": camp.ticket, "from": st.value},
        )
    _Runner(fleet, name, progress or (lambda _m: None)).run()
    return show_campaign(fleet, name)


@dataclass
class _Runner:
    fleet: Fleet
    name: str
    say: Progress

    # -- reading ------------------------------------------------------------------------

    def camp(self) -> CampaignRow:
        with self.fleet.db.session() as s:
            c = _campaign(s, self.name)
            s.expunge(c)
            return c

    def rows(self, wave: int | None = None, steps: Sequence[HostStep] = ()) -> list[CampaignHost]:
        with self.fleet.db.session() as s:
            stmt = select(CampaignHost).join(CampaignRow).where(CampaignRow.name == self.name)
            if wave is not None:
                stmt = stmt.where(CampaignHost.wave == wave)
            if steps:
                stmt = stmt.where(CampaignHost.step.in_([str(x) for x in steps]))
            out = list(s.scalars(stmt.order_by(CampaignHost.id)))
            for r in out:
                s.expunge(r)
            return out

    def set_step(self, host: str, step: HostStep, reason: str | None = None,
                 **values: Any) -> None:
        with self.fleet.db.session() as s:
            camp = _campaign(s, self.name)
            row = s.scalar(
                select(CampaignHost).where(
                    CampaignHost.campaign_id == camp.id, CampaignHost.host_name == host
                )
            )
            assert row is not None
            row.step = step
            row.reason = reason
            row.updated_at = self.fleet.now()
            for k, v in values.items():
                setattr(row, k, v)
            camp.updated_at = self.fleet.now()

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        self.settle_held(release=False)
        camp = self.camp()
        nwaves = len(camp.plan.get("waves", []))
        wave = camp.current_wave
        while wave < nwaves:
            camp = self.camp()
            st = CampaignStatus(camp.status)
            if st is not CampaignStatus.RUNNING:  # paused or aborted meanwhile
                self.say(f"campaign {self.name} {st.value}: stopping before wave {wave}")
                return
            if wave >= 1 and camp.options.get("require_approval") and not camp.approved_by:
                _set_status(self.fleet, self.name, CampaignStatus.AWAITING_APPROVAL,
                            "waits for approval after the canary", current_wave=wave)
                self.say(f"canary done: waiting for 'gpufleet campaign approve {self.name}'")
                return
            halt = self.run_wave(wave)
            if halt:
                _set_status(self.fleet, self.name, CampaignStatus.HALTED, f"halted: {halt}",
                            halt_reason=halt, current_wave=wave)
                self.say(f"HALTED: {halt}")
                return
            wave += 1
            with self.fleet.db.session() as s:
                c = _campaign(s, self.name, for_update=True)
                c.current_wave = wave
                c.updated_at = self.fleet.now()
        deferred = [r.host_name for r in self.rows(steps=[HostStep.DEFERRED])]
        note = f"; deferred (allocated): {', '.join(deferred)}" if deferred else ""
        _set_status(self.fleet, self.name, CampaignStatus.COMPLETED, "completed" + note)
        self.say(f"campaign {self.name} completed{note}")

    def run_wave(self, wave: int) -> str | None:
        """One wave; returns why the campaign halts, or None."""
        camp = self.camp()
        label = "canary" if wave == 0 else f"wave {wave}"
        rows = self.rows(wave, [HostStep.PENDING, HostStep.DEFERRED])
        self.say(f"{label}: {len(self.rows(wave))} host(s)")
        for r in rows:
            self.enter(r.host_name, camp)
        if CampaignStatus(self.camp().status) is CampaignStatus.ABORTED:
            self.settle_held(release=True)
            return None
        todo = [r.host_name for r in self.rows(wave, [HostStep.MAINTENANCE])]
        if todo:
            self.act(todo, camp)
        self.settle_held(release=False)
        failed_here = [r.host_name for r in self.rows(wave, [HostStep.FAILED])]
        if failed_here and camp.options.get("auto_rollback") and camp.rollback:
            self.rollback(failed_here, camp)
        failed = self.rows(None, [HostStep.FAILED, HostStep.ROLLED_BACK])
        n_failed = len(failed)
        if should_halt(len(failed_here) if wave == 0 else n_failed,
                       int(camp.options.get("max_failures", 1)), canary=wave == 0):
            what = "the canary failed" if wave == 0 else (
                f"{n_failed} failed host(s), more than --max-failures "
                f"{camp.options.get('max_failures')}"
            )
            reasons = "; ".join(f"{r.host_name}: {r.reason}" for r in failed[:5])
            return f"{what} ({reasons})"
        return None

    # -- steps ----------------------------------------------------------------------------

    @retrying
    def enter(self, name: str, camp: CampaignRow) -> None:
        """Put one planned host in maintenance for this campaign, if it still may be."""
        marker = _marker(camp.name, camp.ticket)
        with self.fleet.db.session() as s:
            try:
                h = host_by_name(s, name, for_update=True)
            except NotFound:
                self._step_in(s, name, HostStep.SKIPPED, "host removed")
                return
            st = HostState(h.state)
            if st is HostState.ALLOCATED:
                self._step_in(s, name, HostStep.DEFERRED, "allocated when its wave came: "
                              "waits for its lease (run the campaign again later)")
                return
            if st is not HostState.AVAILABLE:
                why = f": {h.status_reason}" if h.status_reason else ""
                self._step_in(s, name, HostStep.SKIPPED,
                              f"{st.value}{why} when its wave came: skipped, not taken over")
                return
            driver = None
            if h.latest_snapshot_id:
                snap = s.get(FactSnapshot, h.latest_snapshot_id)
                if snap is not None:
                    driver = HostFacts.model_validate(snap.facts).driver_version
            transition(s, self.fleet, h, Event.MAINTENANCE_ON, marker,
                       data={"campaign": camp.name, "ticket": camp.ticket})
            self._step_in(s, name, HostStep.MAINTENANCE, None,
                          previous_baseline=h.vars.get("gpufleet_baseline"),
                          driver_before=driver)
        self.say(f"  {name}: maintenance ({marker})")

    def _step_in(self, s: Session, name: str, step: HostStep, reason: str | None,
                 **values: Any) -> None:
        camp = _campaign(s, self.name)
        row = s.scalar(select(CampaignHost).where(
            CampaignHost.campaign_id == camp.id, CampaignHost.host_name == name))
        assert row is not None
        row.step = step
        row.reason = reason
        row.updated_at = self.fleet.now()
        for k, v in values.items():
            setattr(row, k, v)
        if step in (HostStep.SKIPPED, HostStep.DEFERRED):
            self.say(f"  {name}: {step.value} ({reason})")

    def act(self, names: list[str], camp: CampaignRow) -> None:
        """Record "action started" for every host, run the action, record each outcome."""
        now = self.fleet.now()
        with self.fleet.db.session() as s:
            for r in s.scalars(select(CampaignHost).where(
                    CampaignHost.campaign_id == camp.id, CampaignHost.host_name.in_(names))):
                r.step = HostStep.ACTION_STARTED
                r.action_runs += 1
                r.action_started_at = now
                r.updated_at = now
        self.say(f"  action ({camp.action_kind}) on {len(names)} host(s): {', '.join(names)}")
        results = run_action(self.fleet, camp, names, camp.action, rollback=False)
        for name in names:
            ok, why = results.get(name, (False, "no result from the action"))
            if ok:
                self.action_done(name, camp, why)
            else:
                self.set_step(name, HostStep.FAILED, f"action failed: {why}",
                              action_finished_at=self.fleet.now())
                self.say(f"  {name}: action failed: {why}")

    @retrying
    def action_done(self, name: str, camp: CampaignRow, note: str, *,
                    rollback: bool = False) -> None:
        """The change is on the host: record it (with the ticket) and point the host at the
        baseline it must now validate against, in one transaction with the step."""
        kind = camp.options.get("change_kind", DeclaredChangeKind.DRIVER_UPGRADE.value)
        with self.fleet.db.session() as s:
            h = host_by_name(s, name, for_update=True)
            c = _campaign(s, self.name)
            row = s.scalar(select(CampaignHost).where(
                CampaignHost.campaign_id == c.id, CampaignHost.host_name == name))
            assert row is not None
            before = h.vars.get("gpufleet_baseline")
            vars_ = dict(h.vars)
            if rollback:
                if row.previous_baseline is None:
                    vars_.pop("gpufleet_baseline", None)
                else:
                    vars_["gpufleet_baseline"] = row.previous_baseline
                what = f"rolled back by {camp.ticket} (campaign {camp.name})"
            else:
                vars_["gpufleet_baseline"] = camp.target_baseline
                what = f"{kind} by {camp.ticket} (campaign {camp.name})"
            h.vars = vars_
            h.updated_at = self.fleet.now()
            record_event(
                s, self.fleet, EventKind.CHANGE_DECLARED, what + (f": {note}" if note else ""),
                host=h,
                data={"kind": kind, "ticket": camp.ticket, "campaign": camp.name,
                      "rollback": rollback, "note": note},
            )
            record_event(
                s, self.fleet, EventKind.UPDATED,
                f"gpufleet_baseline {before or '(pool)'} -> "
                f"{vars_.get('gpufleet_baseline') or '(pool)'} ({camp.ticket})",
                host=h,
                data={"before": {"gpufleet_baseline": before},
                      "after": {"gpufleet_baseline": vars_.get("gpufleet_baseline")},
                      "ticket": camp.ticket, "campaign": camp.name},
            )
            if not rollback:
                row.step = HostStep.ACTION_DONE
                row.action_finished_at = self.fleet.now()
                row.reason = None
                row.updated_at = self.fleet.now()
        self.say(f"  {name}: {what}")

    def settle_held(self, *, release: bool) -> None:
        """Bring every host this campaign holds in maintenance to a verdict (crash recovery,
        the end of a wave, abort): see the module docstring."""
        camp = self.camp()
        started = self.rows(None, [HostStep.ACTION_STARTED])
        if started:
            self.recheck([r.host_name for r in started], camp)
        untouched = self.rows(None, [HostStep.MAINTENANCE])
        if untouched and release:
            for r in untouched:
                self.leave(r.host_name, camp, "released (campaign aborted)")
                self.set_step(r.host_name, HostStep.RELEASED, "aborted before its action ran")
            validate(self.fleet, _names(r.host_name for r in untouched))
        elif untouched:
            # A crash after maintenance_on: the action never started; it runs now.
            wave = self.camp().current_wave
            late = [r.host_name for r in untouched if r.wave < wave]
            if late:
                self.act(late, camp)
        done = self.rows(None, [HostStep.ACTION_DONE])
        if done:
            self.verify([r.host_name for r in done], camp, rollback=False)

    def recheck(self, names: list[str], camp: CampaignRow) -> None:
        """Hosts whose action started but never finished (the runner died)."""
        self.say(f"  re-checking {len(names)} host(s) whose action was interrupted: "
                 + ", ".join(names))
        facts = self.collect_facts(names)
        target = self.target(camp)
        rerun: list[str] = []
        for name in names:
            got = facts.get(name)
            problem = driver_problem(None, got.driver_version if got else None,
                                     target.driver if target else None)
            if got is not None and problem is None and target and target.driver:
                self.action_done(name, camp, "interrupted run: the re-check found the change "
                                 "already made, not run again")
            elif ActionKind(camp.action_kind) is ActionKind.PLAYBOOK:
                rerun.append(name)
            else:
                self.set_step(name, HostStep.FAILED,
                              f"action interrupted and not known to be idempotent: not re-run "
                              f"({problem or 'no facts'})")
        if rerun:
            with self.fleet.db.session() as s:
                c = _campaign(s, self.name)
                for r in s.scalars(select(CampaignHost).where(
                        CampaignHost.campaign_id == c.id, CampaignHost.host_name.in_(rerun))):
                    r.step = HostStep.MAINTENANCE
            self.act(rerun, camp)

    def target(self, camp: CampaignRow) -> Baseline | None:
        with self.fleet.db.session() as s:
            try:
                return _baseline(s, camp.target_baseline)
            except NotFound:
                return None

    def collect_facts(self, names: list[str]) -> dict[str, HostFacts | None]:
        opts = self.camp().options
        collect(self.fleet, _names(names), forks=int(opts.get("forks", 10)))
        out: dict[str, HostFacts | None] = {}
        with self.fleet.db.session() as s:
            for name in names:
                h = host_by_name(s, name)
                snap = s.get(FactSnapshot, h.latest_snapshot_id) if h.latest_snapshot_id else None
                fresh = snap is not None and h.last_outcome == Outcome.OK
                out[name] = HostFacts.model_validate(snap.facts) if fresh and snap else None
        return out

    @retrying
    def leave(self, name: str, camp: CampaignRow, why: str) -> None:
        with self.fleet.db.session() as s:
            h = host_by_name(s, name, for_update=True)
            if HostState(h.state) is HostState.MAINTENANCE:
                transition(s, self.fleet, h, Event.MAINTENANCE_OFF,
                           f"{_marker(camp.name, camp.ticket)}: {why}",
                           data={"campaign": camp.name, "ticket": camp.ticket})
                h.maintenance_until = None
                h.eta = None

    @retrying
    def fail_validation(self, name: str, camp: CampaignRow, why: str) -> None:
        with self.fleet.db.session() as s:
            h = host_by_name(s, name, for_update=True)
            if HostState(h.state) is HostState.VALIDATING:
                transition(s, self.fleet, h, Event.VALIDATION_FAILED,
                           f"{_marker(camp.name, camp.ticket)}: {why}",
                           data={"campaign": camp.name, "ticket": camp.ticket})

    def verify(self, names: list[str], camp: CampaignRow, *, rollback: bool) -> dict[str, str]:
        """Maintenance off, fresh facts, the loaded driver judged, then validation: only
        validated hosts return to available. Returns host -> failure reason."""
        rows = {r.host_name: r for r in self.rows() if r.host_name in names}
        for name in names:
            self.leave(name, camp, "rolled back, validating" if rollback
                       else "action done, validating")
        facts = self.collect_facts(names)
        failures: dict[str, str] = {}
        judged: list[str] = []
        with self.fleet.db.session() as s:
            baselines = {n: baseline_for_host(s, host_by_name(s, n)) for n in names}
        for name in names:
            b = baselines[name]
            got = facts.get(name)
            before = rows[name].driver_before if name in rows else None
            problem = (
                "no fresh facts (collection failed)" if got is None
                else driver_problem(None if rollback else before, got.driver_version,
                                    b.driver if b else None)
            )
            if problem:
                failures[name] = problem
                self.fail_validation(name, camp, problem)
            else:
                judged.append(name)
        if judged:
            report = validate(self.fleet, _names(judged), collect_first=False)
            for v in report.verdicts:
                if v.host in judged and v.state != HostState.AVAILABLE:
                    failures[v.host] = (
                        f"validation: {v.state}"
                        + (f" ({'; '.join(v.reasons)})" if v.reasons else "")
                        + (f" faults {', '.join(v.faults)}" if v.faults else "")
                    )
        base = "previous baseline" if rollback else f"baseline {camp.target_baseline}"
        for name in names:
            reason: str | None
            if name in failures:
                step = HostStep.FAILED
                reason = ("rollback failed: " if rollback else "") + failures[name]
            else:
                step = HostStep.ROLLED_BACK if rollback else HostStep.DONE
                reason = (f"rolled back and validated on the {base}" if rollback else None)
            self.set_step(name, step, reason)
            self.say(f"  {name}: {step.value}" + (f" ({reason})" if reason else
                                                  f", available on {base}"))
        return failures

    def rollback(self, names: list[str], camp: CampaignRow) -> None:
        """Roll the failed hosts of a wave back and validate them on the previous baseline."""
        assert camp.rollback is not None
        self.say(f"  rollback on {len(names)} host(s): {', '.join(names)}")
        for name in names:
            self.rollback_enter(name, camp)
        results = run_action(self.fleet, camp, names, camp.rollback, rollback=True)
        back: list[str] = []
        for name in names:
            ok, why = results.get(name, (False, "no result from the rollback"))
            if ok:
                self.action_done(name, camp, why, rollback=True)
                back.append(name)
            else:
                self.leave(name, camp, "rollback failed")
                self.set_step(name, HostStep.FAILED, f"rollback playbook failed: {why}")
        if back:
            self.verify(back, camp, rollback=True)

    @retrying
    def rollback_enter(self, name: str, camp: CampaignRow) -> None:
        with self.fleet.db.session() as s:
            h = host_by_name(s, name, for_update=True)
            if HostState(h.state) is not HostState.MAINTENANCE:
                transition(s, self.fleet, h, Event.MAINTENANCE_ON,
                           f"{_marker(camp.name, camp.ticket)}: rollback",
                           data={"campaign": camp.name, "ticket": camp.ticket})


def _names(names: Any) -> str:
    return ",".join(sorted(set(names)))


# --------------------------------------------------------------------------- actions


def run_action(
    fleet: Fleet, camp: CampaignRow, names: list[str], action: str, *, rollback: bool
) -> dict[str, tuple[bool, str]]:
    """Run the campaign's action (or its rollback playbook) on ``names``; host -> (ok, note).
    Never raises for a host's failure: it is that host's result."""
    kind = ActionKind.PLAYBOOK if rollback else ActionKind(camp.action_kind)
    try:
        if kind is ActionKind.PLAYBOOK:
            return run_playbook(fleet, camp, names, Path(action))
        if kind is ActionKind.COMMAND:
            return _run_command(fleet, camp, names, action)
        return _reimage(fleet, camp, names)
    except GpufleetError as exc:
        return {n: (False, str(exc)) for n in names}


def _known_hosts(fleet: Fleet, names: list[str], path: Path) -> None:
    """The pinned host keys as an OpenSSH known_hosts file: Ansible checks the same keys
    gpufleet pinned (StrictHostKeyChecking=yes), never trusting a new one on first use."""
    lines: list[str] = []
    with fleet.db.session() as s:
        for h in s.scalars(select(Host).where(Host.name.in_(names))):
            if h.host_key and not h.host_key.startswith("SHA256:"):
                where = h.address if h.port == 22 else f"[{h.address}]:{h.port}"
                lines.append(f"{where} {h.host_key.strip()}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def run_playbook(
    fleet: Fleet, camp: CampaignRow, names: list[str], playbook: Path
) -> dict[str, tuple[bool, str]]:
    """``ansible-runner`` with the gpufleet inventory of the wave's hosts (what ``gpufleet
    inventory --list --select HOSTS`` prints, computed here and served by a small script, so
    Ansible does not start gpufleet again), ``--limit`` of ``names``, the shipped roles on
    the roles path, and the campaign's target as extra variables (``gpufleet_campaign``,
    ``gpufleet_ticket``, ``gpufleet_target``)."""
    import ansible_runner  # type: ignore[import-untyped]

    from gpufleet.service.ansible import inventory_list

    target: dict[str, Any] = {}
    with fleet.db.session() as s, contextlib.suppress(NotFound):
        target = _baseline(s, camp.target_baseline).model_dump(mode="json")
    with tempfile.TemporaryDirectory(prefix="gpufleet-campaign-") as tmp:
        d = Path(tmp)
        (d / "inventory").mkdir()
        listing = d / "inventory.json"
        listing.write_text(json.dumps(inventory_list(fleet, _names(names))), encoding="utf-8")
        inv = d / "inventory" / "gpufleet"
        inv.write_text(
            "#!/bin/sh\n# gpufleet inventory of one campaign wave (gpufleet inventory --list)\n"
            f'[ "$1" = --list ] && exec cat {shlex.quote(str(listing))}\necho "{{}}"\n',
            encoding="utf-8",
        )
        inv.chmod(0o700)
        known = d / "known_hosts"
        _known_hosts(fleet, names, known)
        binary = Path(sys.executable).with_name("ansible-playbook")
        forks = int(camp.options.get("forks", 10))
        env = {
            "ANSIBLE_ROLES_PATH": str(ROLES_DIR),
            "ANSIBLE_SSH_ARGS": (
                f"-o UserKnownHostsFile={shlex.quote(str(known))} "
                "-o StrictHostKeyChecking=yes -o ControlMaster=auto -o ControlPersist=30s"
            ),
            "ANSIBLE_PIPELINING": "True",
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
            "PATH": f"{binary.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        }
        r = ansible_runner.run(
            private_data_dir=str(d),
            host_cwd=str(d),
            playbook=str(playbook),
            inventory=str(inv),
            limit=",".join(names),
            forks=forks,
            extravars={
                "gpufleet_campaign": camp.name,
                "gpufleet_ticket": camp.ticket,
                "gpufleet_target_baseline": camp.target_baseline,
                "gpufleet_target": target,
            },
            envvars=env,
            quiet=True,
            timeout=int(float(camp.options.get("timeout_s", 1800))),
        )
        stats: dict[str, dict[str, int]] = r.stats or {}
        out: dict[str, tuple[bool, str]] = {}
        failures = _failures(r)
        for name in names:
            if name in stats.get("dark", {}):
                out[name] = (False, f"unreachable: {failures.get(name, 'ssh')}")
            elif name in stats.get("failures", {}):
                out[name] = (False, failures.get(name, "a task failed"))
            elif name in stats.get("processed", {}):
                changed = stats.get("changed", {}).get(name, 0)
                out[name] = (True, f"playbook {playbook.name}: {changed} changed")
            else:
                out[name] = (False, f"not processed by the playbook ({r.status}, rc {r.rc}): "
                             f"{_tail(r)}")
        return out


def _tail(r: Any) -> str:
    """The last lines ansible-playbook printed (why a run failed before any host ran)."""
    try:
        text = r.stdout.read()
    except Exception:
        return "no output"
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return " | ".join(lines[-4:])[-600:] or "no output"


def _failures(r: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    with contextlib.suppress(Exception):
        for ev in r.events:
            kind = ev.get("event")
            if kind in ("runner_on_failed", "runner_on_unreachable"):
                data = ev.get("event_data", {})
                res = data.get("res", {})
                msg = res.get("msg") or res.get("stderr") or kind
                out[data.get("host", "?")] = f"task {data.get('task', '?')}: {str(msg)[:300]}"
    return out


def _run_command(
    fleet: Fleet, camp: CampaignRow, names: list[str], command: str
) -> dict[str, tuple[bool, str]]:
    """``command`` over the SSH transport (claimed hosts, ``forks`` at once); ok when it
    exits 0."""
    forks = int(camp.options.get("forks", 10))
    timeout_s = float(camp.options.get("timeout_s", 1800))
    connect_s = fleet.settings.connect_timeout_s
    got = claim_hosts(
        fleet, _names(names), None, lambda n: claim_lease(n, forks, timeout_s, connect_s),
        skip_states=(HostState.RETIRED, HostState.ALLOCATED),
    )
    out = {n: (False, "held by another worker (collecting or testing it)") for n in got.busy}
    out |= {n: (False, why) for n, why in got.refused}
    script = f"{command}\necho \"{_RC_MARK}$?\"\n"

    def apply(c: Claimed, raw: RawResult) -> tuple[str, bool, str]:
        with fleet.db.session() as s:
            host = s.get(Host, c.host_id, with_for_update=True)
            if host is not None and holds_claim(host, c.token):
                host.claim_token = None
                host.claimed_until = None
        if raw.outcome is not Outcome.OK or raw.output is None:
            return c.target.name, False, f"{raw.outcome.value}: {raw.reason}"
        lines = raw.output.rstrip("\n").splitlines()
        rc = lines[-1][len(_RC_MARK):] if lines and lines[-1].startswith(_RC_MARK) else "?"
        tail = " | ".join(lines[-4:-1])[-300:]
        if rc == "0":
            return c.target.name, True, f"command exited 0{': ' + tail if tail else ''}"
        return c.target.name, False, f"command exited {rc}{': ' + tail if tail else ''}"

    for host, ok, note in Pipeline(fleet, got, command=lambda _c: script, apply=apply,
                                   forks=forks, timeout_s=timeout_s).run():
        out[host] = (ok, note)
    return out


def _reimage(fleet: Fleet, camp: CampaignRow, names: list[str]) -> dict[str, tuple[bool, str]]:
    """BMC reimage (virtual media) with the target baseline's image, then the pinned SSH key
    is cleared (a reimaged host has a new one; the next collection pins it on first use)."""
    from gpufleet.service.bmc import reimage
    from gpufleet.service.operations import rekey

    out: dict[str, tuple[bool, str]] = {}
    for name in names:
        try:
            res = reimage(fleet, name, baseline=camp.target_baseline)
        except GpufleetError as exc:
            out[name] = (False, str(exc))
            continue
        if res.ok:
            rekey(fleet, name, f"reimaged by campaign {camp.name} ({camp.ticket})")
        out[name] = (res.ok, "reimaged by virtual media" if res.ok else res.reason or "failed")
    return out
