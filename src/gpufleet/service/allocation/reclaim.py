"""Reclaim released hosts: check what the lessee left, then validate, then back to the pool.

Hosts in ``reclaiming`` (moved there by a release or an expired lease, or left there by a
crash: ``gpufleet reclaim SELECTOR``) go through the claim -> run -> apply engine
(:mod:`gpufleet.service.core.pipeline`): one round trip runs the collection script followed by the
reclaim sections (:data:`gpufleet.collect.sections.RECLAIM_REGISTRY`); the apply step stores
the fresh facts as a collection does (:func:`gpufleet.service.hosts.collect.apply_result`: changes
since the last validation send the host to ``validating``), then, in one short transaction,
judges the host:

* the reclaim checks (:func:`gpufleet.domain.reclaim.judge_reclaim`: GPU processes, GPU memory,
  pending row remaps, data mounts, the lessee's processes and crontabs, scratch), and
* the normal validation checks (:func:`gpufleet.domain.profiles.evaluate`, as ``validate``).

Both pass: ``reclaim_passed`` -> ``available`` with the profiles passed. Anything else (facts
that could not be collected included: fail closed): ``reclaim_failed`` -> ``quarantined``,
fault ``reclaim_failed`` (or the hardware fault validation found), with the findings stored as
evidence of kind ``reclaim``.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.collect.bundle import split_bundle
from gpufleet.collect.reclaim import cleanup_section, read_reclaim
from gpufleet.collect.script import remote_script
from gpufleet.collect.sections import RECLAIM_REGISTRY, REGISTRY
from gpufleet.collect.transport import Outcome, RawResult
from gpufleet.domain.checks import ActiveEvidence
from gpufleet.domain.events import EvidenceKind
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import HARDWARE_FAULTS, Fault, Health
from gpufleet.domain.leases import LeaseState
from gpufleet.domain.profiles import Decision, ValidationOutcome, evaluate
from gpufleet.domain.reclaim import (
    UID_MIN,
    ReclaimFindings,
    ReclaimPolicy,
    ReclaimVerdict,
    judge_reclaim,
)
from gpufleet.domain.roles import role_of
from gpufleet.domain.spec import ExpectedSpec
from gpufleet.domain.states import Event, HostState
from gpufleet.errors import GpufleetError
from gpufleet.service.allocation.reclaim_policy import clean_by_host, record_cleanup
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.lifecycle import transition
from gpufleet.service.core.pipeline import (
    Claimed,
    Pipeline,
    check_forks,
    check_timeout,
    claim_hosts,
    claim_lease,
)
from gpufleet.service.core.policies import Policies
from gpufleet.service.core.select import selected_names
from gpufleet.service.hosts.collect import apply_result, open_run, refuse_host
from gpufleet.service.hosts.validate import evidence_kinds, store_evidence
from gpufleet.store.repo import baseline_for_host
from gpufleet.store.tables import FactSnapshot, Host, Lease, LeaseHost, Validation

#: What the reclaim of a host another worker holds reports.
HELD_ELSEWHERE = "skipped: another worker holds this host"


@dataclass
class HostReclaim:
    """What reclaim did to one host."""

    host: str
    state: str
    ok: bool
    summary: str
    issues: list[str] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)


@dataclass
class ReclaimReport:
    """One reclaim run: a verdict per host (skipped hosts included, with why)."""

    hosts: list[HostReclaim]

    @property
    def ok(self) -> bool:
        """Every host went back to ``available``."""
        return all(h.ok for h in self.hosts)


def reclaim_policy(
    fleet: Fleet,
    login_user: str | None,
    lessee_users: Sequence[str] | None,
    clean: Sequence[str] = (),
) -> ReclaimPolicy:
    """The reclaim policy of the settings (GPUFLEET_RECLAIM_*) and of the host's pool
    (``clean``: ``reclaim policy POOL --clean``) for one host."""
    st = fleet.settings
    return ReclaimPolicy(
        data_paths=st.path_list(st.reclaim_data_paths),
        idle_memory_mib=st.reclaim_idle_memory_mib,
        login_user=login_user,
        lessee_users=tuple(lessee_users) if lessee_users is not None else None,
        scratch_clean=st.reclaim_scratch_policy == "clean" or "scratch" in clean,
        clean=tuple(clean),
    )


#: Added to a lessee finding when the lease recorded no users (the UID rule found it).
FALLBACK_NOTE = " (no users recorded with the lease: any with UID >= 1000)"


def _found_lessee(check: str, message: str) -> bool:
    return check.startswith("lessee_") and not message.startswith("cannot")


def lessee_rule(policy: ReclaimPolicy) -> str:
    """Whose processes and crontabs the reclaim looked for, in words (stored as evidence)."""
    if policy.lessee_users is not None:
        return "the lease's users: " + ", ".join(policy.lessee_users)
    return (
        f"no users recorded with the lease: every user with UID >= {UID_MIN} except "
        f"{policy.login_user or 'the login user'} and nobody (crontabs: all but root)"
    )


def reclaim_script(fleet: Fleet, timeout_s: float, policy: ReclaimPolicy | None = None) -> str:
    """The pool's cleanup, the collection script and the reclaim sections, with the scratch
    policy (``policy``: the host's, for its cleanup; None: the settings', no cleanup)."""
    st = fleet.settings
    policy = policy or reclaim_policy(fleet, None, None)
    users = " ".join(policy.lessee_users or ())
    head = (
        f"RECLAIM_SCRATCH={shlex.quote(' '.join(st.path_list(st.reclaim_scratch_paths)))}\n"
        f"RECLAIM_CLEAN={1 if policy.scratch_clean else 0}\n"
        f"RECLAIM_DO={shlex.quote(' '.join(a for a in policy.clean if a != 'scratch'))}\n"
        f"RECLAIM_USERS={shlex.quote(users)}\n"
        f"RECLAIM_LOGIN={shlex.quote(policy.login_user or '')}\n"
        f"RECLAIM_DATA={shlex.quote(' '.join(policy.data_paths))}\n"
    )
    return head + remote_script(
        tool_timeout_s=max(5, int(timeout_s * 0.6)),
        registry=(cleanup_section(), *REGISTRY, *RECLAIM_REGISTRY),
    )


def reclaim_hosts(
    fleet: Fleet,
    host_names: list[str],
    *,
    lease_id: int | None = None,
    lessee_users: Sequence[str] | None = None,
    forks: int | None = None,
    timeout_s: float | None = None,
    on_start: Callable[[int], None] | None = None,
    on_result: Callable[[RawResult], None] | None = None,
) -> ReclaimReport:
    """Reclaim the named hosts that are in ``reclaiming`` (see the module docstring).

    ``lease_id`` and ``lessee_users`` come from the lease that ended (the users whose
    processes and crontabs must be gone; without them, every non-system user's count).
    Hosts in another state are reported and left alone.
    """
    if not host_names:
        return ReclaimReport([])
    timeout_s = check_timeout(fleet.settings.collect_timeout_s if timeout_s is None else timeout_s)
    forks = check_forks(fleet.settings.forks if forks is None else forks)
    policies = Policies(fleet).load()
    connect_s = fleet.settings.connect_timeout_s
    selector = ",".join(host_names)
    states = _owed_to_reclaiming(fleet, host_names)
    out = [
        HostReclaim(name, st.value, False, f"skipped: not in reclaiming (it is {st.value})")
        for name, st in sorted(states.items())
        if st is not HostState.RECLAIMING
    ]
    out += [
        HostReclaim(name, "?", False, "skipped: no such host")
        for name in sorted(set(host_names) - set(states))
    ]
    if not any(st is HostState.RECLAIMING for st in states.values()):
        return ReclaimReport(out)

    def lease(n: int) -> timedelta:
        return claim_lease(n, forks, timeout_s, connect_s)

    got = claim_hosts(
        fleet,
        selector,
        None,
        lease,
        skip_states=[st for st in HostState if st is not HostState.RECLAIMING],
        start_run=open_run(fleet, selector, None),
        refuse=refuse_host(fleet),
    )
    run_id = got.run_id
    assert run_id is not None
    with fleet.db.session() as s:
        clean = clean_by_host(s, [c.target.name for c in got.hosts])

    def policy_of(c: Claimed) -> ReclaimPolicy:
        return reclaim_policy(fleet, c.target.user, lessee_users, clean.get(c.target.name, ()))

    def apply(c: Claimed, raw: RawResult) -> HostReclaim:
        return _apply(fleet, run_id, c, raw, policies, lease_id, policy_of(c))

    out += [HostReclaim(n, "reclaiming", False, f"error: {why}") for n, why in got.refused]
    out += [HostReclaim(n, "reclaiming", False, HELD_ELSEWHERE) for n in got.busy]
    out += Pipeline(
        fleet,
        got,
        command=lambda c: reclaim_script(fleet, timeout_s, policy_of(c)),
        apply=apply,
        forks=forks,
        timeout_s=timeout_s,
        on_start=on_start,
        on_result=on_result,
    ).run()
    return ReclaimReport(sorted(out, key=lambda h: h.host))


#: States a host that owes a passing reclaim is taken back to ``reclaiming`` from.
RERUN_FROM = (HostState.QUARANTINED, HostState.VALIDATING)


def _owed_to_reclaiming(fleet: Fleet, host_names: list[str]) -> dict[str, HostState]:
    """The named hosts' states, after moving those that owe a passing reclaim (a failed
    reclaim, a release that left reclaiming another way) from quarantined or validating back
    to ``reclaiming``: ``gpufleet reclaim HOST`` re-runs the checks on them."""
    states: dict[str, HostState] = {}
    with fleet.db.session() as s:
        for h in s.scalars(
            select(Host).where(Host.name.in_(host_names)).order_by(Host.name).with_for_update()
        ):
            if h.reclaim_due and HostState(h.state) in RERUN_FROM:
                transition(
                    s,
                    fleet,
                    h,
                    Event.RECLAIM,
                    f"reclaim checks re-run ({h.reclaim_due})",
                    data={"reclaim_due": h.reclaim_due},
                )
            states[h.name] = HostState(h.state)
    return states


def reclaim_selected(fleet: Fleet, selector: str, **kw: Any) -> ReclaimReport:
    """``gpufleet reclaim SELECTOR``: reclaim the selected hosts that are in ``reclaiming``
    (after a crash, or a reclaim that could not reach them)."""
    with fleet.db.session() as s:
        names = selected_names(s, selector)
        if "lessee_users" in kw or "lease_id" in kw:
            return reclaim_hosts(fleet, names, **kw)
        groups = _by_last_lease(s, names)
    hosts: list[HostReclaim] = []
    for (lease_id, users), group in sorted(groups.items(), key=lambda g: g[0][0] or 0):
        got = reclaim_hosts(
            fleet,
            group,
            lease_id=lease_id,
            lessee_users=list(users) if users is not None else None,
            **kw,
        )
        hosts += got.hosts
    return ReclaimReport(sorted(hosts, key=lambda h: names.index(h.host)))


def _by_last_lease(
    s: Session, names: list[str]
) -> dict[tuple[int | None, tuple[str, ...] | None], list[str]]:
    """The selected hosts grouped by the lease that last held each (its id and users), so a
    reclaim run by hand checks the same users the release would have."""
    last: dict[str, tuple[int | None, tuple[str, ...] | None]] = dict.fromkeys(names, (None, None))
    rows = s.execute(
        select(LeaseHost.host_name, Lease.id, Lease.users)
        .join(Lease, Lease.id == LeaseHost.lease_id)
        .where(LeaseHost.host_name.in_(names), Lease.state != LeaseState.RESERVED)
        .order_by(Lease.starts_at, Lease.id)
    )
    for name, lease_id, users in rows:
        last[name] = (lease_id, tuple(users) if users is not None else None)
    out: dict[tuple[int | None, tuple[str, ...] | None], list[str]] = {}
    for name in names:
        out.setdefault(last[name], []).append(name)
    return out


def owed_after(verdict: ReclaimVerdict) -> str | None:
    """What a host owes after a reclaim whose checks found ``verdict``: None when clean."""
    return None if verdict.clean else f"reclaim failed: {verdict.summary()}"


def _findings(raw: RawResult) -> ReclaimFindings:
    if raw.outcome is not Outcome.OK or raw.output is None:
        return ReclaimFindings(problems=[f"{raw.host}: {raw.outcome.value}: {raw.reason}"])
    try:
        return read_reclaim(split_bundle(raw.output, f"{raw.host}: reclaim output"), raw.host)
    except GpufleetError as exc:
        return ReclaimFindings(problems=[str(exc)])


def _apply(
    fleet: Fleet,
    run_id: int,
    c: Claimed,
    raw: RawResult,
    policies: Policies,
    lease_id: int | None,
    policy: ReclaimPolicy,
) -> HostReclaim:
    """Store the facts as a collection does, then judge the host in one short transaction."""
    name = c.target.name
    collected = apply_result(fleet, run_id, c.host_id, raw, c.token, policies=policies)
    findings = _findings(raw)
    now = fleet.now()
    with fleet.db.session() as s:
        host = s.get(Host, c.host_id, with_for_update=True)
        if host is None:
            return HostReclaim(name, "?", False, "host removed while it was reclaimed")
        # Only facts collected in this run count (fail closed: old facts prove nothing).
        snap = s.get(FactSnapshot, collected.snapshot_id) if collected.snapshot_id else None
        facts = HostFacts.model_validate(snap.facts) if snap is not None else None
        lessee_users = policy.lessee_users
        verdict = judge_reclaim(facts, findings, policy)
        record_cleanup(s, fleet, host, findings.cleanup)
        if HostState(host.state) is not HostState.RECLAIMING:
            # A change since the last validation sent it to validating (or an operator
            # moved it): the reclaim verdict is no longer this run's to give. What the
            # checks saw of the lessee's leftovers still counts (validation holds a host
            # that owes a passing reclaim).
            if host.reclaim_due:
                host.reclaim_due = owed_after(verdict)
            return HostReclaim(
                name,
                host.state.value,
                False,
                f"not judged: now {host.state.value} ({host.status_reason or 'moved meanwhile'})",
            )
        fallback = policy.lessee_users is None
        issues = [
            f"{i.check}: {i.message}"
            + (FALLBACK_NOTE if fallback and _found_lessee(i.check, i.message) else "")
            for i in verdict.issues
        ]
        outcome: ValidationOutcome | None = None
        if facts is not None:
            outcome = evaluate(
                facts,
                ExpectedSpec.model_validate(host.expected),
                baseline_for_host(s, host),
                policies.profiles,
                policies.xid,
                now,
                role=role_of(host.role).value,
                catalogues=policies.catalogues,
                evidence=ActiveEvidence.from_kinds(
                    evidence_kinds(s, host, now - fleet.settings.validation_ttl)
                ),
            )
            if outcome.decision is not Decision.AVAILABLE:
                issues += [f"validation: {r}" for r in outcome.reasons] or [
                    f"validation: {outcome.decision.value}"
                ]
        else:
            issues.append(
                f"validation: no facts collected ({collected.outcome.value}: "
                f"{collected.reason or 'no GPU report'})"
            )
        passed = not issues and outcome is not None
        hw = sorted(str(f) for f in (outcome.faults if outcome else set()) if f in HARDWARE_FAULTS)
        summary = "clean" if passed else "; ".join(issues)
        store_evidence(
            s,
            fleet,
            host,
            EvidenceKind.RECLAIM,
            {
                "lease_id": lease_id,
                "lessee_users": list(lessee_users) if lessee_users is not None else None,
                "lessee_rule": lessee_rule(policy),
                "issues": issues,
                "needs_reset": verdict.needs_reset,
                "findings": findings.model_dump(mode="json"),
                "validation": outcome.decision.value if outcome else None,
            },
            f"{c.transport}: reclaim",
            passed=passed,
            summary=summary,
        )
        data: dict[str, object] = {"lease_id": lease_id, "issues": issues}
        if passed and outcome is not None:
            transition(
                s,
                fleet,
                host,
                Event.RECLAIM_PASSED,
                "reclaim checks and validation passed",
                data={**data, "profiles": sorted(outcome.profiles_passed)},
                health=outcome.health,
                fault=None,
                fault_reason=None,
            )
            host.profiles = sorted(outcome.profiles_passed)
            host.validated_until = now + fleet.settings.validation_ttl
            host.reclaim_due = None
        else:
            fault = Fault(hw[0]) if hw else Fault.RECLAIM_FAILED
            transition(
                s,
                fleet,
                host,
                Event.RECLAIM_FAILED,
                f"reclaim failed: {summary}",
                data={**data, "faults": hw},
                health=Health.CRITICAL if hw or verdict.needs_reset else Health.WARNING,
                fault=fault,
                fault_reason=summary,
            )
            # Leftovers seen gone: the host owes no more reclaim (a hardware fault found by
            # validation is repaired and validated as any other); else it returns only
            # through a reclaim that passes, or `unquarantine --force`.
            host.reclaim_due = owed_after(verdict)
        if outcome is not None and snap is not None:
            s.add(
                Validation(
                    host_id=host.id,
                    at=now,
                    snapshot_id=snap.id,
                    baseline=None,
                    decision=outcome.decision,
                    profiles=sorted(outcome.profiles_passed),
                    results=[
                        r.model_dump(mode="json") | {"key": k} for k, r in outcome.results.items()
                    ],
                    expires_at=host.validated_until,
                )
            )
        return HostReclaim(
            name, host.state.value, passed, summary, issues, list(host.profiles or [])
        )
