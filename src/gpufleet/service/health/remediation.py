"""``gpufleet remediate``: run one rung of the ladder on a host, keep the record, send the host
to validation.

claim -> run -> apply, as every work on hosts: the host is claimed (short transaction), the
in-band steps run over its transport with no transaction open (probe the GPU holders, reset,
verify, bug report, reboot and wait for the host to return), then one short transaction writes
the remediation rows, the audit event, the parts history of the GPUs touched and the lifecycle
move (to ``validating``; ``service-request``: to ``maintenance`` with the ticket and ETA).
Notifications are queued in the same transaction (the outbox, service/core/webhooks.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from gpufleet.collect.slurm import SlurmClient
from gpufleet.collect.transport import Outcome, RawResult, Transport, run_many
from gpufleet.domain.events import EventKind
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.gpu_health import HolderPolicy
from gpufleet.domain.lifecycle import apply_event
from gpufleet.domain.remediation import (
    Action,
    alive_script,
    probe_script,
    read_probe,
    read_reset,
    reboot_script,
    reset_script,
)
from gpufleet.domain.spec import ExpectedSpec
from gpufleet.domain.states import Event, HostState
from gpufleet.errors import Conflict, IdentityMismatch, InvalidTransition, UsageError
from gpufleet.service.core import webhooks
from gpufleet.service.core.engine import engine
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.lifecycle import transition
from gpufleet.service.core.pipeline import (
    Claimed,
    claim_hosts,
    drop_claim,
    holds_claim,
    release_claims,
    transport_for_host,
)
from gpufleet.service.health import remediation_steps as steps_
from gpufleet.service.health.remediation_steps import Step
from gpufleet.service.hosts import bmc_guard
from gpufleet.service.hosts.drain import DrainApi, drain_first
from gpufleet.service.hosts.gpu_health import pool_health_policy
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import FactSnapshot, Host, PartEvent, Remediation

#: States remediation refuses: a lessee's job runs there, or the host is gone.
_REFUSED = (HostState.ALLOCATED, HostState.RETIRED, HostState.RECLAIMING)
#: How each state is sent to validation after an in-band step.
_TO_VALIDATION = {
    HostState.QUARANTINED: Event.UNQUARANTINE,
    HostState.AVAILABLE: Event.VALIDATE,
    HostState.VALIDATING: Event.VALIDATE,
    HostState.ENROLLED: Event.VALIDATE,
    HostState.MAINTENANCE: Event.MAINTENANCE_OFF,
}


@dataclass
class RemediationReport:
    """What ``remediate`` did to one host."""

    host: str
    action: str
    ok: bool
    steps: list[Step]
    state: str
    record_ids: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: issue 26: what the drain before the action did (hosts/drain.py), None: no drain asked
    drain: dict[str, Any] | None = None


@dataclass
class _Plan:
    gpus: list[int] | None  # None: every GPU (the reset domain)
    uuids: set[str] | None
    serials: dict[int, str]
    expected: int | None
    domain_note: str = ""


def _plan(s: Session, host: Host, gpu: int | None) -> _Plan:
    snap = s.get(FactSnapshot, host.latest_snapshot_id) if host.latest_snapshot_id else None
    facts = HostFacts.model_validate(snap.facts) if snap else None
    gpus = facts.gpus if facts else []
    serials = {g.index: g.serial for g in gpus if g.serial}
    if gpu is not None and gpu not in {g.index for g in gpus}:
        raise UsageError(f"{host.name}: no GPU {gpu} in its latest facts")
    spec = ExpectedSpec.model_validate(host.expected)
    if spec.nvswitch:  # NVSwitch systems reset every GPU together
        note = "NVSwitch system: the whole reset domain (every GPU) is reset together"
        return _Plan(None, None, serials, len(gpus) or None, note)
    if gpu is None:
        unusable = [u["index"] for u in host.unusable_gpus or [] if u.get("index") is not None]
        if unusable:
            gpu_list = sorted(unusable)
        else:
            return _Plan(None, None, serials, len(gpus) or None, "every GPU")
    else:
        gpu_list = [gpu]
    uuids = {g.uuid for g in gpus if g.index in gpu_list and g.uuid}
    return _Plan(gpu_list, uuids or None, serials, len(gpu_list), "")


def _run(fleet: Fleet, c: Claimed, tr: Transport, script: str, timeout_s: float) -> RawResult:
    return engine().run(run_many(tr, [c.target], script, forks=1, timeout_s=timeout_s))[0]


def _claim(fleet: Fleet, name: str, timeout_s: float) -> Claimed:
    got = claim_hosts(
        fleet,
        name,
        None,
        lambda n: timedelta(seconds=timeout_s * 4 + 120),
        skip_states=_REFUSED,
    )
    if got.refused:
        raise UsageError(f"{name}: {got.refused[0][1]}")
    if not got.hosts:
        if got.busy:
            raise Conflict(f"host {name} is held by another worker; try again")
        with fleet.db.session() as s:
            h = host_by_name(s, name)
            raise InvalidTransition(h.name, str(h.state), "remediate", ["not allocated/retired"])
    return got.hosts[0]


def _wait_back(
    fleet: Fleet, c: Claimed, tr: Transport, wait_s: float, sleep: Callable[[float], None]
) -> bool:
    """Poll until the host answers again (True) or ``wait_s`` passed."""
    deadline = time.monotonic() + wait_s
    while True:
        r = _run(fleet, c, tr, alive_script(), min(30.0, max(wait_s, 1.0)))
        if r.outcome is Outcome.OK and "@@alive" in (r.output or ""):
            return True
        if time.monotonic() >= deadline:
            return False
        sleep(min(5.0, max(0.0, deadline - time.monotonic())))


def _reboot(fleet: Fleet, c: Claimed, tr: Transport, timeout_s: float, wait_s: float) -> Step:
    r = _run(fleet, c, tr, reboot_script(), timeout_s)
    out = r.output or ""
    if r.outcome in steps_.NOT_REACHED:  # nothing ran: waiting for it to come back is moot
        return Step(Action.REBOOT.value, "failed", f"{r.outcome.value}: {r.reason}")
    if r.outcome is Outcome.OK and "@@rc 0" not in out:
        return Step(Action.REBOOT.value, "failed", f"systemctl reboot refused: {out.strip()[:300]}")
    time.sleep(min(2.0, wait_s))  # give the host a moment to go down
    if _wait_back(fleet, c, tr, wait_s, time.sleep):
        return Step(
            Action.REBOOT.value, "ok", "rebooted (systemctl reboot); the host answers again"
        )
    return Step(Action.REBOOT.value, "failed", f"the host did not come back within {wait_s:.0f} s")


def check_remediation(
    fleet: Fleet,
    name: str,
    action: Action,
    *,
    gpu: int | None = None,
    ticket: str | None = None,
    eta: datetime | None = None,
    service: str | None = None,
    override_identity: str | None = None,
) -> str | None:
    """Refuse a remediation that cannot run, before anything is done (drained, claimed,
    queued): an unknown host (:class:`NotFound`), a state that refuses it (allocated,
    retired, reclaiming; service-request: a host that cannot go to maintenance), an unknown
    GPU, options of another action, a power cycle without a BMC or through a BMC whose
    identity alarm is open and not overridden. Returns the service ``restart-service``
    restarts (None for the other actions). :func:`remediate` checks it again when it runs;
    ``POST /hosts/{name}/remediate`` checks it before it queues the run."""
    if action is Action.RESTART_SERVICE:
        service = steps_.check_service(service)
    elif service:
        raise UsageError("--service belongs to --action restart-service")
    if action is Action.SERVICE_REQUEST:
        if not ticket:
            raise UsageError("--action service-request needs --ticket (e.g. RMA-123)")
        with fleet.db.session() as s:  # a refused move is refused before any drain
            host = host_by_name(s, name)
            apply_event(host.name, HostState(host.state), Event.MAINTENANCE_ON)
            _plan(s, host, gpu)
        return service
    if ticket or eta:
        raise UsageError("--ticket and --eta belong to --action service-request")
    with fleet.db.session() as s:
        host = host_by_name(s, name)
        if HostState(host.state) in _REFUSED:
            raise InvalidTransition(
                host.name, str(host.state), f"remediate {action.value}", ["not allocated/retired"]
            )
        _plan(s, host, gpu)
        if action is Action.POWER_CYCLE:
            if not steps_.has_bmc(host.vars):
                raise UsageError(f"{host.name}: --action power-cycle needs a BMC (bmc set)")
            alarm = bmc_guard.identity_alarm(s, host)
            if alarm is not None and bmc_guard.check_override(override_identity) is None:
                raise IdentityMismatch(host.name, "power-cycle", f"#{alarm.id}: {alarm.message}")
    return service


def remediate(
    fleet: Fleet,
    name: str,
    action: Action,
    *,
    gpu: int | None = None,
    ticket: str | None = None,
    eta: datetime | None = None,
    rule: str | None = None,
    timeout_s: float = 300.0,
    reboot_wait_s: float = 900.0,
    reason: str | None = None,
    service: str | None = None,
    override_identity: str | None = None,
    no_drain: bool = False,
    drain_timeout: timedelta | None = None,
    drain_api: DrainApi | None = None,
    slurm: SlurmClient | None = None,
) -> RemediationReport:
    """Run ``action`` on host ``name`` (see the module); ``rule``: the rule that ran it
    automatically (policy ``auto_remediate``); ``service``: what ``restart-service``
    restarts; ``override_identity``: the reason to power-cycle through a BMC whose identity
    alarm is open (:mod:`gpufleet.service.hosts.bmc_guard`). Issue 26: the host is drained
    first wherever work runs (:func:`gpufleet.service.hosts.drain.drain_first`: its Slurm
    node drained and its jobs waited for up to ``drain_timeout``, its pods evicted; a blocked
    drain refuses the action), unless ``no_drain`` (recorded on the events)."""
    service = check_remediation(fleet, name, action, gpu=gpu, ticket=ticket, eta=eta,
                                service=service, override_identity=override_identity)
    why = reason or f"remediate {action.value}"
    if action is Action.SERVICE_REQUEST:
        drained = drain_first(fleet, name, "remediation", why=why, no_drain=no_drain,
                              slurm_timeout=drain_timeout, api=drain_api, slurm=slurm)
        return _service_request(fleet, name, gpu=gpu, ticket=ticket, eta=eta, reason=reason,
                                drained=drained)
    with fleet.db.session() as s:
        host = host_by_name(s, name)
        plan = _plan(s, host, gpu)
        policy = pool_health_policy(s, host.pool)
        bmc_ok = steps_.has_bmc(host.vars)
    drained = drain_first(fleet, name, "remediation", why=why, no_drain=no_drain,
                          slurm_timeout=drain_timeout, api=drain_api, slurm=slurm)
    c = _claim(fleet, name, timeout_s)
    steps: list[Step] = []
    try:
        tr = transport_for_host(c.key, fleet)
        if action is Action.RESET_GPU:
            reset_ran = False
            probe_raw = _run(fleet, c, tr, probe_script(), timeout_s)
            if probe_raw.outcome is not Outcome.OK:
                steps.append(
                    Step(action.value, "failed", f"{probe_raw.outcome.value}: {probe_raw.reason}")
                )
                if probe_raw.outcome in steps_.NOT_REACHED and bmc_ok and policy.fallback_reboot:
                    steps.append(steps_.power_cycle(
                        fleet, c, tr, reboot_wait_s, "the host does not answer",
                        override_identity))
            else:
                probe = read_probe(probe_raw.output or "", plan.uuids)
                held = "; ".join(h.describe() for h in probe.holders)
                if probe.unknown:
                    steps.append(
                        Step(
                            action.value,
                            "refused",
                            "cannot tell who holds the GPU: " + "; ".join(probe.unknown),
                            plan.gpus or [],
                        )
                    )
                elif probe.holders and policy.holders is HolderPolicy.REFUSE:
                    steps.append(
                        Step(
                            action.value,
                            "refused",
                            f"the GPU is in use: {held} (policy: "
                            "refuse; stop them or set holders: stop)",
                            plan.gpus or [],
                        )
                    )
                else:
                    r = _run(fleet, c, tr, reset_script(plan.gpus, stop=probe.holders), timeout_s)
                    reset_ran = r.outcome in (Outcome.OK, Outcome.TIMEOUT)  # a hung reset too
                    if r.outcome is not Outcome.OK:
                        steps.append(
                            Step(
                                action.value,
                                "failed",
                                f"{r.outcome.value}: {r.reason}",
                                plan.gpus or [],
                            )
                        )
                    else:
                        res = read_reset(r.output or "", plan.expected)
                        detail = res.detail
                        if probe.holders:
                            detail = f"stopped {held}; {detail}"
                        if plan.domain_note:
                            detail = f"{plan.domain_note}; {detail}"
                        steps.append(
                            Step(
                                action.value,
                                "ok" if res.ok else "failed",
                                detail,
                                plan.gpus or [],
                                res.bug_report,
                            )
                        )
            # only a reset that ran and failed falls back (an unreachable host is not rebooted)
            if steps[-1].outcome == "failed" and reset_ran and policy.fallback_reboot:
                steps.append(_reboot(fleet, c, tr, timeout_s, reboot_wait_s))
        elif action is Action.RESTART_SERVICE:
            assert service is not None
            steps.append(steps_.restart_service(c, tr, service, timeout_s))
        elif action is Action.POWER_CYCLE:
            steps.append(steps_.power_cycle(
                fleet, c, tr, reboot_wait_s, "power cycle asked", override_identity))
        else:
            steps.append(_reboot(fleet, c, tr, timeout_s, reboot_wait_s))
            if steps[-1].outcome == "failed" and bmc_ok:  # the BMC rung (issue 24)
                steps.append(steps_.power_cycle(
                    fleet, c, tr, reboot_wait_s, "in-band reboot failed", override_identity))
        report = _apply(fleet, c, name, action, steps, plan, rule, reason, drained)
    finally:
        release_claims(fleet, c.token)
    return report


def _payload(r: RemediationReport) -> dict[str, Any]:
    return {
        "host": r.host,
        "action": r.action,
        "ok": r.ok,
        "state": r.state,
        "steps": [vars(st) for st in r.steps],
    }


def _apply(
    fleet: Fleet,
    c: Claimed,
    name: str,
    action: Action,
    steps: list[Step],
    plan: _Plan,
    rule: str | None,
    reason: str | None,
    drained: dict[str, Any] | None = None,
) -> RemediationReport:
    now = fleet.now()
    ids: list[int] = []
    with fleet.db.session() as s:
        host = s.get(Host, c.host_id, with_for_update=True)
        if host is None or not holds_claim(host, c.token):
            raise Conflict(f"host {name} changed hands while it was remediated; nothing recorded")
        for st in steps:
            touched = st.gpus or sorted(plan.serials)
            serials = [plan.serials[i] for i in touched if i in plan.serials]
            row = Remediation(
                host_id=host.id,
                host_name=host.name,
                action=Action(st.action),
                gpus=st.gpus,
                serials=serials,
                started_at=now,
                finished_at=fleet.now(),
                outcome=st.outcome,
                detail=st.detail + (f"; bug report {st.bug_report}" if st.bug_report else ""),
                steps=[vars(st)],
                rule=rule,
                actor=fleet.actor,
            )
            s.add(row)
            s.flush()
            ids.append(row.id)
            record_event(
                s,
                fleet,
                EventKind.REMEDIATION,
                f"{st.action} {st.outcome}: {st.detail}",
                host=host,
                data={
                    "action": st.action,
                    "outcome": st.outcome,
                    "gpus": st.gpus,
                    "remediation": row.id,
                    "rule": rule,
                    "drain": drained,
                },
            )
            if st.outcome != "refused":
                for i in touched:
                    if i in plan.serials:
                        s.add(
                            PartEvent(
                                serial=plan.serials[i],
                                at=now,
                                host_id=host.id,
                                host_name=host.name,
                                gpu_index=i,
                                kind=st.action,
                                message=f"{st.outcome}: {st.detail}",
                                data={"remediation": row.id},
                            )
                        )
        ran = any(st.outcome != "refused" for st in steps)
        state = HostState(host.state)
        if ran and state in _TO_VALIDATION:
            why = reason or f"remediated ({', '.join(f'{st.action} {st.outcome}' for st in steps)})"
            transition(s, fleet, host, _TO_VALIDATION[state], why)
        drop_claim(host, fleet.now())
        ok = bool(steps) and steps[-1].outcome == "ok"
        report = RemediationReport(name, action.value, ok, steps, str(host.state), ids,
                                   drain=drained)
        webhooks.enqueue(s, fleet, EventKind.REMEDIATION.value, name, _payload(report))
    return report


def _service_request(
    fleet: Fleet,
    name: str,
    *,
    gpu: int | None,
    ticket: str | None,
    eta: datetime | None,
    reason: str | None,
    drained: dict[str, Any],
) -> RemediationReport:
    with fleet.db.session() as s:
        host = host_by_name(s, name, for_update=True)
        plan = _plan(s, host, gpu)
        why = reason or f"service request {ticket}" + (
            f", back by {eta.isoformat()}" if eta else ""
        )
        transition(
            s,
            fleet,
            host,
            Event.MAINTENANCE_ON,
            why,
            data={"ticket": ticket, "eta": eta.isoformat() if eta else None},
        )
        host.eta = eta
        touched = plan.gpus if plan.gpus is not None else sorted(plan.serials)
        serials = [plan.serials[i] for i in touched if i in plan.serials]
        now = fleet.now()
        step = Step(Action.SERVICE_REQUEST.value, "ok", why, list(plan.gpus or []))
        row = Remediation(
            host_id=host.id,
            host_name=host.name,
            action=Action(step.action),
            gpus=step.gpus,
            serials=serials,
            started_at=now,
            finished_at=now,
            outcome="ok",
            detail=why,
            steps=[vars(step)],
            ticket=ticket,
            eta=eta,
            actor=fleet.actor,
        )
        s.add(row)
        s.flush()
        record_event(
            s,
            fleet,
            EventKind.REMEDIATION,
            f"service-request {ticket}: {why}",
            host=host,
            data={
                "action": step.action,
                "ticket": ticket,
                "remediation": row.id,
                "eta": eta.isoformat() if eta else None,
                "gpus": step.gpus,
                "drain": drained,
            },
        )
        for i in touched:
            if i in plan.serials:
                s.add(
                    PartEvent(
                        serial=plan.serials[i],
                        at=now,
                        host_id=host.id,
                        host_name=host.name,
                        gpu_index=i,
                        kind="rma",
                        message=f"service request {ticket}",
                        data={"ticket": ticket, "remediation": row.id},
                    )
                )
        report = RemediationReport(name, step.action, True, [step], str(host.state), [row.id],
                                   drain=drained)
        webhooks.enqueue(s, fleet, EventKind.REMEDIATION.value, name, _payload(report))
    return report


def ladder(fleet: Fleet, name: str) -> list[dict[str, Any]]:
    """The rungs a host has climbed, oldest first (``hosts show``): the fast read layer's
    :func:`~gpufleet.service.core.fastread.remediation_ladder` (NotFound: no such host)."""
    from gpufleet.service.core import fastread

    with fleet.db.session() as s:
        host_by_name(s, name)
    with fastread.fleet_read(fleet) as read:
        return fastread.remediation_ladder(read, name)


def auto_remediate(
    fleet: Fleet, name: str, rule: str, *, drain_api: DrainApi | None = None,
    slurm: SlurmClient | None = None,
) -> RemediationReport | None:
    """The hook the health rules call when ``rule`` fires on ``name``: runs the first rung
    (reset-gpu) when the host's pool lists the rule under ``auto_remediate``; None otherwise.
    Drained first like a manual remediation (:func:`remediate`), waiting for Slurm jobs as
    long as for pods (``GPUFLEET_KUBE_DRAIN_TIMEOUT``): a sweep is not held for half an hour;
    a blocked drain refuses the step (:class:`~gpufleet.errors.DrainBlocked`)."""
    with fleet.db.session() as s:
        host = host_by_name(s, name)
        policy = pool_health_policy(s, host.pool)
    if rule not in policy.auto_remediate:
        return None
    return remediate(fleet, name, Action.RESET_GPU, rule=rule, drain_api=drain_api, slurm=slurm,
                     drain_timeout=timedelta(seconds=fleet.settings.k8s_drain_timeout_s))
