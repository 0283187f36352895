"""The inspection sweep (``gpufleet inspect``): probe, store samples, judge, act.

One sweep:

1. *probe* through the shared claim -> run -> apply engine (:mod:`gpufleet.service.core.pipeline`):
   one command per host (:func:`gpufleet.collect.inspect.probe_script`), ``forks`` at once,
   ``timeout_s`` each, so a hanging host costs its own timeout and nobody else's; the apply
   step only parses (no transaction per host);
2. *store* every answer whose claim still holds in one transaction, with bulk inserts
   (``COPY`` on PostgreSQL, ``executemany`` on SQLite), releasing the claims;
3. *judge and act*: per host, the policy (:mod:`gpufleet.domain.rules`) over the host's samples
   in the policy's window, with the fleet medians of this sweep for the straggler rules; then
   in one short transaction per host (row-locked): a finding opens one ``health`` alarm per
   rule and GPU/port (deduplicated); a critical one quarantines the host at once
   (``hardware_fault`` through :func:`gpufleet.service.core.lifecycle.transition`) unless it is
   leased (the lease runs on, its owner is told through the lease hooks) or the blast-radius
   guard has tripped; a finding that has cleared marks its alarm, which closes only once the
   host has also passed validation after that (the validation closes it:
   ``alarms.close_cleared``; warnings close when cleared); a host this
   sweep quarantined whose findings have all cleared goes back to ``validating`` (never
   straight to ``available``), guard or no guard.

The blast-radius guard (:mod:`gpufleet.service.health.inspect_guard`): past both its share and its
minimum count, automatic quarantine stops, one fleet alarm is raised, and the held-back hosts
keep their critical alarms (data ``held``): out of placement, not quarantined.

No data is a fault (issue 24 item 1): a probe that answered but could not observe (the GPU
tool missing, the driver not loaded, a GPU handle error, a timeout, cut Xid lines ...) gives
the host the outcome ``probe_failed`` (never ``ok``) and failures that the ``observe`` rules
judge; fewer GPUs than the host's expected count is the ``gpu-count-low`` rule. Faults belong
to a boot (item 4): alarms and events carry the sample's ``boot_id``, and an Xid from an
earlier boot never opens an alarm (:func:`gpufleet.domain.rules.same_boot`). A host whose
transport failed (unreachable, timeout, auth) goes to :func:`transport_unobserved`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from gpufleet.collect.inspect import ProbeResult, parse_probe, probe_script
from gpufleet.collect.transport import Outcome, RawResult, Transport, TransportKey
from gpufleet.domain.device_health import Catalogues, device_findings, shipped_catalogue
from gpufleet.domain.rules import (
    Finding,
    HostSample,
    RulePolicy,
    Severity,
    evaluate_host,
    fleet_medians,
)
from gpufleet.errors import GpufleetError
from gpufleet.service.core.engine import engine
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.pipeline import (
    Claimed,
    Pipeline,
    check_forks,
    check_timeout,
    claim_hosts,
    claim_lease,
    release_claims,
)
from gpufleet.service.core.policies import Policies
from gpufleet.service.health.inspect_act import ACTOR, QUARANTINES, RULE_FAULTS, HostInspection, act
from gpufleet.service.health.inspect_guard import (
    GUARD_KIND,
    Budget,
    close_fleet_alarm,
    fleet_alarms,
    guard_budget,
    trip_guard,
)
from gpufleet.service.health.inspect_observe import (
    PROBE_FAILED,
    expected_gpu_counts,
    transport_unobserved,
)
from gpufleet.service.health.inspect_store import (
    histories,
    roll_up_and_prune,
    store_samples,
)
from gpufleet.service.health.inspect_vendors import host_vendors
from gpufleet.service.health.rack_incidents import fold_findings
from gpufleet.service.hosts import reachability
from gpufleet.store.tables import (
    FactSnapshot,
    Host,
    HostSampleRow,
)

__all__ = [
    "ACTOR",
    "GUARD_KIND",
    "QUARANTINES",
    "RULE_FAULTS",
    "HostInspection",
    "close_fleet_alarm",
    "fleet_alarms",
    "inspect",
    "inspect_loop",
]


def load_policy(fleet: Fleet) -> RulePolicy:
    """The shipped health rules with the site overlay (``GPUFLEET_HEALTH_RULES``)."""
    policy = RulePolicy.load_default()
    f = fleet.settings.health_rules_file
    return policy.merged(f.read_text(), source=str(f)) if f else policy


def load_catalogues(fleet: Fleet) -> Catalogues:
    """The vendors' fault catalogues with the site overlay (``GPUFLEET_FAULT_CATALOGUE``)."""
    return Policies(fleet).catalogues


# ------------------------------------------------------------------------------ results


@dataclass
class SweepReport:
    """One sweep: per host, hosts held by another worker, the guard."""

    at: datetime
    policy_version: str
    hosts: list[HostInspection]
    busy: list[str] = field(default_factory=list)
    guard_tripped: bool = False
    guard_message: str = ""
    #: issue 27: the rack incidents this sweep opened or extended.
    incidents: list[dict[str, Any]] = field(default_factory=list)

    @property
    def findings(self) -> int:
        return sum(len(h.findings) for h in self.hosts)


# ------------------------------------------------------------------------------ the sweep


class TransportCache:
    """Transports kept between sweeps of one ``inspect --every`` loop: an ``ssh`` transport
    that keeps each host's connection open (:class:`gpufleet.collect.inspect_ssh.KeptOpenSsh`);
    other kinds are opened fresh each sweep (a lab re-reads its hosts)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._ssh: Transport | None = None

    def __call__(self, key: TransportKey) -> Transport:
        from gpufleet.service.core.pipeline import transport_for_host

        if key[0] == "ssh":
            if self._ssh is None:
                from gpufleet.collect.inspect_ssh import KeptOpenSsh

                self._ssh = KeptOpenSsh(connect_timeout_s=self.fleet.settings.connect_timeout_s)
            return self._ssh
        return transport_for_host(key, self.fleet)

    def close(self) -> None:
        from gpufleet.collect.inspect_ssh import KeptOpenSsh

        if isinstance(self._ssh, KeptOpenSsh):
            engine().run(self._ssh.close())  # on the loop its connections live on
        self._ssh = None


def inspect(
    fleet: Fleet,
    selector: str | None = None,
    *,
    transport: str | None = None,
    forks: int = 50,
    timeout_s: float = 30.0,
    transports: Callable[[TransportKey], Transport] | None = None,
    at: datetime | None = None,
    token: str | None = None,
    take_over: str | None = None,
) -> SweepReport:
    """Run one sweep over the selected hosts (every host but retired ones without one).
    ``at``: the samples' time (default now); a retried run chunk passes its first attempt's,
    so a host that attempt stored is not stored twice (:mod:`gpufleet.service.background.jobs`);
    ``token`` / ``take_over``: its claim token and its earlier attempts' prefix
    (:func:`gpufleet.service.core.pipeline.claim_hosts`)."""
    forks = check_forks(forks)
    timeout_s = check_timeout(timeout_s)
    policy = load_policy(fleet)
    catalogues = load_catalogues(fleet)  # a bad overlay refuses the sweep before any probe
    xids = Policies(fleet).xid
    at = at or fleet.now()
    connect_s = fleet.settings.connect_timeout_s
    claim = claim_hosts(
        fleet,
        selector,
        transport,
        lambda n: claim_lease(n, forks, timeout_s, connect_s),
        token=token,
        take_over=take_over,
    )
    with fleet.db.session() as s:
        cursors = _cursors(s, [c.host_id for c in claim.hosts])
        vendors = host_vendors(s, [c.host_id for c in claim.hosts])
    paths = fleet.settings.path_list(fleet.settings.inspect_disk_paths)
    script = probe_script(paths)
    scripts: dict[tuple[str, ...], str] = {}  # hosts of other vendors: their plugins' parts

    def command(c: Claimed) -> str:
        hv = vendors.get(c.host_id)
        if hv is None:
            return script
        if hv not in scripts:
            scripts[hv] = probe_script(paths, vendors=hv)
        return scripts[hv]

    parsed: dict[int, ProbeResult] = {}
    by_id: dict[int, HostInspection] = {}
    unobserved: dict[int, HostInspection] = {}

    def apply(c: Claimed, raw: RawResult) -> HostInspection:
        out = HostInspection(c.target.name, raw.outcome.value, raw.reason)
        if raw.outcome is Outcome.OK and raw.output is not None:
            try:
                res = parse_probe(
                    raw.output,
                    at,
                    kmsg_since=cursors.get(c.host_id),
                    source=c.target.name,
                )
            except GpufleetError as exc:
                out.outcome, out.reason = Outcome.BAD_OUTPUT.value, str(exc)
            else:
                parsed[c.host_id] = res
                out.problems = list(res.problems)
                out.faults = list(res.faults)
                if not res.observed:  # no data is a fault: never "ok" beside a failure
                    out.outcome = PROBE_FAILED
                    out.reason = "; ".join(f.detail for f in res.sample.failures)[:500]
        else:
            unobserved[c.host_id] = out
        by_id[c.host_id] = out
        return out

    results = Pipeline(
        fleet,
        claim,
        command=command,
        apply=apply,
        forks=forks,
        timeout_s=timeout_s,
        open_transport=transports,
    ).run()
    for hid, acted in reachability.after_sweep(  # issue 24: unreachable is acted on
        fleet,
        {h: (Outcome(o.outcome) if h in unobserved else Outcome.OK, o.reason)
         for h, o in by_id.items()},
        ACTOR,
    ).items():
        by_id[hid].actions += acted
    with fleet.db.session() as s:
        linked = nvlink_hosts(s, list(parsed))
    for hid, res in parsed.items():  # topology from the collected facts, not the probe
        parsed[hid] = replace(res, sample=replace(res.sample, nvlink=hid in linked))
    try:
        kept = store_samples(fleet, at, parsed, token=claim.token)
    finally:
        release_claims(fleet, claim.token)
    for hid in set(parsed) - kept:
        by_id[hid].actions.append(
            "result discarded: the claim ran out (or a sample at this instant exists)"
        )
    report = SweepReport(at, policy.version, sorted(results, key=lambda h: h.host), claim.busy)
    judge(fleet, policy, xids, at, {hid: by_id[hid] for hid in kept}, report, catalogues)
    transport_unobserved(fleet, policy, at, unobserved)
    return report


def nvlink_hosts(s: Session, host_ids: Sequence[int]) -> set[int]:
    """The hosts whose latest facts show at least one NVLink on a GPU (``nvlink -s``)."""
    if not host_ids:
        return set()
    rows = s.execute(
        select(Host.id, FactSnapshot.facts["nvlink"])
        .join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
        .where(Host.id.in_(host_ids))
    )
    out: set[int] = set()
    for hid, nv in rows:
        if isinstance(nv, dict) and any(g.get("links") for g in nv.get("gpus") or []):
            out.add(hid)
    return out


def _cursors(s: Session, host_ids: Sequence[int]) -> dict[int, str]:
    """Each host's kernel-log cursor from its latest sample."""
    if not host_ids:
        return {}
    latest = (
        select(HostSampleRow.host_id, func.max(HostSampleRow.at).label("at"))
        .where(HostSampleRow.host_id.in_(host_ids))
        .group_by(HostSampleRow.host_id)
        .subquery()
    )
    rows = s.execute(
        select(HostSampleRow.host_id, HostSampleRow.kmsg_cursor).join(
            latest,
            (latest.c.host_id == HostSampleRow.host_id) & (latest.c.at == HostSampleRow.at),
        )
    )
    return {hid: cur for hid, cur in rows if cur}


# ------------------------------------------------------------------------------ judging


def judge(
    fleet: Fleet,
    policy: RulePolicy,
    xids: Any,
    at: datetime,
    hosts: dict[int, HostInspection],
    report: SweepReport,
    catalogues: Catalogues = shipped_catalogue,
) -> None:
    """Evaluate the policy on the sampled hosts and act (see the module doc)."""
    if not hosts:
        return
    since = at - max(policy.longest_window, timedelta(hours=1))
    with fleet.db.session() as s:
        hist = histories(s, list(hosts), since)
        expected = expected_gpu_counts(s, list(hosts))
    hist = {  # the count the host should have, from the store (never from the probe)
        hid: [replace(x, expected_gpus=expected.get(hid)) for x in h] for hid, h in hist.items()
    }
    medians = fleet_medians((h[-1] for h in hist.values() if h and h[-1].at == at), policy.rules)
    findings = {
        hid: evaluate_host(policy, h, medians, xids) if h and h[-1].at == at else []
        for hid, h in hist.items()
    }
    for hid, fs in findings.items():
        if hist[hid] and hist[hid][-1].at == at:  # the vendor plugins' faults of this sweep
            fs += device_findings(policy, hosts[hid].faults, catalogues)
        hosts[hid].findings = fs
    # issue 27: rack-scoped findings of several hosts of one NVLink domain: one rack incident
    to_act, incidents = fold_findings(fleet, at, findings)
    report.incidents += [asdict(i) for i in incidents]
    by_name = {o.host: o for o in hosts.values()}
    for inc in incidents:
        for name in inc.hosts:
            if name in by_name:
                by_name[name].actions.append(f"restricted: rack incident (alarm {inc.alarm_id})")
    budget = Budget(guard_budget(fleet, at))
    held: list[str] = []
    quarantined: list[int] = []
    for hid in sorted(findings, key=lambda hid: hosts[hid].host):
        blind = _blind_rules(policy, hist[hid][-1], hist[hid][:-1])
        boot = hist[hid][-1].boot_id
        acted = act(fleet, hid, to_act[hid], hosts[hid], budget, at, blind, boot)
        if acted == "held":
            held.append(hosts[hid].host)
        elif acted == "quarantined":
            quarantined.append(hid)
    if held:
        report.guard_tripped = True
        report.guard_message = trip_guard(fleet, at, held)
    for hid in quarantined:  # after the alarms are committed: remediation does network I/O
        _first_rung(fleet, hosts[hid], findings[hid])


def _first_rung(fleet: Fleet, out: HostInspection, findings: list[Finding]) -> None:
    """Policy may run the first rung of the ladder automatically for named rules (the pool's
    ``auto_remediate``, ``service/remediation.auto_remediate``): the first critical finding
    whose rule the pool names runs it; a failed step is reported, never raised."""
    from gpufleet.service.health.remediation import auto_remediate

    for f in findings:
        if f.severity is not Severity.CRITICAL:
            continue
        try:
            done = auto_remediate(fleet, out.host, f.rule)
        except GpufleetError as exc:
            out.actions.append(f"automatic remediation for {f.rule} refused: {exc}")
            return
        if done is not None:
            verdict = "done" if done.ok else "failed"
            out.actions.append(f"automatic remediation for {f.rule}: {verdict}")
            return


def _blind_rules(policy: RulePolicy, latest: HostSample, before: list[HostSample]) -> set[str]:
    """Rules this sweep could not judge on the host (fail closed: their alarms do not clear
    on missing data): GPU rules when the GPU query failed, port rules when the ports the host
    had are not in this sample."""
    out: set[str] = set()
    if latest.gpus is None:
        out |= {
            r.id
            for r in policy.rules
            if r.scope == "gpu" or r.kind == "xid" or r.metric == "gpus_missing"
        }
    had_ports = any(smp.ports for smp in before)
    if had_ports and not latest.ports:
        out |= {r.id for r in policy.rules if r.scope == "port"}
    return out


def inspect_loop(
    fleet: Fleet,
    selector: str | None,
    every: timedelta,
    stop: threading.Event,
    *,
    transport: str | None = None,
    forks: int = 50,
    timeout_s: float = 30.0,
    on_sweep: Callable[[SweepReport | None, str | None], None] | None = None,
    sweeping: threading.Event | None = None,
) -> int:
    """Sweeps every ``every`` until ``stop`` is set (the sweep in progress finishes; the
    caller's SIGTERM handler may end it at once, ``sweeping`` set while one runs: the
    pipeline then releases its claims), keeping SSH connections open
    between sweeps (:class:`TransportCache`). A failed sweep (the database away) is reported
    and the loop goes on. Raw samples past the retention are rolled up after each sweep.
    Returns the number of sweeps."""
    check_timeout(every.total_seconds(), "--every")
    cache = TransportCache(fleet)
    sweeps = 0
    try:
        while not stop.is_set():
            started = time.monotonic()
            report: SweepReport | None = None
            error: str | None = None
            try:
                if sweeping is not None:
                    sweeping.set()
                report = inspect(
                    fleet,
                    selector,
                    transport=transport,
                    forks=forks,
                    timeout_s=timeout_s,
                    transports=cache,
                )
                roll_up_and_prune(fleet)
            except GpufleetError as exc:
                error = str(exc)
            except SQLAlchemyError as exc:  # the database went away: try again next sweep
                error = f"database error ({type(exc).__name__}); the next sweep tries again"
            finally:
                if sweeping is not None:
                    sweeping.clear()
            sweeps += 1
            if on_sweep is not None:
                on_sweep(report, error)
            stop.wait(max(0.0, every.total_seconds() - (time.monotonic() - started)))
    finally:
        cache.close()
    return sweeps
