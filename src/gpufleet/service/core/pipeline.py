"""The claim -> run -> apply engine shared by ``collect`` and ``evidence run``.

1. *claim* (one short transaction): the selected hosts, ``FOR UPDATE SKIP LOCKED``, those
   whose claim (``claimed_until``) is still running skipped as held elsewhere; each gets the
   run's ``claim_token`` and a ``claimed_until`` sized to the batch (:func:`claim_lease`).
   With :attr:`Pipeline.more` (``collect``) the claim is taken in batches as slots free up,
   so several collector processes split a collection.
2. *run* (no transaction open): one command per host over its transport, at most ``forks``
   at once, each within ``timeout_s``; the claims are renewed while it runs.
3. *apply* (the caller's short transaction per host, while slower hosts still answer):
   guarded by the claim token, so a result whose claim ran out and was taken
   by another worker is discarded; the apply step releases the host's claim.

Ctrl-C, SIGTERM and a database error release every claim the run still holds before the error
goes on (SIGTERM is ``SystemExit`` where the process's entry point made it so:
:func:`gpufleet.cli.process.sigterm_exits`); a crashed worker's claims run out.

A run is a coroutine (:meth:`Pipeline.run_async`; :meth:`Pipeline.run` is its synchronous
face): the hosts are talked to on its event loop, and every database call of steps 1-3
(claiming more, renewing, storing, releasing) is awaited in the engine's bounded executor
(:mod:`gpufleet.service.core.engine`), never run on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from gpufleet.collect.ssh_pool import SshConnections
from gpufleet.collect.transport import (
    Outcome,
    RawResult,
    Target,
    Transport,
    TransportKey,
    open_transport,
    run_many,
    transport_key,
)
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError, GpufleetError, NotFound
from gpufleet.logs import hide, ids
from gpufleet.secrets import ssh_password
from gpufleet.service.core import background_errors as background
from gpufleet.service.core.claim_owner import local_prefix, owner_gone, this_owner
from gpufleet.service.core.engine import engine, run_all
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.select import select_hosts
from gpufleet.store.tables import Host

log = logging.getLogger(__name__)

R = TypeVar("R")

#: Slack on top of the estimated work of a claim (process start, parsing, a slow database).
CLAIM_MARGIN_S = 60.0


def claim_lease(hosts: int, forks: int, timeout_s: float, connect_timeout_s: float) -> timedelta:
    """How long a claim on ``hosts`` hosts lasts: the waves of ``forks`` hosts it takes, each
    up to ``timeout_s`` (connecting included, at worst ``connect_timeout_s`` more), plus
    :data:`CLAIM_MARGIN_S`. A running pipeline renews it; a crashed one's claims run out."""
    waves = max(1, math.ceil(hosts / max(1, forks)))
    return timedelta(seconds=waves * (timeout_s + connect_timeout_s) + CLAIM_MARGIN_S)


#: The longest per-host timeout a run takes (7 days): beyond it a claim's lease is not a date.
MAX_TIMEOUT_S = 7 * 24 * 3600
#: The most hosts one run works on at once (each holds a connection and a task).
MAX_FORKS = 10_000


def check_timeout(value: float, what: str = "timeout") -> float:
    """A positive, finite number of seconds up to :data:`MAX_TIMEOUT_S`; :class:`ConfigError`
    otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{what} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{what} must be a positive, finite number of seconds, not {value!r}")
    if value > MAX_TIMEOUT_S:
        raise ConfigError(f"{what} must be at most {MAX_TIMEOUT_S} seconds (7 days), not {value!r}")
    return float(value)


def check_forks(value: int, what: str = "forks") -> int:
    """A whole number of hosts at once from 1 to :data:`MAX_FORKS`; :class:`ConfigError`
    otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{what} must be a whole number of at least 1, not {value!r}")
    if value > MAX_FORKS:
        raise ConfigError(f"{what} must be at most {MAX_FORKS}, not {value!r}")
    return value


@dataclass
class Claimed:
    """One host a run holds: how to reach it and the token that guards its results."""

    host_id: int
    target: Target
    transport: str
    key: TransportKey  # hosts with one key share a transport instance
    token: str
    expected: dict[str, Any] = field(default_factory=dict)


@dataclass
class Claim:
    """What :func:`claim_hosts` got: the run (None when the caller keeps no run record), the
    claimed hosts, the ones held elsewhere, and the ones refused before claiming (a transport
    that cannot be used) as (host, reason)."""

    run_id: int | None
    token: str
    hosts: list[Claimed]
    busy: list[str]
    refused: list[tuple[str, str]] = field(default_factory=list)
    #: The last host name the claim read, in the database's order (its collation): where the
    #: next batch of an incremental claim starts.
    last: str | None = None


def claim_hosts(
    fleet: Fleet,
    selector: str | None,
    transport: str | None,
    lease: Callable[[int], timedelta],
    *,
    skip_states: Iterable[HostState] = (HostState.RETIRED,),
    start_run: Callable[[Session], int] | None = None,
    refuse: Callable[[Session, int | None, Host, str], None] | None = None,
    token: str | None = None,
    take_over: str | None = None,
    limit: int | None = None,
    after: str | None = None,
    follow_up: bool = False,
) -> Claim:
    """Claim the selected hosts (not in ``skip_states``) for ``lease(number claimed)``.

    ``start_run`` creates the caller's run record in the same transaction. A host whose
    transport cannot be used (unknown ``gpufleet_transport``) is not claimed: ``refuse``
    records it, and the others go ahead. An explicit selector that matches no host is
    :class:`NotFound`. ``token`` (default: a new UUID) is the claim token; claims whose token
    starts with ``take_over`` are taken even while running: a queue job's retry takes back
    what its killed earlier attempt held (``gpufleet.domain.runs.claim_prefix``).

    ``limit``: claim at most that many hosts, in name order (only names after ``after``), the
    rest left free for other workers; ``busy`` then also lists the selected hosts not claimed
    yet, which the pipeline's later batches (``follow_up``: no selection check, ``busy``
    empty) take off (:attr:`Pipeline.more`).
    """
    now = fleet.now()
    token = token or str(uuid.uuid4())
    free = or_(Host.claimed_until.is_(None), Host.claimed_until < now)
    if take_over:
        free = or_(free, Host.claim_token.startswith(take_over, autoescape=True))
    skipped = [st.value for st in skip_states]
    claimed: list[Claimed] = []
    refused: list[tuple[str, str]] = []
    owner = this_owner()
    with fleet.db.session() as s:
        run_id = start_run(s) if start_run else None
        orphans = orphaned_tokens(s, now)
        if orphans:
            free = or_(free, Host.claim_token.in_(orphans))
        wanted = [] if follow_up else [h.name for h in s.scalars(select_hosts(selector))]
        if selector and not wanted and not follow_up:
            raise NotFound(f"no hosts match selector '{selector}'")
        stmt = (
            select_hosts(selector)
            .where(Host.state.not_in(skipped))
            .where(free)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        if after is not None:
            stmt = stmt.where(Host.name > after)
        rows: list[Host] = []
        last: str | None = None
        for h in s.scalars(stmt):
            last = h.name
            kind = transport or h.vars.get("gpufleet_transport", "ssh")
            password: str | None = None
            reason: str | None = None
            try:
                key = transport_key(kind, h.vars)
            except ConfigError as exc:
                reason = f"transport {kind!r}: {exc}"
            else:
                if kind == "ssh":  # only ssh logs in with a password
                    try:
                        password = ssh_password(h.vars, fleet.settings.secret_key_bytes)
                        hide(password)  # never in a log line (gpufleet.logs)
                    except ConfigError as exc:
                        reason = f"SSH password: {exc}"
            if reason is not None:
                if refuse:
                    refuse(s, run_id, h, reason)
                refused.append((h.name, reason))
                continue
            rows.append(h)
            claimed.append(
                Claimed(
                    host_id=h.id,
                    target=Target(
                        h.name, h.address, h.port, h.user, h.key_file, h.host_key, password
                    ),
                    transport=kind,
                    key=key,
                    token=token,
                    expected=dict(h.expected),
                )
            )
        until = now + lease(len(rows))
        for h in rows:
            if h.claim_token in orphans:
                log.info("%s: took over the claim of a process gone from this machine (%s)",
                            h.name, h.claim_owner, extra=ids(host=h.name, run=run_id))
            h.claim_token = token
            h.claimed_until = until
            h.claim_owner = owner
        got = {c.target.name for c in claimed} | {name for name, _ in refused}
        left_out = (
            set()
            if follow_up
            else {h.name for h in s.scalars(select_hosts(selector).where(Host.state.in_(skipped)))}
        )
        busy = [n for n in wanted if n not in got and n not in left_out]
    return Claim(run_id, token, claimed, busy, refused, last)


def orphaned_tokens(s: Session, now: datetime) -> set[str]:
    """The tokens of running claims whose owner was a process of this machine's current
    boot that is gone (killed, crashed): taken over at once (``service/core/claim_owner.py``)."""
    prefix = local_prefix()
    if prefix is None:
        return set()
    rows = s.execute(
        select(Host.claim_token, Host.claim_owner)
        .where(Host.claim_token.is_not(None), Host.claimed_until >= now)
        .where(Host.claim_owner.startswith(prefix, autoescape=True))
        .distinct()
    ).all()
    return {str(tok) for tok, who in rows if tok is not None and owner_gone(who)}


def release_claims(fleet: Fleet, token: str) -> int:
    """Drop every claim still held under ``token`` (an interrupted or failed run)."""
    with fleet.db.session() as s:
        res = s.execute(
            update(Host)
            .where(Host.claim_token == token)
            .values(claim_token=None, claimed_until=None, claim_owner=None)
            .execution_options(synchronize_session=False)
        )
        return int(getattr(res, "rowcount", 0) or 0)


def renew_claims(fleet: Fleet, token: str, lease: timedelta) -> int:
    """Extend the claims still held under ``token`` to ``now + lease`` (a running pipeline)."""
    with fleet.db.session() as s:
        res = s.execute(
            update(Host)
            .where(Host.claim_token == token)
            .values(claimed_until=fleet.now() + lease)
            .execution_options(synchronize_session=False)
        )
        return int(getattr(res, "rowcount", 0) or 0)


def holds_claim(host: Host, token: str | None) -> bool:
    """True when ``host`` (read under a row lock) is still claimed under ``token`` (None: the
    caller holds no claim and applies unguarded)."""
    return token is None or host.claim_token == token


def drop_claim(host: Host, now: datetime) -> None:
    """Release ``host``'s claim in the caller's apply transaction."""
    host.claim_token = None
    host.claimed_until = None
    host.claim_owner = None
    host.updated_at = now


async def keep_renewing(
    fleet: Fleet,
    token: str,
    lease: Callable[[], timedelta],
    interval_s: float,
    run: int | None = None,
) -> None:
    """Renew a run's claims every ``interval_s`` to the work still left (see claim_lease),
    until cancelled; the database call goes to the engine's executor. A renewal that fails
    only shortens the claims: logged and counted (``run``: the run's id, for the log)."""
    eng = engine()
    while True:
        await asyncio.sleep(interval_s)
        try:
            await eng.db(renew_claims, fleet, token, lease())
        except Exception as exc:
            background.report(log, background.CLAIM_RENEWAL, "cannot renew claims", exc, run=run)


def transport_for_host(key: TransportKey, fleet: Fleet) -> Transport:
    """The transport for hosts of one :func:`~gpufleet.collect.transport.transport_key`; an
    ``ssh`` one keeps its connections in the engine's (``GPUFLEET_SSH_IDLE_S``), for the next
    run of the process."""
    idle_s = fleet.settings.ssh_idle_s
    kept = engine().keep("ssh", SshConnections) if key[0] == "ssh" and idle_s > 0 else None
    return open_transport(
        key,
        connect_timeout_s=fleet.settings.connect_timeout_s,
        ssh_connections=kept,
        ssh_idle_s=idle_s,
    )


def _transports(
    claimed: list[Claimed],
    fleet: Fleet,
    opener: Callable[[TransportKey], Transport] | None = None,
) -> tuple[dict[TransportKey, Transport], dict[TransportKey, str]]:
    """One transport per key; a key whose transport cannot be built fails only its hosts.
    ``opener`` (a caller that keeps transports between runs) replaces the default."""
    out: dict[TransportKey, Transport] = {}
    broken: dict[TransportKey, str] = {}
    for c in claimed:
        if c.key not in out and c.key not in broken:
            try:
                out[c.key] = (
                    opener(c.key) if opener is not None else transport_for_host(c.key, fleet)
                )
            except GpufleetError as exc:
                broken[c.key] = f"transport {c.transport!r} unusable: {exc}"
    return out, broken


#: Results a run holds at most, per fork, between arriving and being stored: the applier
#: is the bottleneck on a fast network, so without a bound every host's raw output (~150 kB
#: for an 8-GPU host) would wait in memory at once.
BACKLOG_PER_FORK = 2
#: Results stored in one transaction at most (:attr:`Pipeline.apply_many`): those waiting.
APPLY_GROUP = 64


@dataclass
class Pipeline(Generic[R]):
    """One run of the engine over a :class:`Claim`: ``command(host)`` is what runs on each
    claimed host; ``apply(host, raw)`` stores a result in its own short transaction (guarded
    by ``host.token``, releasing the claim) and returns what the caller reports."""

    fleet: Fleet
    claim: Claim
    command: Callable[[Claimed], str]
    apply: Callable[[Claimed, RawResult], R]
    forks: int
    timeout_s: float
    on_start: Callable[[int], None] | None = None
    on_result: Callable[[RawResult], None] | None = None
    #: Transports kept by the caller between runs (``inspect --every``: SSH connections stay
    #: open between sweeps); None: a fresh transport per key for this run.
    open_transport: Callable[[TransportKey], Transport] | None = None
    #: Incremental claiming (several collector processes split a collection): ``more(n,
    #: after)`` claims up to ``n`` more hosts named after ``after`` under the same token
    #: (``claim_hosts(limit=n, after=after, follow_up=True)``: a host is never claimed twice
    #: by one run, even once its claim is released), called each time every host claimed so
    #: far has started; None: the claim is all there is.
    more: Callable[[int, str], Claim] | None = None
    #: Hosts per batch of :attr:`more` (default: ``forks``).
    batch: int | None = None
    #: Group commit (issue 30): stores the results waiting together (:data:`APPLY_GROUP` at
    #: most) in one transaction; per host, what ``apply`` returns or raises. None: ``apply``.
    apply_many: Callable[[list[tuple[Claimed, RawResult]]], list[R | Exception]] | None = None

    def lease(self, hosts: int) -> timedelta:
        """The claim a batch of ``hosts`` needs (renewed to the hosts still left)."""
        return claim_lease(hosts, self.forks, self.timeout_s, self.fleet.settings.connect_timeout_s)

    def run(self) -> list[R]:
        """Run every claimed host, apply results as they arrive, release what is left (the
        synchronous face of :meth:`run_async`)."""
        return engine().run(self.run_async())

    async def run_async(self) -> list[R]:
        """:meth:`run` as a coroutine: the hosts on this loop, the database in the engine's
        executor (claiming more, renewing, storing, releasing), never on the loop."""
        eng = engine()
        claimed = self.claim.hosts
        token = self.claim.token
        results: list[R] = []
        done: set[str] = set()
        failure: list[BaseException] = []
        connect_s = self.fleet.settings.connect_timeout_s
        # (result, whether it holds a backlog slot); None ends the applier
        pending: asyncio.Queue[tuple[RawResult, bool] | None] = asyncio.Queue()
        room = asyncio.Semaphore(max(1, self.forks) * BACKLOG_PER_FORK)
        by_name = {c.target.name: c for c in claimed}
        renewer = asyncio.create_task(keep_renewing(
            self.fleet,
            token,
            lambda: self.lease(len(claimed) - len(done)),
            interval_s=max(1.0, min(60.0, (self.timeout_s + connect_s) / 3)),
            run=self.claim.run_id,
        ))
        applier: asyncio.Task[None] | None = None
        try:
            if self.on_start:  # with `more`: the hosts not claimed yet may come too
                self.on_start(len(claimed) + (len(self.claim.busy) if self.more else 0))
            by_key, broken = _transports(claimed, self.fleet, self.open_transport)
            # Results are stored (in the executor) while slower hosts are still answering,
            # so the controller's CPU work overlaps the network wait.
            applier = asyncio.create_task(
                self._applier(pending, room, by_name, results, done, failure)
            )

            def arrived(r: RawResult, slot: bool = False) -> None:
                pending.put_nowait((r, slot))
                if self.on_result:
                    self.on_result(r)

            for c in claimed:
                if c.key in broken:
                    arrived(RawResult(c.target.name, Outcome.ERROR, broken[c.key]))
            first = [
                (by_key[c.key], c.target, self.command(c)) for c in claimed if c.key in by_key
            ]
            jobs = self._batches(first, by_key, broken, by_name, arrived)

            async def one(job: tuple[Transport, Target, str]) -> None:
                tr, target, command = job
                res = (await run_many(tr, [target], command, forks=1, timeout_s=self.timeout_s))
                arrived(res[0], True)

            workers = self.forks if self.more is not None else min(self.forks, len(first))
            await run_all(jobs, workers, one, room)
        finally:
            if applier is not None:
                pending.put_nowait(None)
                with suppress(asyncio.CancelledError):  # cancelled alone: no more stored
                    await applier
            renewer.cancel()
            with suppress(asyncio.CancelledError):
                await renewer
            if len(done) < len(claimed):
                # Interrupted (Ctrl-C, SIGTERM), or a result could not be stored: nothing of
                # this run may keep a host claimed. If the database is gone, the lease runs out.
                try:
                    await eng.db(release_claims, self.fleet, token)
                except Exception as exc:
                    background.report(
                        log,
                        background.CLAIM_RENEWAL,
                        "cannot release claims (they run out)",
                        exc,
                        run=self.claim.run_id,
                    )
        if failure:
            raise failure[0]
        return results

    async def _applier(
        self,
        pending: asyncio.Queue[tuple[RawResult, bool] | None],
        room: asyncio.Semaphore,
        by_name: dict[str, Claimed],
        results: list[R],
        done: set[str],
        failure: list[BaseException],
    ) -> None:
        """Store the results as they arrive (with :attr:`apply_many`, those waiting together),
        one group at a time in the engine's executor, freeing a backlog slot per result."""
        eng = engine()
        while (item := await pending.get()) is not None:
            group = [item]
            last = False
            while self.apply_many is not None and len(group) < APPLY_GROUP:
                try:  # the results already waiting: stored together
                    more = pending.get_nowait()
                except asyncio.QueueEmpty:
                    break
                if more is None:
                    last = True
                    break
                group.append(more)
            try:
                await eng.db(self._apply, group, by_name, results, done, failure)
            finally:
                slots = sum(1 for _r, slot in group if slot)
                del item, group  # the raw outputs go now, not at the next result
                for _ in range(slots):
                    room.release()
            if last:
                return

    def _apply(
        self,
        group: list[tuple[RawResult, bool]],
        by_name: dict[str, Claimed],
        results: list[R],
        done: set[str],
        failure: list[BaseException],
    ) -> None:
        """Store ``group``; what cannot be stored goes to ``failure`` (raised by the caller)."""
        outs: list[R | BaseException] = []
        try:
            if self.apply_many is not None:
                outs += self.apply_many([(by_name[r.host], r) for r, _slot in group])
            for r, _slot in group if self.apply_many is None else ():
                try:
                    outs.append(self.apply(by_name[r.host], r))
                except BaseException as exc:
                    outs.append(exc)
        except BaseException as exc:  # the group's transaction: none of it stored
            failure.append(exc)
            return
        for (r, _slot), out in zip(group, outs, strict=True):
            if isinstance(out, BaseException):
                failure.append(out)
            else:
                results.append(out)
                done.add(r.host)

    async def _batches(
        self,
        first: list[tuple[Transport, Target, str]],
        by_key: dict[TransportKey, Transport],
        broken: dict[TransportKey, str],
        by_name: dict[str, Claimed],
        arrived: Callable[[RawResult], None],
    ) -> AsyncIterator[tuple[Transport, Target, str]]:
        """The jobs of the first claim, then (with :attr:`more`) of each further batch
        claimed, in the engine's executor, once every job so far has started (the workers
        take from this one iterator), until a batch gets nothing: the hosts left are held by
        another worker (or there are none)."""
        for job in first:
            yield job
        after = self.claim.last if self.more is not None else None
        while after is not None:  # None: the last batch got nothing, the rest is held
            assert self.more is not None
            got = await engine().db(self.more, max(1, self.batch or self.forks), after)
            names = {c.target.name for c in got.hosts} | {n for n, _ in got.refused}
            after = got.last
            self.claim.busy = [n for n in self.claim.busy if n not in names]
            self.claim.refused += got.refused
            self.claim.hosts.extend(got.hosts)
            by_name.update((c.target.name, c) for c in got.hosts)
            fresh = [c for c in got.hosts if c.key not in by_key and c.key not in broken]
            more_keys, more_broken = _transports(fresh, self.fleet, self.open_transport)
            by_key.update(more_keys)
            broken.update(more_broken)
            for c in got.hosts:
                if c.key in broken:
                    arrived(RawResult(c.target.name, Outcome.ERROR, broken[c.key]))
                else:
                    yield by_key[c.key], c.target, self.command(c)
