"""Node-local preflight (``gpufleet preflight``): collect this machine, judge it, no database.

Runs the same collection script as ``collect --local`` (:class:`LocalTransport`), builds the
facts, evaluates the shipped (or the operator's) profiles and Xid policy, and turns the
outcome into one verdict (:mod:`gpufleet.domain.preflight`). Nothing here opens a database;
:func:`post_verdict` does, and only when asked. It never calls ``scontrol``: a Slurm prolog
that exits non-zero already drains the node.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select

from gpufleet.collect.active import parse_dcgm_diag_json
from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import split_bundle
from gpufleet.collect.local import LocalTransport
from gpufleet.collect.script import remote_script
from gpufleet.collect.transport import Outcome, Target
from gpufleet.config import Settings
from gpufleet.domain.checks import ActiveEvidence
from gpufleet.domain.events import EventKind
from gpufleet.domain.evidence import DcgmDiagResult
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.names import did_you_mean
from gpufleet.domain.preflight import PreflightReport, judge, local_spec, unknown
from gpufleet.domain.profiles import Profile, evaluate, load_profiles, without_proof
from gpufleet.domain.xid import XidPolicy
from gpufleet.errors import ConfigError, GpufleetError, NotFound, ParseError
from gpufleet.service.core.engine import engine
from gpufleet.service.core.fleet import Fleet, record_event, utcnow
from gpufleet.store.tables import Host

#: Seconds for the whole collection (each tool runs under its own shorter timeout), and for
#: DCGM level 1; together well inside a Slurm prolog's 60 s.
COLLECT_TIMEOUT_S = 30.0
TOOL_TIMEOUT_S = 20
DCGM_TIMEOUT_S = 25.0
#: ``dcgmi diag -r 1 -j``: the quick deployment checks only, never a longer level.
DCGM_COMMAND = "dcgmi diag -r 1 -j"


def _policies(settings: Settings) -> tuple[dict[str, Profile], XidPolicy]:
    pf, xf = settings.profiles_file, settings.xid_policy_file
    profiles = load_profiles(pf.read_text() if pf else None, source=str(pf) if pf else "<none>")
    xid = XidPolicy.from_yaml(xf.read_text(), source=str(xf)) if xf else XidPolicy.load_default()
    return profiles, xid


async def _run(transport: LocalTransport, target: Target, script: str, timeout_s: float) -> Any:
    return await transport.run(target, script, timeout_s)


def _dcgm(
    transport: LocalTransport, target: Target, facts: HostFacts
) -> tuple[DcgmDiagResult | None, str | None]:
    """DCGM level 1 on this node; (None, why) when it is not run or gave nothing usable."""
    if any(g.mig_mode_current for g in facts.gpus):
        return None, "dcgm level 1 not run: MIG is enabled"
    res = engine().run(_run(transport, target, DCGM_COMMAND + " 2>/dev/null", DCGM_TIMEOUT_S))
    if res.outcome is not Outcome.OK or not (res.output or "").strip():
        return None, f"dcgm level 1 gave no result ({res.reason or res.outcome.value})"
    try:
        return parse_dcgm_diag_json(res.output or "", level=1), None
    except ParseError as exc:
        return None, f"dcgm level 1 output unreadable: {exc}"


def run_preflight(
    settings: Settings,
    *,
    profile: str | None = None,
    dcgm: bool = False,
    env: Mapping[str, str] | None = None,
    now: datetime | None = None,
) -> PreflightReport:
    """Collect and judge this machine. ``env`` overrides the environment of the collection
    (tests point PATH and GPUFLEET_SYSROOT at fake tools). Raises ConfigError for an unknown
    profile or unreadable operator files, before anything runs."""
    start = time.monotonic()
    profiles, xid = _policies(settings)
    if profile is not None and profile not in profiles:
        raise ConfigError(
            f"unknown profile {profile!r}{did_you_mean(profile, profiles)} "
            f"(known: {', '.join(sorted(profiles))})"
        )
    host = socket.gethostname()
    target = Target(host, "localhost")
    transport = LocalTransport(env)
    script = remote_script(tool_timeout_s=TOOL_TIMEOUT_S)
    res = engine().run(_run(transport, target, script, COLLECT_TIMEOUT_S))
    when = now or utcnow()

    def done(report: PreflightReport) -> PreflightReport:
        return report.model_copy(update={"duration_s": round(time.monotonic() - start, 3)})

    if res.outcome is not Outcome.OK or res.output is None:
        return done(unknown(host, f"collection {res.outcome.value}: {res.reason}", profile))
    try:
        facts = assemble_facts(split_bundle(res.output), when, host)
    except ParseError as exc:
        return done(unknown(host, f"unreadable tool output: {exc}", profile))
    host = facts.hostname or host
    evidence = ActiveEvidence()
    note: str | None = None
    if dcgm:
        diag, note = _dcgm(transport, target, facts)
        evidence = ActiveEvidence(dcgm_diag=diag)
    local = without_proof(profiles, keep_dcgm=dcgm)  # the proof is validation's, in the store
    outcome = evaluate(facts, local_spec(facts), None, local, xid, when, evidence=evidence)
    report = judge(host, outcome, xid, profile=profile)
    if note:
        report = report.model_copy(update={"reason": f"{report.reason}; {note}"})
    return done(report)


def post_verdict(fleet: Fleet, report: PreflightReport) -> None:
    """Record the verdict as a ``preflight`` event on the host (by its name) in the store."""
    with fleet.db.session() as s:
        host = s.scalars(select(Host).where(Host.name == report.host)).first()
        if host is None:
            raise NotFound(what="host", name=report.host)
        record_event(
            s,
            fleet,
            EventKind.PREFLIGHT,
            f"preflight {report.verdict.value}: {report.reason}"[:1000],
            host=host,
            data=json.loads(report.model_dump_json()),
        )


def store_configured(settings: Settings) -> bool:
    """A store is configured: a database URL is set, or the home already has its SQLite
    database (preflight never creates one)."""
    return settings.database_url is not None or (settings.home / "gpufleet.db").exists()


def post_configured(settings: Settings, report: PreflightReport) -> bool:
    """Post ``report`` when a store is configured; False when none is."""
    if not store_configured(settings):
        return False
    fleet = Fleet.open(settings=settings)
    try:
        post_verdict(fleet, report)
    finally:
        fleet.db.dispose()
    return True


__all__ = ["GpufleetError", "post_configured", "post_verdict", "run_preflight", "store_configured"]
