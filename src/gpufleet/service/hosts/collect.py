"""Collect facts from many hosts: claim (short txn) -> run (no txn) -> apply (short txn).

Several collector processes may share one PostgreSQL: hosts are claimed with
``SELECT ... FOR UPDATE SKIP LOCKED`` and a lock token with a lease, so two workers never
collect the same host at once, and results are applied only while the token still matches.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import split_bundle
from gpufleet.collect.hostkeys import is_fingerprint_pin, pin_accepts
from gpufleet.collect.script import remote_script
from gpufleet.collect.transport import (
    Outcome,
    RawResult,
    fingerprint,
    get_transport_factory,
)
from gpufleet.domain.changes import detect_changes
from gpufleet.domain.events import AlarmKind, AlarmSeverity, EventKind
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import HARDWARE_FAULTS as HW_FAULTS
from gpufleet.domain.health import Fault, Health
from gpufleet.domain.identity import duplicate_reason
from gpufleet.domain.profiles import Decision
from gpufleet.domain.snapshot_columns import derived_columns as derived_columns
from gpufleet.domain.states import Event, HostState
from gpufleet.errors import ParseError
from gpufleet.service.core.alarms import close_alarms, raise_alarm
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.lifecycle import on_changes, transition
from gpufleet.service.core.pipeline import CLAIM_MARGIN_S as CLAIM_MARGIN_S
from gpufleet.service.core.pipeline import (
    Claim,
    Claimed,
    Pipeline,
    check_forks,
    check_timeout,
    claim_hosts,
    claim_lease,
    drop_claim,
    holds_claim,
)
from gpufleet.service.core.pipeline import release_claims as release_claims
from gpufleet.service.core.pipeline import renew_claims as renew_claims
from gpufleet.service.core.pipeline import transport_for_host as transport_for_host
from gpufleet.service.core.policies import Policies
from gpufleet.service.hosts import gpu_health, reachability
from gpufleet.service.hosts.fact_snapshots import Duplicates, content_hashes, store_facts
from gpufleet.service.hosts.fact_snapshots import facts_digest as facts_digest
from gpufleet.store.tables import CollectionResult, CollectionRun, Host


@dataclass
class HostResult:
    """The outcome of one host in a run, for tables and JSON."""

    host: str
    outcome: Outcome
    reason: str = ""
    duration_s: float = 0.0
    snapshot_id: int | None = None
    gpus: int | None = None
    changes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)  # lifecycle moves this result caused


@dataclass
class RunReport:
    """A whole collection run."""

    run_id: int
    results: list[HostResult]
    skipped_locked: list[str] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(r.outcome.value for r in self.results))

    @property
    def all_held_elsewhere(self) -> bool:
        """Nothing was collected because every selected host is held by another worker."""
        return not self.results and bool(self.skipped_locked)

    @property
    def ok(self) -> bool:
        """Every selected host collected: none failed, none skipped as held elsewhere."""
        return not self.skipped_locked and all(r.outcome is Outcome.OK for r in self.results)


#: The claim a collection holds on one host (see :mod:`gpufleet.service.core.pipeline`).
_Claimed = Claimed


def open_run(
    fleet: Fleet, selector: str | None, transport: str | None
) -> Callable[[Session], int]:
    def start(s: Session) -> int:
        run = CollectionRun(
            started_at=fleet.now(),
            transport=transport or "auto",
            selector=selector,
            actor=fleet.actor,
            counts={},
        )
        s.add(run)
        s.flush()
        return run.id

    return start


def refuse_host(fleet: Fleet) -> Callable[[Session, int | None, Host, str], None]:
    """Record a host whose transport cannot be used as an ``error`` of the run."""

    def refuse(s: Session, run_id: int | None, h: Host, reason: str) -> None:
        assert run_id is not None
        h.last_outcome = Outcome.ERROR
        h.last_reason = reason
        h.updated_at = fleet.now()
        s.add(CollectionResult(run_id=run_id, host_id=h.id, outcome=Outcome.ERROR, reason=reason))

    return refuse


def claim_for_collection(
    fleet: Fleet,
    selector: str | None,
    transport: str | None,
    lease: Callable[[int], timedelta],
    limit: int | None = None,
) -> Claim:
    """Create the collection run and claim the selected hosts (not retired) for it: all of
    them, or the first ``limit`` free ones (the pipeline claims the rest as it goes)."""
    return claim_hosts(
        fleet,
        selector,
        transport,
        lease,
        start_run=open_run(fleet, selector, transport),
        refuse=refuse_host(fleet),
        limit=limit,
    )


def claim(
    fleet: Fleet, selector: str | None, transport: str | None, lease: timedelta
) -> tuple[int, list[Claimed], list[str]]:
    """Create the run and claim the selected hosts; return those another worker holds."""
    c = claim_for_collection(fleet, selector, transport, lambda _n: lease)
    assert c.run_id is not None
    return c.run_id, c.hosts, c.busy


def claim_into_run(
    fleet: Fleet,
    run_id: int,
    selector: str,
    lease: Callable[[int], timedelta],
    *,
    token: str,
    take_over: str,
) -> Claim:
    """Claim the selected hosts for the existing collection run ``run_id`` (one chunk of a
    queued run, :mod:`gpufleet.service.background.jobs`) under ``token``; hosts still claimed under
    ``take_over`` (an earlier, killed attempt of the same chunk) are taken back."""
    return claim_hosts(
        fleet,
        selector,
        None,
        lease,
        start_run=lambda _s: run_id,
        refuse=refuse_host(fleet),
        token=token,
        take_over=take_over,
    )


def collect_claimed(
    fleet: Fleet,
    run_id: int,
    got: Claim,
    *,
    forks: int,
    timeout_s: float,
    policies: Policies,
    on_start: Callable[[int], None] | None = None,
    on_result: Callable[[RawResult], None] | None = None,
    more: Callable[[int, str], Claim] | None = None,
) -> list[HostResult]:
    """Collect the hosts ``got`` holds (and those ``more`` claims as the run goes, see
    :attr:`Pipeline.more`) and store each result into run ``run_id`` (hosts refused before
    claiming are errors of the run); the claims are released as results land."""
    script = remote_script(tool_timeout_s=max(5, int(timeout_s * 0.6)))
    results = Pipeline(
        fleet,
        got,
        command=lambda _c: script,
        apply=lambda c, r: apply_result(fleet, run_id, c.host_id, r, c.token, policies=policies),
        apply_many=lambda group: apply_results(
            fleet, run_id, [(c.host_id, r, c.token) for c, r in group], policies=policies
        ),
        forks=forks,
        timeout_s=timeout_s,
        on_start=on_start,
        on_result=on_result,
        more=more,
    ).run()
    return [HostResult(h, Outcome.ERROR, why) for h, why in got.refused] + results


def collect(
    fleet: Fleet,
    selector: str | None = None,
    *,
    transport: str | None = None,
    forks: int | None = None,
    timeout_s: float | None = None,
    on_start: Callable[[int], None] | None = None,
    on_result: Callable[[RawResult], None] | None = None,
    policies: Policies | None = None,
) -> RunReport:
    """Collect every selected host once and store what came back.

    Everything that can be refused is refused before a host is claimed (bad timeout or forks,
    an unknown ``transport``, unreadable profiles). Claims last as long as the work needs
    (:func:`claim_lease`) and are renewed while the run goes on; an interrupted run (Ctrl-C,
    SIGTERM, a database error) releases every claim it still holds before the error goes on.
    """
    settings = fleet.settings
    timeout_s = check_timeout(
        settings.collect_timeout_s if timeout_s is None else timeout_s, "--timeout"
    )
    forks = check_forks(settings.forks if forks is None else forks, "--forks")
    if transport is not None:
        get_transport_factory(transport)  # an unknown name: ConfigError, nothing claimed
    policies = (policies or Policies(fleet)).load()
    connect_s = settings.connect_timeout_s

    def lease(n: int) -> timedelta:
        return claim_lease(n, forks, timeout_s, connect_s)

    # Claimed in batches of `forks` as the run frees slots (FOR UPDATE SKIP LOCKED LIMIT n),
    # so collectors started together on one database split the hosts between them.
    got = claim_for_collection(fleet, selector, transport, lease, limit=forks)
    run_id = got.run_id
    assert run_id is not None

    def more(n: int, after: str) -> Claim:
        return claim_hosts(
            fleet,
            selector,
            transport,
            lease,
            start_run=lambda _s: run_id,
            refuse=refuse_host(fleet),
            token=got.token,
            limit=n,
            after=after,
            follow_up=True,
        )

    results = collect_claimed(
        fleet,
        run_id,
        got,
        forks=forks,
        timeout_s=timeout_s,
        policies=policies,
        on_start=on_start,
        on_result=on_result,
        more=more,
    )
    with fleet.db.session() as s:
        run = s.get(CollectionRun, run_id)
        assert run is not None
        run.finished_at = fleet.now()
        run.counts = dict(Counter(r.outcome.value for r in results))
        from gpufleet.service.hosts.racks import check_racks  # issue 27: rack alarms

        check_racks(s, fleet)
    results.sort(key=lambda r: r.host)
    return RunReport(run_id, results, got.busy)


def parse_result(raw: RawResult, collected_at: datetime) -> tuple[RawResult, HostFacts | None]:
    """Parse a raw OK result; a parse failure becomes BAD_OUTPUT with the parser's message."""
    if raw.outcome is not Outcome.OK or raw.output is None:
        return raw, None
    try:
        sections = split_bundle(raw.output, f"{raw.host}: collection output")
        facts = assemble_facts(sections, collected_at, raw.host)
    except ParseError as exc:
        if exc.host is None and not str(exc).startswith(raw.host):
            exc.host = raw.host
        return RawResult(
            raw.host, Outcome.BAD_OUTPUT, str(exc), None, raw.host_key, raw.duration_s
        ), None
    return raw, facts


def apply_result(
    fleet: Fleet,
    run_id: int,
    host_id: int,
    raw: RawResult,
    token: str | None = None,
    *,
    policies: Policies | None = None,
) -> HostResult:
    """Store one host's result in its own short transaction, guarded by the claim token
    (:func:`apply_results` of one host; what it raises is raised here)."""
    out = apply_results(fleet, run_id, [(host_id, raw, token)], policies=policies)[0]
    if isinstance(out, Exception):
        raise out
    return out


def apply_results(
    fleet: Fleet,
    run_id: int,
    group: Sequence[tuple[int, RawResult, str | None]],
    *,
    policies: Policies | None = None,
) -> list[HostResult | Exception]:
    """Store a group of results (host id, raw result, claim token) in one transaction, each
    host in a savepoint of its own (issue 30: one commit, one row-lock query and one
    duplicate-machine read per group): a host whose store fails is rolled back alone and its
    exception is its entry, the others are committed. Each is guarded by its claim token.

    If the lease ran out and another worker claimed the host meanwhile, this (older) result is
    discarded rather than written over the newer worker's.

    New critical faults act at once: an ``available`` host whose fresh facts show a
    quarantining fault (the domain's checks decide, as validation would) is quarantined in
    this transaction; a changed host key quarantines it with ``host_key_changed``; a host that
    is the same machine as an earlier-enrolled one is flagged and leaves ``available``.
    """
    now = fleet.now()
    parsed = [(host_id, token, *parse_result(raw, now)) for host_id, raw, token in group]
    out: list[HostResult | Exception] = []
    applied: set[int] = set()  # stored: not discarded (claim lost, host gone) nor failed
    policies = policies or Policies(fleet)
    with fleet.db.session() as s:
        fleet.db.begin_for_savepoints(s)
        ids = sorted({host_id for host_id, *_ in parsed})
        hosts: dict[int, Host] = {}
        for k in range(0, len(ids), 500):  # locked in id order: no deadlock between groups
            hosts.update(
                (h.id, h)
                for h in s.scalars(
                    select(Host)
                    .where(Host.id.in_(ids[k : k + 500]))
                    .order_by(Host.id)
                    .with_for_update()
                )
            )
        hashes = content_hashes(s, [h.latest_snapshot_id for h in hosts.values()])
        dups = Duplicates.load(
            s, [(host_id, facts) for host_id, _t, _r, facts in parsed if facts is not None]
        )
        for host_id, token, raw, facts in parsed:
            try:
                with s.begin_nested():
                    res, whole = _apply(
                        s, fleet, run_id, hosts.get(host_id), raw, facts, token, policies, now,
                        dups, hashes,
                    )
                dups.keep()
                out.append(res)
                if whole:
                    applied.add(host_id)
            except Exception as exc:  # this host's savepoint is rolled back, not the group
                dups.drop()
                out.append(exc)
    for (host_id, _t, raw, _f), done in zip(parsed, out, strict=True):
        if raw.outcome in reachability.UNREACHED and host_id in applied:
            assert isinstance(done, HostResult)  # after the commit: it may read the BMC
            done.actions += reachability.on_unreached(
                fleet, host_id, raw.outcome, raw.reason, "collect"
            )
    return out


def _apply(
    s: Session,
    fleet: Fleet,
    run_id: int,
    host: Host | None,
    raw: RawResult,
    facts: HostFacts | None,
    token: str | None,
    policies: Policies,
    now: datetime,
    dups: Duplicates,
    hashes: dict[int, str | None],
) -> tuple[HostResult, bool]:
    """One host's part of :func:`apply_results`, in its savepoint; and whether it was stored
    (not discarded: the host is gone, or another worker holds it now)."""
    res = HostResult(raw.host, raw.outcome, raw.reason, raw.duration_s)
    if host is None:
        return res, False
    if not holds_claim(host, token):
        return HostResult(
            raw.host,
            Outcome.ERROR,
            "result discarded: the claim expired and another worker holds the host now",
            raw.duration_s,
        ), False
    if raw.outcome is Outcome.HOST_KEY_CHANGED:
        raise_alarm(
            s,
            fleet,
            host,
            AlarmKind.HOST_KEY_CHANGED,
            AlarmSeverity.CRITICAL,
            f"SSH host key changed; collection refused. {raw.reason}",
            data={"pinned": host.host_key, "offered": raw.host_key},
        )
        if HostState(host.state) in KEY_CHANGE_QUARANTINES:
            why = f"SSH host key changed: {raw.reason}"
            transition(
                s,
                fleet,
                host,
                Event.HARDWARE_FAULT,
                why,
                data={"faults": [Fault.HOST_KEY_CHANGED.value], "source": "collect"},
                health=Health.CRITICAL,
                fault=Fault.HOST_KEY_CHANGED,
                fault_reason=why,
            )
            res.actions.append(f"quarantined: {why}")
    elif (
        raw.host_key
        # Nothing pinned (first use), or the fingerprint an operator gave with
        # 'hosts rekey --fingerprint' matched: the store keeps the full key from now on.
        and (
            host.host_key is None
            or (is_fingerprint_pin(host.host_key) and pin_accepts(host.host_key, raw.host_key))
        )
        and raw.outcome in (Outcome.OK, Outcome.BAD_OUTPUT)
    ):
        expected = host.host_key
        host.host_key = raw.host_key
        record_event(
            s,
            fleet,
            EventKind.HOST_KEY_PINNED,
            f"pinned host key {fingerprint(raw.host_key)}"
            + (" (the fingerprint the operator gave)" if expected else ""),
            host=host,
            data={"fingerprint": fingerprint(raw.host_key), "expected": expected},
        )
        close_alarms(
            s,
            fleet,
            host,
            AlarmKind.HOST_KEY_CHANGED,
            f"new host key pinned: {fingerprint(raw.host_key)}",
        )
    if facts is not None:
        res.snapshot_id, prev = store_facts(s, host, run_id, facts, hashes)
        res.gpus = len(facts.gpus)
        res.problems = list(facts.problems)
        was_available = HostState(host.state) is HostState.AVAILABLE
        if prev is not None:
            changes = detect_changes(prev, facts)
            if changes:
                res.changes = [f"{c.kind}: {c.field} {c.before} -> {c.after}" for c in changes]
                on_changes(s, fleet, host, changes)
        if was_available:
            _act_on_critical(s, fleet, host, facts, policies, res)
        flag_duplicate(s, fleet, host, facts, res, dups)
        dups.stored(host.id, host.name, facts)
    if raw.outcome in reachability.REACHED:
        res.actions += reachability.on_reached(s, fleet, host, "collect")
    host.last_collected_at = now
    host.last_outcome = raw.outcome
    host.last_reason = raw.reason or None
    drop_claim(host, now)
    s.add(
        CollectionResult(
            run_id=run_id,
            host_id=host.id,
            outcome=raw.outcome,
            reason=raw.reason,
            duration_s=raw.duration_s,
            snapshot_id=res.snapshot_id,
        )
    )
    return res, True


#: States a changed host key quarantines (allocated hosts only raise the alarm: the job runs).
KEY_CHANGE_QUARANTINES = frozenset({HostState.ENROLLED, HostState.VALIDATING, HostState.AVAILABLE})


def _act_on_critical(
    s: Session, fleet: Fleet, host: Host, facts: HostFacts, policies: Policies, res: HostResult
) -> None:
    """Quarantine a host that was available when its fresh facts show a quarantining fault.

    The decision is the domain's (:func:`gpufleet.domain.profiles.evaluate`, as validation
    makes it); only hardware faults act here, everything else waits for ``validate``.
    """
    verdict = gpu_health.judge(s, host, facts, None, policies, fleet.now())
    outcome = verdict.outcome
    if verdict.unusable:  # the pool keeps partial hosts: re-validate with the GPU left out
        if gpu_health.unusable_changed(host, verdict) and host.state is HostState.AVAILABLE:
            reason = "; ".join(outcome.reasons[:1])
            transition(s, fleet, host, Event.CHANGE_DETECTED, f"{reason}: validating again")
            res.actions.append(f"sent to validation: {reason}")
        return
    if outcome.decision is not Decision.QUARANTINE:
        return
    reason = "; ".join(outcome.reasons)
    hw = sorted(
        {str(r.fault) for r in outcome.results.values() if r.fault and r.fault in HW_FAULTS}
    )
    transition(
        s,
        fleet,
        host,
        Event.HARDWARE_FAULT,
        f"new critical fault seen by collection: {reason}",
        data={"faults": hw, "source": "collect"},
        health=Health.CRITICAL,
        fault=Fault(hw[0]) if hw else None,
        fault_reason=reason,
    )
    res.actions.append(f"quarantined: {reason}")


def flag_duplicate(
    s: Session,
    fleet: Fleet,
    host: Host,
    facts: HostFacts,
    res: HostResult | None = None,
    dups: Duplicates | None = None,
) -> str | None:
    """Flag ``host`` when it is the later name of a machine already enrolled: an alarm (once
    per finding), the reason as its status, and out of ``available``. Returns the reason.
    ``dups``: what the check reads, loaded for a group of hosts (staged, see
    :class:`Duplicates`); None: read for this host alone."""
    if dups is None:
        dups = Duplicates.load(s, [(host.id, facts)])
    data: dict[str, object]
    if (dup := dups.gpu_duplicate_of(host.id, facts)) is not None:
        other, shared = dup
        reason = duplicate_reason(other, shared)
        data = {"duplicate_of": other, "gpu_uuids": shared}
    elif (sysdup := dups.system_duplicate_of(host.id, facts)) is not None:
        other, uuid = sysdup
        reason = duplicate_reason(other, [uuid], "system UUID")
        data = {"duplicate_of": other, "system_uuid": uuid}
    else:
        if host.id in dups.alarmed:  # else nothing to close: no query
            close_alarms(
                s, fleet, host, AlarmKind.DUPLICATE_HOST,
                "no GPU UUIDs nor system UUID shared with an enrolled host",
            )
            dups.alarm(host.id, False)
        return None
    if host.status_reason != reason:
        raise_alarm(
            s,
            fleet,
            host,
            AlarmKind.DUPLICATE_HOST,
            AlarmSeverity.WARNING,
            f"duplicate host: {reason}",
            data=data,
        )
        dups.alarm(host.id, True)
    if HostState(host.state) is HostState.AVAILABLE:
        transition(s, fleet, host, Event.VALIDATE, reason, status_reason=reason)
    elif HostState(host.state) in (HostState.ENROLLED, HostState.VALIDATING):
        host.status_reason = reason
    if res is not None:
        res.problems.append(reason)
    return reason
