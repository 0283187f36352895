"""Collect facts from many hosts: claim (short txn) -> run (no txn) -> apply (short txn).

Several collector processes may share one PostgreSQL: hosts are claimed with
``SELECT ... FOR UPDATE SKIP LOCKED`` and a lock token with a lease, so two workers never
collect the same host at once, and results are applied only while the token still matches.
"""

from __future__ import annotations

import asyncio
import queue
import socket
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import or_, select

from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import split_bundle
from gpufleet.collect.script import remote_script
from gpufleet.collect.transport import (
    Outcome,
    RawResult,
    Target,
    Transport,
    TransportKey,
    fingerprint,
    open_transport,
    run_many,
    transport_key,
)
from gpufleet.domain.changes import detect_changes
from gpufleet.domain.events import EventKind
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import Health
from gpufleet.domain.states import HostState
from gpufleet.errors import NotFound, ParseError
from gpufleet.service.fleet import Fleet, record_event
from gpufleet.service.lifecycle import on_changes
from gpufleet.service.select import select_hosts
from gpufleet.store.tables import (
    CollectionResult,
    CollectionRun,
    FactSnapshot,
    GpuRow,
    Host,
    NicRow,
)


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
    def ok(self) -> bool:
        return all(r.outcome is Outcome.OK for r in self.results)


@dataclass
class _Claimed:
    host_id: int
    target: Target
    transport: str
    key: TransportKey  # hosts with one key share a transport instance
    token: str


def _transport_for(vars_: dict[str, str], override: str | None) -> str:
    return override or vars_.get("gpufleet_transport", "ssh")


def claim(
    fleet: Fleet, selector: str | None, transport: str | None, lease: timedelta
) -> tuple[int, list[_Claimed], list[str]]:
    """Create the run and claim the selected hosts; return those another worker holds."""
    now = fleet.now()
    token = str(uuid.uuid4())
    claimed: list[_Claimed] = []
    busy: list[str] = []
    with fleet.db.session() as s:
        run = CollectionRun(
            started_at=now,
            transport=transport or "auto",
            selector=selector,
            actor=fleet.actor,
            counts={},
        )
        s.add(run)
        s.flush()
        wanted = [h.name for h in s.scalars(select_hosts(selector))]
        if selector and not wanted:
            raise NotFound(f"no hosts match selector '{selector}'")
        stmt = (
            select_hosts(selector)
            .where(Host.state != HostState.RETIRED.value)
            .where(or_(Host.claimed_until.is_(None), Host.claimed_until < now))
            .with_for_update(skip_locked=True)
        )
        for h in s.scalars(stmt):
            h.claim_token = token
            h.claimed_until = now + lease
            claimed.append(
                _Claimed(
                    host_id=h.id,
                    target=Target(h.name, h.address, h.port, h.user, h.key_file, h.host_key),
                    transport=_transport_for(h.vars, transport),
                    key=transport_key(_transport_for(h.vars, transport), h.vars),
                    token=token,
                )
            )
        got = {c.target.name for c in claimed}
        retired = {
            h.name
            for h in s.scalars(select_hosts(selector).where(Host.state == HostState.RETIRED.value))
        }
        busy = [n for n in wanted if n not in got and n not in retired]
        run_id = run.id
    return run_id, claimed, busy


def transport_for_host(key: TransportKey, fleet: Fleet) -> Transport:
    """The transport for hosts of one :func:`~gpufleet.collect.transport.transport_key`."""
    return open_transport(key, connect_timeout_s=fleet.settings.connect_timeout_s)


def _transports(claimed: list[_Claimed], fleet: Fleet) -> dict[TransportKey, Transport]:
    out: dict[TransportKey, Transport] = {}
    for c in claimed:
        if c.key not in out:
            out[c.key] = transport_for_host(c.key, fleet)
    return out


async def _run_all(
    groups: list[tuple[Transport, list[Target]]],
    script: str,
    forks: int,
    timeout_s: float,
    on_result: Callable[[RawResult], None] | None,
) -> list[RawResult]:
    results = await asyncio.gather(
        *(
            run_many(t, targets, script, forks=forks, timeout_s=timeout_s, on_result=on_result)
            for t, targets in groups
        )
    )
    return [r for rs in results for r in rs]


def collect(
    fleet: Fleet,
    selector: str | None = None,
    *,
    transport: str | None = None,
    forks: int | None = None,
    timeout_s: float | None = None,
    on_start: Callable[[int], None] | None = None,
    on_result: Callable[[RawResult], None] | None = None,
) -> RunReport:
    """Collect every selected host once and store what came back."""
    timeout_s = timeout_s or fleet.settings.collect_timeout_s
    forks = forks or fleet.settings.forks
    lease = timedelta(seconds=timeout_s + fleet.settings.connect_timeout_s + 60)
    run_id, claimed, busy = claim(fleet, selector, transport, lease)
    if on_start:
        on_start(len(claimed))
    by_key = _transports(claimed, fleet)
    groups: dict[TransportKey, list[Target]] = {}
    for c in claimed:
        groups.setdefault(c.key, []).append(c.target)
    script = remote_script(tool_timeout_s=max(5, int(timeout_s * 0.6)))
    ids = {c.target.name: c.host_id for c in claimed}
    tokens = {c.target.name: c.token for c in claimed}
    # Results are parsed and stored by a second thread while slower hosts are still answering,
    # so the controller's CPU work overlaps the network wait instead of following it.
    pending: queue.Queue[RawResult | None] = queue.Queue()
    results: list[HostResult] = []
    failure: list[BaseException] = []

    def applier() -> None:
        while (r := pending.get()) is not None:
            try:
                results.append(apply_result(fleet, run_id, ids[r.host], r, tokens[r.host]))
            except BaseException as exc:  # re-raised in the caller's thread below
                failure.append(exc)

    def arrived(r: RawResult) -> None:
        pending.put(r)
        if on_result:
            on_result(r)

    worker = threading.Thread(target=applier, name="gpufleet-apply", daemon=True)
    worker.start()
    try:
        asyncio.run(
            _run_all(
                [(by_key[k], ts) for k, ts in groups.items()], script, forks, timeout_s, arrived
            )
        )
    finally:
        pending.put(None)
        worker.join()
    if failure:
        raise failure[0]
    with fleet.db.session() as s:
        run = s.get(CollectionRun, run_id)
        assert run is not None
        run.finished_at = fleet.now()
        run.counts = dict(Counter(r.outcome.value for r in results))
    results.sort(key=lambda r: r.host)
    return RunReport(run_id, results, busy)


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
    fleet: Fleet, run_id: int, host_id: int, raw: RawResult, token: str | None = None
) -> HostResult:
    """Store one host's result in its own short transaction, guarded by the claim token.

    If the lease ran out and another worker claimed the host meanwhile, this (older) result is
    discarded rather than written over the newer worker's.
    """
    now = fleet.now()
    raw, facts = parse_result(raw, now)
    res = HostResult(raw.host, raw.outcome, raw.reason, raw.duration_s)
    with fleet.db.session() as s:
        host = s.get(Host, host_id, with_for_update=True)
        if host is None:
            return res
        if token is not None and host.claim_token != token:
            return HostResult(
                raw.host,
                Outcome.ERROR,
                "result discarded: the claim expired and another worker holds the host now",
                raw.duration_s,
            )
        if raw.outcome is Outcome.HOST_KEY_CHANGED:
            record_event(
                s,
                fleet,
                EventKind.ALARM,
                f"SSH host key changed; collection refused. {raw.reason}",
                host=host,
                data={"pinned": host.host_key, "offered": raw.host_key},
            )
        elif (
            raw.host_key
            and host.host_key is None
            and raw.outcome in (Outcome.OK, Outcome.BAD_OUTPUT)
        ):
            host.host_key = raw.host_key
            record_event(
                s,
                fleet,
                EventKind.HOST_KEY_PINNED,
                f"pinned host key {fingerprint(raw.host_key)}",
                host=host,
            )
        if facts is not None:
            prev = s.get(FactSnapshot, host.latest_snapshot_id) if host.latest_snapshot_id else None
            snap = _snapshot(host, run_id, facts)
            s.add(snap)
            s.flush()
            res.snapshot_id = snap.id
            res.gpus = len(facts.gpus)
            res.problems = list(facts.problems)
            host.latest_snapshot_id = snap.id
            if prev is not None:
                changes = detect_changes(HostFacts.model_validate(prev.facts), facts)
                if changes:
                    res.changes = [f"{c.kind}: {c.field} {c.before} -> {c.after}" for c in changes]
                    on_changes(s, fleet, host, changes)
        host.last_collected_at = now
        host.last_outcome = raw.outcome
        host.last_reason = raw.reason or None
        host.claim_token = None
        host.claimed_until = None
        host.updated_at = now
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
    return res


def _snapshot(host: Host, run_id: int, facts: HostFacts) -> FactSnapshot:
    gpus = facts.gpus
    models = sorted({g.product_name for g in gpus if g.product_name})
    snap = FactSnapshot(
        host_id=host.id,
        run_id=run_id,
        collected_at=facts.collected_at,
        facts=facts.model_dump(mode="json"),
        driver=facts.driver_version,
        cuda=facts.cuda_version,
        kernel=facts.kernel,
        os=facts.os.pretty_name if facts.os else None,
        gpu_count=len(gpus),
        gpu_model=", ".join(models) or None,
    )
    snap.gpus = [
        GpuRow(
            host_id=host.id,
            index=g.index,
            uuid=g.uuid,
            serial=g.serial,
            product_name=g.product_name,
            pci_bus_id=g.pci_bus_id,
            memory_total_mib=g.memory_total_mib,
            vbios=g.vbios_version,
        )
        for g in gpus
    ]
    snap.nics = [
        NicRow(
            host_id=host.id,
            ca=p.ca,
            port=p.port,
            state=p.state,
            physical_state=p.physical_state,
            rate_gbps=p.rate_gbps,
            link_layer=p.link_layer,
        )
        for p in facts.ib_ports
    ]
    return snap


def local_target() -> Target:
    """This machine, for ``gpufleet collect --local``."""
    return Target(socket.gethostname(), "localhost")


def ensure_local_host(fleet: Fleet) -> str:
    """Enroll this machine (once) so ``collect --local`` stores its facts; return its name."""
    t = local_target()
    now = fleet.now()
    with fleet.db.session() as s:
        host = s.scalar(select(Host).where(Host.name == t.name))
        if host is None:
            host = Host(
                name=t.name,
                address=t.address,
                port=22,
                groups=["local"],
                vars={"gpufleet_transport": "local"},
                expected={},
                state=HostState.ENROLLED,
                state_entered_at=now,
                health=Health.OK,
                profiles=[],
                source="local",
                created_at=now,
                updated_at=now,
            )
            s.add(host)
            s.flush()
            record_event(s, fleet, EventKind.ENROLLED, "enrolled by collect --local", host=host)
    return t.name
