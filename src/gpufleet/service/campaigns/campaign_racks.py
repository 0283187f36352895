"""Campaigns whose unit is the rack (issue 27 item 7, ``campaign create --unit rack``).

The plan (:func:`plan_rack_campaign`, pure part :mod:`gpufleet.domain.campaign_racks`) takes
the racks derived from facts (:func:`gpufleet.service.hosts.racks.read_racks`: rack id =
chassis serial, trays in slot order). :class:`RackRunner` drives each rack of a wave:

1. **One window.** Every planned tray of the rack enters maintenance (the same
   ``maintenance_on`` as a host campaign, reason = campaign and ticket); a tray allocated when
   the window opens defers the whole rack (none enters). With ``--require-approval`` the
   racks after the canary rack wait for ``campaign approve``.
2. **Tray by tray.** In slot order: drain, the action, then the tray's fresh facts judged
   (the loaded driver must be the target's, :func:`gpufleet.domain.campaign.driver_problem`)
   while the rest of the rack stays in maintenance. A tray that fails stops the rack: the trays
   not yet acted on leave the window untouched (``released``).
3. **The window closes** when every tray passed: maintenance off, validation against the
   target baseline, tray by tray verdicts (``done`` / ``failed``).
4. **Same versions.** The rack's trays must end on one driver and firmware: otherwise the
   rack's ``version_drift`` finding raises one ``rack-drift`` alarm
   (:func:`gpufleet.service.hosts.racks.check_racks`) and the campaign notes it.

Crash recovery is the host campaign's (a tray whose action started is re-checked, not re-run
blindly); the rack in progress then goes on from its first tray not yet acted on.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.campaign import (
    HELD_STEPS,
    AllocatedPolicy,
    CampaignStatus,
    Candidate,
    HostStep,
    Limits,
    Plan,
    WaveSize,
    driver_problem,
)
from gpufleet.domain.campaign_racks import plan_racks
from gpufleet.domain.states import HostState
from gpufleet.service.campaigns.campaign_actions import host_list
from gpufleet.service.campaigns.campaign_run import Runner, campaign_row
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.racks import check_racks, manifests, read_racks
from gpufleet.service.hosts.validate import validate
from gpufleet.store.tables import CampaignRow, Host


def plan_rack_campaign(
    s: Session, fleet: Fleet, candidates: list[Candidate], *, canary: int,
    waves: list[WaveSize], policy: AllocatedPolicy, limits: Limits, marker: str,
) -> Plan:
    """The ``--unit rack`` plan of ``candidates`` over the fleet's racks (slot order)."""
    racks, _ = read_racks(s, manifests(fleet))
    layout = {r.rack_id: [m.host for m in r.members] for r in racks}
    return plan_racks(candidates, layout, canary=canary, waves=waves, policy=policy,
                      limits=limits, marker=marker)


class RackRunner(Runner):
    """:class:`Runner` whose waves are racks (module docstring)."""

    def move_wave(self, wave: int, camp: CampaignRow) -> bool:
        layout: dict[str, list[str]] = camp.plan.get("racks", {})
        here = {r.host_name for r in self.rows(wave)}
        # racks with a tray still to move (a run again for deferred racks skips the rest)
        open_ = {r.host_name for r in self.rows(wave, [HostStep.PENDING, HostStep.DEFERRED,
                                                       *HELD_STEPS])}
        racks = [rack for rack, trays in layout.items() if open_ & set(trays)]
        label = "canary" if wave == 0 else f"wave {wave}"
        self.say(f"{label}: {len(racks)} rack(s), {len(here)} tray(s)")
        for rack in racks:
            if self.camp().status is CampaignStatus.ABORTED:
                break
            self.run_rack(rack, [t for t in layout[rack] if t in here], camp)
        if self.camp().status is CampaignStatus.ABORTED:
            self.settle_held(release=True)
            return False
        return True

    def settle_held(self, *, release: bool) -> None:
        if release:
            super().settle_held(release=True)
            return
        # a crash: trays whose action started are re-checked; the rack in progress goes on
        # in its wave (run_rack acts on its trays still in maintenance, then closes it)
        started = self.rows(None, [HostStep.ACTION_STARTED])
        if started:
            self.recheck([r.host_name for r in started], self.camp())

    def steps(self, trays: list[str]) -> dict[str, HostStep]:
        return {r.host_name: r.step for r in self.rows() if r.host_name in trays}

    def run_rack(self, rack: str, trays: list[str], camp: CampaignRow) -> None:
        """One rack: open its window, act tray by tray, close it (module docstring)."""
        pending = [t for t, st in self.steps(trays).items()
                   if st in (HostStep.PENDING, HostStep.DEFERRED)]
        if pending and self.defer_if_leased(rack, pending):
            return
        for t in trays:
            if t in pending:
                self.enter(t, camp)
        held = [t for t, st in self.steps(trays).items() if st is HostStep.MAINTENANCE]
        self.say(f"  rack {rack}: maintenance window of {len(held)} tray(s)")
        # a resumed rack whose interrupted tray failed its re-check stops there too
        stop = next((t for t in trays if self.steps([t]).get(t) is HostStep.FAILED), None)
        for t in trays if stop is None else ():
            if self.steps([t]).get(t) is not HostStep.MAINTENANCE:
                continue
            if self.camp().status is CampaignStatus.ABORTED:
                break
            self.act([t], camp)
            if self.steps([t]).get(t) is HostStep.ACTION_DONE:
                self.check_tray(t, camp)
            if self.steps([t]).get(t) is HostStep.FAILED:
                stop = t
                break
        if stop is not None:
            self.release_rest(rack, trays, stop, camp)
        done = [t for t, st in self.steps(trays).items() if st is HostStep.ACTION_DONE]
        if done:
            self.verify(done, camp, rollback=False)
        self.say(f"  rack {rack}: maintenance window closed")
        self.judge_versions(rack)

    def defer_if_leased(self, rack: str, pending: list[str]) -> bool:
        """A tray allocated when the window opens: the whole rack waits (none enters)."""
        with self.fleet.db.session() as s:
            busy = sorted(s.scalars(select(Host.name).where(
                Host.name.in_(pending), Host.state == HostState.ALLOCATED.value)))
        if not busy:
            return False
        why = (f"rack {rack}: {', '.join(busy)} allocated when its window came: the rack "
               "waits (run the campaign again later)")
        for t in pending:
            self.set_step(t, HostStep.DEFERRED, why)
        self.say(f"  {why}")
        return True

    def check_tray(self, tray: str, camp: CampaignRow) -> None:
        """The tray's fresh facts while its rack stays in maintenance: the loaded driver must
        be the target's. A tray that does not pass leaves the window as failed."""
        row = next(r for r in self.rows() if r.host_name == tray)
        got = self.collect_facts([tray]).get(tray)
        target = self.target(camp)
        problem = ("no fresh facts (collection failed)" if got is None
                   else driver_problem(row.driver_before, got.driver_version,
                                       target.driver if target else None))
        if problem is None:
            self.say(f"  {tray}: passed ({got.driver_version if got else '?'}), "
                     "waits for its rack")
            return
        self.leave(tray, camp, f"tray check failed: {problem}")
        self.fail_validation(tray, camp, problem)
        self.set_step(tray, HostStep.FAILED, f"tray check: {problem}")
        self.say(f"  {tray}: failed ({problem})")

    def release_rest(self, rack: str, trays: list[str], stop: str, camp: CampaignRow) -> None:
        """A tray failed: the trays not acted on yet leave the window untouched."""
        rest = [t for t, st in self.steps(trays).items() if st is HostStep.MAINTENANCE]
        if not rest:
            return
        why = f"rack {rack} stopped: tray {stop} failed; not acted on"
        for t in rest:
            self.leave(t, camp, why)
            self.set_step(t, HostStep.RELEASED, why)
        self.say(f"  rack {rack}: {why}: {', '.join(rest)}")
        validate(self.fleet, host_list(rest))

    def judge_versions(self, rack: str) -> None:
        """After the window: the rack's trays on one driver and firmware, else a note (the
        ``rack-drift`` alarm is raised by the rack check)."""
        with self.fleet.db.session() as s:
            found = check_racks(s, self.fleet)
            if "version_drift" not in found.get(rack, []):
                return
            racks, _ = read_racks(s, manifests(self.fleet))
            finding = next(f for r in racks if r.rack_id == rack for f in r.findings
                           if f.kind == "version_drift")
            note = f"rack {rack}: {finding.message} (rack-drift alarm)"
            camp = campaign_row(s, self.name, for_update=True)
            camp.plan = {**camp.plan, "notes": [*camp.plan.get("notes", []), note]}
        self.say(f"  DRIFT: {note}")
