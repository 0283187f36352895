"""Driving a campaign's hosts through its waves (the step machine described in
:mod:`gpufleet.service.campaigns.campaign`), and the few reads and writes of the campaign row it
shares with the commands there."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.collect.transport import Outcome
from gpufleet.domain.campaign import (
    FINAL_STATUSES,
    ActionKind,
    CampaignStatus,
    HostStep,
    driver_problem,
    should_halt,
)
from gpufleet.domain.changes import DeclaredChangeKind
from gpufleet.domain.events import EventKind
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.spec import Baseline
from gpufleet.domain.states import Event, HostState
from gpufleet.errors import NotFound
from gpufleet.service.allocation.holds import held
from gpufleet.service.campaigns.campaign_actions import host_list, run_action
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.lifecycle import retrying, transition
from gpufleet.service.hosts.baselines import set_pool_baseline
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.drain import NO_CLUSTER, drain_each
from gpufleet.service.hosts.slurm_drain import drain_and_wait, work_runs_in_slurm
from gpufleet.service.hosts.validate import validate
from gpufleet.store.repo import baseline_for_host, host_by_name, no_baseline
from gpufleet.store.tables import BaselineRow, CampaignHost, CampaignRow, FactSnapshot, Host, Pool

#: Where a run reports what it does, one line at a time (the CLI prints them on stderr).
Progress = Callable[[str], None]


def campaign_row(s: Session, name: str, *, for_update: bool = False) -> CampaignRow:
    stmt = select(CampaignRow).where(CampaignRow.name == name)
    if for_update:
        stmt = stmt.with_for_update()
    row = s.scalar(stmt)
    if row is None:
        raise NotFound(f"no campaign named '{name}'")
    return row


def baseline_named(s: Session, name: str) -> Baseline:
    row = s.scalar(select(BaselineRow).where(BaselineRow.name == name))
    if row is None:
        raise no_baseline(s, name)
    return Baseline.model_validate(row.spec | {"name": row.name, "status": row.status})


def campaign_marker(name: str, ticket: str) -> str:
    return f"campaign {name} ({ticket})"


def set_status(
    fleet: Fleet, name: str, status: CampaignStatus, message: str, **values: Any
) -> None:
    with fleet.db.session() as s:
        camp = campaign_row(s, name, for_update=True)
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


@dataclass
class Runner:
    fleet: Fleet
    name: str
    say: Progress

    # -- reading ------------------------------------------------------------------------

    def camp(self) -> CampaignRow:
        with self.fleet.db.session() as s:
            c = campaign_row(s, self.name)
            s.expunge(c)
            return c

    def rows(self, wave: int | None = None, steps: Sequence[HostStep] = ()) -> list[CampaignHost]:
        with self.fleet.db.session() as s:
            stmt = select(CampaignHost).join(CampaignRow).where(CampaignRow.name == self.name)
            if wave is not None:
                stmt = stmt.where(CampaignHost.wave == wave)
            if steps:
                stmt = stmt.where(CampaignHost.step.in_(steps))
            out = list(s.scalars(stmt.order_by(CampaignHost.id)))
            for r in out:
                s.expunge(r)
            return out

    def set_step(self, host: str, step: HostStep, reason: str | None = None,
                 **values: Any) -> None:
        with self.fleet.db.session() as s:
            camp = campaign_row(s, self.name)
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
            st = camp.status
            if st is not CampaignStatus.RUNNING:  # paused or aborted meanwhile
                self.say(f"campaign {self.name} {st.value}: stopping before wave {wave}")
                return
            if wave >= 1 and camp.options.get("require_approval") and not camp.approved_by:
                set_status(self.fleet, self.name, CampaignStatus.AWAITING_APPROVAL,
                            "waits for approval after the canary", current_wave=wave)
                self.say(f"canary done: waiting for 'gpufleet campaign approve {self.name}'")
                return
            halt = self.run_wave(wave)
            if halt:
                set_status(self.fleet, self.name, CampaignStatus.HALTED, f"halted: {halt}",
                            halt_reason=halt, current_wave=wave)
                self.say(f"HALTED: {halt}")
                return
            wave += 1
            with self.fleet.db.session() as s:
                c = campaign_row(s, self.name, for_update=True)
                c.current_wave = wave
                c.updated_at = self.fleet.now()
        deferred = [r.host_name for r in self.rows(steps=[HostStep.DEFERRED])]
        note = f"; deferred (allocated): {', '.join(deferred)}" if deferred else ""
        set_status(self.fleet, self.name, CampaignStatus.COMPLETED, "completed" + note)
        self.say(f"campaign {self.name} completed{note}")
        self.finish_pools()

    def finish_pools(self) -> None:
        """Issue 26: the pools of the hosts this campaign moved (step ``done``) whose
        baseline is not the target: with ``--advance-baseline`` the target becomes their
        baseline (the pool's hosts that did not move are pinned to the baseline they run, so
        none is judged on a driver it never got); without it the command is proposed."""
        camp = self.camp()
        target = camp.target_baseline
        done = [r.host_name for r in self.rows(steps=[HostStep.DONE])]
        if not done:
            return
        with self.fleet.db.session() as s:
            pools: dict[str | None, str | None] = {
                pool: base for pool, base in s.execute(
                    select(Host.pool, Pool.baseline).outerjoin(Pool, Pool.name == Host.pool)
                    .where(Host.name.in_(done), Host.pool.is_not(None)).distinct()
                )
            }
        stale = {p: b for p, b in pools.items() if p and b != target}
        advance = bool(camp.options.get("advance_baseline"))
        for pool, before in sorted(stale.items()):
            if not advance:
                self.say(f"pool {pool} is still on baseline {before or '(none)'}: to make "
                         f"{target} its baseline: gpufleet pool baseline {pool} {target}")
                continue
            kept = self.keep_unmoved(pool, before, camp) if before else []
            set_pool_baseline(self.fleet, pool, target)
            self.say(f"pool {pool}: baseline {before or '(none)'} -> {target} "
                     f"(--advance-baseline)"
                     + (f"; kept on {before}: {', '.join(kept)}" if kept else ""))

    @retrying
    def keep_unmoved(self, pool: str, before: str, camp: CampaignRow) -> list[str]:
        """The hosts of ``pool`` that follow its baseline (no ``gpufleet_baseline`` of
        their own) and were not moved: pinned to ``before``, recorded per host."""
        kept: list[str] = []
        with self.fleet.db.session() as s:
            for h in s.scalars(select(Host).where(Host.pool == pool).order_by(Host.name)
                               .with_for_update()):
                if h.vars.get("gpufleet_baseline") or HostState(h.state) is HostState.RETIRED:
                    continue
                h.vars = {**h.vars, "gpufleet_baseline": before}
                h.updated_at = self.fleet.now()
                record_event(
                    s, self.fleet, EventKind.UPDATED,
                    f"gpufleet_baseline (pool) -> {before}: pool {pool} advances to "
                    f"{camp.target_baseline} ({camp.ticket})",
                    host=h,
                    data={"before": {"gpufleet_baseline": None},
                          "after": {"gpufleet_baseline": before},
                          "ticket": camp.ticket, "campaign": camp.name},
                )
                kept.append(h.name)
        return kept

    def run_wave(self, wave: int) -> str | None:
        """One wave; returns why the campaign halts, or None."""
        camp = self.camp()
        if not self.move_wave(wave, camp):
            return None
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

    def move_wave(self, wave: int, camp: CampaignRow) -> bool:
        """The wave's hosts through maintenance, the action and validation; False when the
        campaign was aborted meanwhile (its hosts released). ``--unit rack``: overridden."""
        rows = self.rows(wave, [HostStep.PENDING, HostStep.DEFERRED])
        self.say(f"{'canary' if wave == 0 else f'wave {wave}'}: {len(self.rows(wave))} host(s)")
        for r in rows:
            self.enter(r.host_name, camp)
        if self.camp().status is CampaignStatus.ABORTED:
            self.settle_held(release=True)
            return False
        todo = [r.host_name for r in self.rows(wave, [HostStep.MAINTENANCE])]
        if todo:
            self.act(todo, camp)
        self.settle_held(release=False)
        return True

    # -- steps ----------------------------------------------------------------------------

    @retrying
    def enter(self, name: str, camp: CampaignRow) -> None:
        """Put one planned host in maintenance for this campaign, if it still may be."""
        marker = campaign_marker(camp.name, camp.ticket)
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
            hold = held(s, [h.id]).get(h.id)
            if hold:  # cordoned/drained by someone else since the plan (last sync)
                self._step_in(s, name, HostStep.SKIPPED,
                              f"{hold} when its wave came: skipped, not taken over")
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
        camp = campaign_row(s, self.name)
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

    def drained(self, names: list[str], camp: CampaignRow) -> list[str]:
        """Where work runs in Slurm: drain the hosts' nodes and wait for their jobs first;
        a host whose jobs outlast the campaign's drain timeout fails with what blocked."""
        if not names or not work_runs_in_slurm(self.fleet):
            return names
        rep = drain_and_wait(
            self.fleet, names, f"campaign {self.name} ({camp.ticket})", purpose="campaign",
            timeout=timedelta(seconds=float(camp.options.get("drain_timeout_s", 1800))),
            no_drain=bool(camp.options.get("no_drain")))
        for d in rep.blocked:
            self.set_step(d.host, HostStep.FAILED, f"not drained: {d.describe()}")
            self.say(f"  {d.host}: not drained: {d.describe()}")
        self.release_failed([d.host for d in rep.blocked], camp)
        return [n for n in names if rep.by_host()[n].ok]

    def act(self, names: list[str], camp: CampaignRow) -> None:
        """Drain the hosts (Slurm: nodes drained, jobs waited for; Kubernetes: pods evicted,
        hosts/drain.py; a host that cannot be drained fails, untouched), record "action
        started" for the others, run the action, record each outcome."""
        names = self.drained(names, camp)
        drained, blocked = drain_each(self.fleet, names, "campaign",
                                      no_drain=bool(camp.options.get("no_drain")))
        with self.fleet.db.session() as s:
            for name, rec in drained.items():
                if rec.get("skipped") == NO_CLUSTER:
                    continue  # nothing to record where no cluster is configured
                record_event(s, self.fleet, EventKind.CAMPAIGN, f"campaign {camp.name}: "
                             f"{name} drain {'skipped' if rec.get('skipped') else 'done'}",
                             host=host_by_name(s, name),
                             data={"campaign": camp.name, "ticket": camp.ticket, "drain": rec})
        for name, why in blocked.items():
            self.set_step(name, HostStep.FAILED, f"not drained: {why}",
                          action_finished_at=self.fleet.now())
            self.say(f"  {name}: not drained: {why}")
        self.release_failed(list(blocked), camp)
        names = [n for n in names if n in drained]
        if not names:
            return
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
        failed: list[str] = []
        for name in names:
            ok, why = results.get(name, (False, "no result from the action"))
            if ok:
                self.action_done(name, camp, why)
            else:
                self.set_step(name, HostStep.FAILED, f"action failed: {why}",
                              action_finished_at=self.fleet.now())
                self.say(f"  {name}: action failed: {why}")
                failed.append(name)
        self.release_failed(failed, camp)

    def release_failed(self, names: list[str], camp: CampaignRow) -> None:
        """Hosts whose action failed leave maintenance and are validated on the baseline they
        still have (the campaign's baseline was never given to them): a host the action did
        not harm goes back to the pool, one it did does not. They stay counted as failed."""
        if not names:
            return
        for name in names:
            self.leave(name, camp, "action failed, validating")
        validate(self.fleet, host_list(names))

    @retrying
    def action_done(self, name: str, camp: CampaignRow, note: str, *,
                    rollback: bool = False) -> None:
        """The change is on the host: record it (with the ticket) and point the host at the
        baseline it must now validate against, in one transaction with the step."""
        kind = camp.options.get("change_kind", DeclaredChangeKind.DRIVER_UPGRADE.value)
        with self.fleet.db.session() as s:
            h = host_by_name(s, name, for_update=True)
            c = campaign_row(s, self.name)
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
            validate(self.fleet, host_list(r.host_name for r in untouched))
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
            elif camp.action_kind is ActionKind.PLAYBOOK:
                rerun.append(name)
            else:
                self.set_step(name, HostStep.FAILED,
                              f"action interrupted and not known to be idempotent: not re-run "
                              f"({problem or 'no facts'})")
                self.release_failed([name], camp)
        if rerun:
            with self.fleet.db.session() as s:
                c = campaign_row(s, self.name)
                for r in s.scalars(select(CampaignHost).where(
                        CampaignHost.campaign_id == c.id, CampaignHost.host_name.in_(rerun))):
                    r.step = HostStep.MAINTENANCE
            self.act(rerun, camp)

    def target(self, camp: CampaignRow) -> Baseline | None:
        with self.fleet.db.session() as s:
            try:
                return baseline_named(s, camp.target_baseline)
            except NotFound:
                return None

    def collect_facts(self, names: list[str]) -> dict[str, HostFacts | None]:
        """Collect ``names`` now; facts only of hosts this collection reached (a host another
        worker held, or one that did not answer, is None: never judged on older facts)."""
        opts = self.camp().options
        started = self.fleet.now()
        collect(self.fleet, host_list(names), forks=int(opts.get("forks", 10)))
        out: dict[str, HostFacts | None] = {}
        with self.fleet.db.session() as s:
            for name in names:
                h = host_by_name(s, name)
                snap = s.get(FactSnapshot, h.latest_snapshot_id) if h.latest_snapshot_id else None
                fresh = (
                    snap is not None
                    and h.last_outcome == Outcome.OK
                    and h.last_collected_at is not None
                    and h.last_collected_at >= started
                )
                out[name] = HostFacts.model_validate(snap.facts) if fresh and snap else None
        return out

    @retrying
    def leave(self, name: str, camp: CampaignRow, why: str) -> None:
        with self.fleet.db.session() as s:
            h = host_by_name(s, name, for_update=True)
            if HostState(h.state) is HostState.MAINTENANCE:
                transition(s, self.fleet, h, Event.MAINTENANCE_OFF,
                           f"{campaign_marker(camp.name, camp.ticket)}: {why}",
                           data={"campaign": camp.name, "ticket": camp.ticket})
                h.maintenance_until = None
                h.eta = None

    @retrying
    def fail_validation(self, name: str, camp: CampaignRow, why: str) -> None:
        with self.fleet.db.session() as s:
            h = host_by_name(s, name, for_update=True)
            if HostState(h.state) is HostState.VALIDATING:
                transition(s, self.fleet, h, Event.VALIDATION_FAILED,
                           f"{campaign_marker(camp.name, camp.ticket)}: {why}",
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
            report = validate(self.fleet, host_list(judged), collect_first=False)
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
                           f"{campaign_marker(camp.name, camp.ticket)}: rollback",
                           data={"campaign": camp.name, "ticket": camp.ticket})
