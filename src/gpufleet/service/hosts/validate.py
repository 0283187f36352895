"""Validate hosts: fresh facts -> checks -> lifecycle decision, every result kept.

"Visible" (fact snapshots) and "usable for X" (``validations`` rows with time, baseline,
evidence and expiry) are stored separately; the host row only caches the current verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import desc, select
from sqlalchemy.orm import Session

from gpufleet.collect.transport import Outcome, RawResult
from gpufleet.domain.changes import since_change
from gpufleet.domain.checks import ActiveEvidence, CheckStatus
from gpufleet.domain.events import EventKind, EvidenceKind
from gpufleet.domain.evidence import DcgmDiagResult, GpuBurnResult, NcclResult
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import HARDWARE_FAULTS, Fault
from gpufleet.domain.profiles import Decision, ValidationOutcome, held_out
from gpufleet.domain.states import Event, HostState
from gpufleet.errors import Conflict, NotFound
from gpufleet.i18n import N_
from gpufleet.service.core.alarms import close_cleared
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.lifecycle import KEEP, reclaim_owed_message, retrying, transition
from gpufleet.service.core.policies import Policies
from gpufleet.service.core.select import select_hosts
from gpufleet.service.hosts import gpu_health
from gpufleet.service.hosts.collect import RunReport, collect, flag_duplicate
from gpufleet.service.hosts.deadlines import sweep_deadlines
from gpufleet.service.hosts.rack_fold import fold_validations
from gpufleet.store.repo import (
    baseline_for_host,
    host_by_name,
    last_change_event,
    last_change_event_id,
)
from gpufleet.store.tables import EvidenceRow, FactSnapshot, Host, Validation

#: Stored evidence kinds and the models they were dumped from.
EVIDENCE_MODELS: dict[EvidenceKind, type[BaseModel]] = {
    EvidenceKind.DCGM: DcgmDiagResult,
    EvidenceKind.NCCL: NcclResult,
    EvidenceKind.GPU_BURN: GpuBurnResult,
}

#: States a validation run acts on; the others are left to their owners (jobs, operators).
VALIDATABLE = {HostState.ENROLLED, HostState.VALIDATING, HostState.AVAILABLE}
#: States an operator or scheduler put a host in on purpose: not validated, not a failure.
HELD_OUT = {HostState.MAINTENANCE, HostState.ALLOCATED, HostState.RETIRED}


@dataclass
class HostVerdict:
    """What validation did to one host."""

    host: str
    state_before: str
    state: str
    decision: str | None
    profiles: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: str | None = None
    #: Profiles an available host is held out of, with why (domain.profiles.held_out).
    held_out: dict[str, list[str]] = field(default_factory=dict)
    #: Issue 27: the rack incident (alarm id) its NVLink fabric failure was folded into.
    rack_incident: int | None = None


@dataclass
class ValidateReport:
    """A validation run: per-host verdicts plus the collection it used."""

    verdicts: list[HostVerdict]
    collection: RunReport | None

    @property
    def ok(self) -> bool:
        """Every judged host ended available. Hosts held out of validation on purpose
        (maintenance, allocated, retired) are skipped without failing the run."""
        return all(
            (v.skipped is None and v.state == HostState.AVAILABLE)
            or (v.skipped is not None and v.state in HELD_OUT)
            for v in self.verdicts
        )


def active_evidence(s: Session, host: Host, since: datetime | None) -> ActiveEvidence:
    """:func:`evidence_kinds` for the checks, with what it had to be newer than (the host's last
    change: "no NCCL result since the driver change on 2026-12-01")."""
    evidence = ActiveEvidence.from_kinds(evidence_kinds(s, host, since))
    changed = last_change_event(s, host.id)
    if changed is None:
        return evidence
    after = since_change((changed.data or {}).get("kind"), changed.at.date().isoformat())
    return replace(evidence, since=after)


def evidence_kinds(s: Session, host: Host, since: datetime | None) -> dict[str, Any]:
    """Latest stored active-test evidence of each kind for the host, keyed by the check that
    reads it (dcgm_diag, nccl, gpu_burn).

    Only evidence recorded after the host's last change counts (it tested *this* hardware
    and software): its change marker must be the host's latest change event. And only within
    ``since`` (the validation TTL).
    """
    out: dict[str, Any] = {}
    stmt = select(EvidenceRow).where(
        EvidenceRow.host_id == host.id, EvidenceRow.kind.in_(list(EVIDENCE_MODELS))
    )
    if since is not None:
        stmt = stmt.where(EvidenceRow.recorded_at >= since)
    changed = last_change_event_id(s, host.id)
    if changed is not None:
        # The marker is the latest change when the result was recorded; event ids grow with
        # every append, so "after the change" holds even on one clock tick.
        stmt = stmt.where(EvidenceRow.change_event_id >= changed)
    for ev in s.scalars(stmt.order_by(desc(EvidenceRow.recorded_at), desc(EvidenceRow.id))):
        key = ev.kind.check
        if key not in out:
            # Re-hydrate so derived values (e.g. NCCL's wrong-value total) exist again.
            out[key] = EVIDENCE_MODELS[ev.kind].model_validate(ev.data)
    return out


def judge_host(
    fleet: Fleet,
    s: Session,
    host: Host,
    policies: Policies,
    collected: RawResult | None,
    *,
    must_be_collected: bool = False,
) -> HostVerdict:
    """Evaluate one host's latest facts and move it through the lifecycle."""
    before = host.state
    verdict = HostVerdict(host.name, before, before, None)
    if HostState(host.state) not in VALIDATABLE:
        verdict.skipped = f"not validated in state {host.state}"
        return verdict
    if collected is None and must_be_collected:
        verdict.skipped = "not collected in this run (another worker is collecting it)"
        return verdict
    if collected is not None and collected.outcome is not Outcome.OK:
        verdict.skipped = f"not collected: {collected.outcome.value} ({collected.reason})"
        return verdict
    snap = s.get(FactSnapshot, host.latest_snapshot_id) if host.latest_snapshot_id else None
    if snap is None:
        verdict.skipped = N_("no facts collected yet")  # shown translated, stored as is
        return verdict
    facts = HostFacts.model_validate(snap.facts)
    baseline = baseline_for_host(s, host)
    now = fleet.now()
    # The pool's GPU fault policy may keep a partial host (service/hosts/gpu_health.py).
    gpu_verdict = gpu_health.judge(
        s,
        host,
        facts,
        baseline,
        policies,
        now,
        evidence=active_evidence(s, host, now - fleet.settings.validation_ttl),
    )
    outcome: ValidationOutcome = gpu_verdict.outcome
    duplicate = flag_duplicate(s, fleet, host, facts)
    if duplicate and outcome.decision is Decision.AVAILABLE:
        # One machine, one host: the later name is not counted while the duplicate stands.
        outcome = outcome.model_copy(
            update={
                "decision": Decision.STAY_VALIDATING,
                "reasons": [duplicate],
                "profiles_passed": set(),
            }
        )
    if host.reclaim_due and outcome.decision is Decision.AVAILABLE:
        # Only a passing reclaim brings back a host the lessee may have left things on.
        outcome = outcome.model_copy(
            update={
                "decision": Decision.STAY_VALIDATING,
                "reasons": [reclaim_owed_message(host.name, host.reclaim_due)],
                "profiles_passed": set(),
            }
        )
    if HostState(host.state) is not HostState.VALIDATING:
        transition(s, fleet, host, Event.VALIDATE, "validation started")
    reason = "; ".join(outcome.reasons)
    hw = sorted(str(f) for f in outcome.faults if f in HARDWARE_FAULTS)
    warnings = [
        f"{r.name}: {r.message}" for r in outcome.results.values() if r.status is CheckStatus.WARN
    ]
    held = held_out(outcome) if outcome.decision is Decision.AVAILABLE else {}
    # Only profiles lost to something broken or not proven, not ones the host was never
    # meant for: "not training-multinode: nccl: no NCCL all-reduce result since ...".
    warnings += [f"not {name}: {'; '.join(reasons)}" for name, reasons in held.items()]
    quarantined = outcome.decision is Decision.QUARANTINE
    transition(
        s,
        fleet,
        host,
        outcome.event,
        reason,
        data={"profiles": sorted(outcome.profiles_passed), "faults": hw},
        health=outcome.health,
        fault=Fault(hw[0]) if quarantined and hw else None,
        fault_reason=reason if quarantined else None,
        # Usable, but an operator should look (e.g. a row remap pending a GPU reset).
        status_reason=("; ".join(warnings) or None)
        if outcome.decision is Decision.AVAILABLE
        else KEEP,
    )
    if outcome.decision is Decision.AVAILABLE:
        host.profiles = sorted(outcome.profiles_passed)
        host.validated_until = now + fleet.settings.validation_ttl
        close_cleared(s, fleet, host)
    if outcome.decision is not Decision.QUARANTINE:
        gpu_health.record_unusable(s, fleet, host, gpu_verdict)
    s.add(
        Validation(
            host_id=host.id,
            at=now,
            snapshot_id=snap.id,
            baseline=baseline.name if baseline else None,
            decision=outcome.decision,
            profiles=sorted(outcome.profiles_passed),
            results=[r.model_dump(mode="json") | {"key": k} for k, r in outcome.results.items()],
            expires_at=host.validated_until,
        )
    )
    verdict.state = host.state
    verdict.decision = outcome.decision.value
    verdict.profiles = list(host.profiles)
    verdict.reasons = list(outcome.reasons)
    verdict.faults = sorted(str(f) for f in outcome.faults)
    verdict.warnings = warnings
    verdict.held_out = held
    return verdict


def validate(
    fleet: Fleet,
    selector: str | None = None,
    *,
    collect_first: bool = True,
    transport: str | None = None,
    forks: int | None = None,
    timeout_s: float | None = None,
    on_start: Callable[[int], None] | None = None,
    on_result: Callable[[RawResult], None] | None = None,
) -> ValidateReport:
    """Collect fresh facts (unless told not to), run the checks, move every host."""
    policies = Policies(fleet).load()  # a bad profiles file stops the run before any change
    sweep_deadlines(fleet)
    run = (
        collect(
            fleet,
            selector,
            transport=transport,
            forks=forks,
            timeout_s=timeout_s,
            on_start=on_start,
            on_result=on_result,
            policies=policies,
        )
        if collect_first
        else None
    )
    raw = {r.host: RawResult(r.host, r.outcome, r.reason) for r in run.results} if run else {}
    verdicts: list[HostVerdict] = []
    with fleet.db.session() as s:
        names = [h.name for h in s.scalars(select_hosts(selector))]
    if selector and not names:
        raise NotFound(f"no hosts match selector '{selector}'")
    for name in names:
        try:
            verdict = _judge_by_name(
                fleet, name, policies, raw.get(name), must_be_collected=run is not None
            )
        except Conflict as exc:  # changed under us five times in a row: leave it as it is
            verdict = HostVerdict(name, "?", "?", None, skipped=str(exc))
        if verdict is not None:
            verdicts.append(verdict)
    _fold_fabric(fleet, verdicts)
    return ValidateReport(verdicts, run)


#: The faults of a failed NVLink fabric (domain/checks/nvl_fabric.py).
_FABRIC = frozenset({Fault.NVL_FABRIC_RACK.value, Fault.NVL_FABRIC_FAILED.value})


def _fold_fabric(fleet: Fleet, verdicts: list[HostVerdict]) -> None:
    """Issue 27: fabric failures found by validation on several hosts of one NVLink domain
    within the window make one rack incident, as the inspection's findings do
    (:func:`gpufleet.service.hosts.rack_fold.fold_validations`); each folded verdict names
    it."""
    failing = [v.host for v in verdicts if v.decision is not None and _FABRIC & set(v.faults)]
    if not failing:
        return
    with fleet.db.session() as s:
        ids = {n: i for n, i in s.execute(select(Host.name, Host.id)
                                          .where(Host.name.in_(failing)))}
    folded = fold_validations(fleet, fleet.now(), list(ids.values()))
    for v in verdicts:
        if v.host in ids and ids[v.host] in folded:
            v.rack_incident = folded[ids[v.host]]


@retrying
def _judge_by_name(
    fleet: Fleet,
    name: str,
    policies: Policies,
    collected: RawResult | None,
    *,
    must_be_collected: bool,
) -> HostVerdict | None:
    """Judge one host in its own transaction. If its state changed between our read and our
    write (an operator put it in maintenance meanwhile), nothing is written and the host is
    re-read and judged again, so the operator's change is never undone."""
    with fleet.db.session() as s:
        try:
            host = host_by_name(s, name, for_update=True)
        except NotFound:  # removed meanwhile
            return None
        return judge_host(fleet, s, host, policies, collected, must_be_collected=must_be_collected)


def record_evidence(
    fleet: Fleet,
    host_name: str,
    kind: EvidenceKind,
    result: dict[str, Any],
    source: str,
    *,
    passed: bool | None = None,
    summary: str = "",
) -> None:
    """Store the parsed result of an active test (dcgm, nccl, gpu-burn) for a host."""
    with fleet.db.session() as s:
        store_evidence(
            s,
            fleet,
            host_by_name(s, host_name),
            kind,
            result,
            source,
            passed=passed,
            summary=summary,
        )


def store_evidence(
    s: Session,
    fleet: Fleet,
    host: Host,
    kind: EvidenceKind,
    result: dict[str, Any],
    source: str,
    *,
    passed: bool | None = None,
    summary: str = "",
) -> EvidenceRow:
    """Add one ``evidence`` row (marked with the host's latest change) and its audit event,
    inside the caller's transaction."""
    row = EvidenceRow(
        host_id=host.id,
        kind=kind,
        recorded_at=fleet.now(),
        snapshot_id=host.latest_snapshot_id,
        change_event_id=last_change_event_id(s, host.id),
        passed=passed,
        summary=summary,
        data=result,
        source=source,
        actor=fleet.actor,
    )
    s.add(row)
    record_event(
        s,
        fleet,
        EventKind.EVIDENCE,
        f"{kind.check} result from {source}",
        host=host,
        data={"kind": kind.check, "result": result, "source": source},
    )
    return row
