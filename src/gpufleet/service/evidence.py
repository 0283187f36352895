"""Active tests (DCGM diag, NCCL all_reduce_perf, gpu-burn): run over SSH or ingested from the
operator's own tooling, parsed, and stored as evidence the next validation uses."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from sqlalchemy import select

from gpufleet.collect.active import parse_dcgm_diag_json, parse_gpu_burn, parse_nccl_tests
from gpufleet.collect.transport import Outcome, Target, TransportKey, run_many, transport_key
from gpufleet.domain.events import EvidenceKind
from gpufleet.errors import ConfigError, GpufleetError, NotFound
from gpufleet.service.collect import check_forks, check_timeout, transport_for_host
from gpufleet.service.fleet import Fleet
from gpufleet.service.select import select_hosts
from gpufleet.service.validate import record_evidence
from gpufleet.store.tables import Host


@dataclass(frozen=True)
class ActiveTest:
    """How to run one kind of active test and read its output."""

    kind: EvidenceKind
    command: str  # default command line; {level} / {gpus} / {seconds} are filled in
    parse: Callable[[str, str], BaseModel]
    describe: Callable[[Any], str]


ACTIVE_TESTS: dict[EvidenceKind, ActiveTest] = {
    EvidenceKind.DCGM: ActiveTest(
        EvidenceKind.DCGM,
        "dcgmi diag -r {level} -j",
        lambda t, s: parse_dcgm_diag_json(t, s),
        lambda r: (
            f"{'passed' if r.passed else 'FAILED'}: level {r.level or '?'}, "
            f"{len(r.gpu_ids)} GPUs, {len(r.tests)} tests"
            + (f", failed GPUs {r.failed_gpus}" if r.failed_gpus else "")
        ),
    ),
    EvidenceKind.NCCL: ActiveTest(
        EvidenceKind.NCCL,
        "all_reduce_perf -b 8 -e 8G -f 2 -g {gpus}",
        lambda t, s: parse_nccl_tests(t, s),
        lambda r: f"avg bus bandwidth {r.avg_bus_bw_gbps} GB/s, max {r.max_bus_bw_gbps} GB/s",
    ),
    EvidenceKind.GPU_BURN: ActiveTest(
        EvidenceKind.GPU_BURN,
        "gpu_burn {seconds}",
        lambda t, s: parse_gpu_burn(t, s),
        lambda r: f"{len(r.gpus)} GPUs, " + (f"FAULTY {r.faulty}" if r.faulty else "all OK"),
    ),
}


def active_test(kind: str) -> ActiveTest:
    """The test named ``kind`` (dcgm, nccl, gpu-burn)."""
    try:
        return ACTIVE_TESTS[EvidenceKind(kind)]
    except ValueError:
        raise ConfigError(f"unknown active test {kind!r}: use {', '.join(ACTIVE_TESTS)}") from None


def ingest_file(fleet: Fleet, host: str, kind: str, path: Path) -> BaseModel:
    """Parse a file the operator's tooling produced and store it for ``host``."""
    test = active_test(kind)
    result = test.parse(path.read_text(errors="replace"), str(path))
    record_evidence(
        fleet,
        host,
        test.kind,
        result.model_dump(mode="json"),
        str(path),
        passed=passed(result),
        summary=test.describe(result),
    )
    return result


def passed(result: BaseModel) -> bool | None:
    """Whether a result passed on its own (DCGM, gpu-burn); None when only the profile can
    judge it (NCCL bandwidth floors)."""
    value = getattr(result, "passed", None)
    return None if value is None else bool(value)


@dataclass
class ActiveRun:
    """The outcome of one active test on one host."""

    host: str
    ok: bool
    summary: str
    result: dict[str, Any] | None = None


def run_active(
    fleet: Fleet,
    selector: str | None,
    kind: str,
    *,
    level: int = 1,
    seconds: int = 60,
    command: str | None = None,
    timeout_s: float | None = None,
    forks: int | None = None,
) -> list[ActiveRun]:
    """Run an active test on the selected hosts over their transport and store the results.
    ``timeout_s`` / ``forks`` default to the settings (GPUFLEET_EVIDENCE_TIMEOUT / _FORKS).

    No database transaction is open while the tests run (they take minutes).
    """
    test = active_test(kind)
    timeout_s = check_timeout(
        fleet.settings.evidence_timeout_s if timeout_s is None else timeout_s, "--timeout"
    )
    forks = check_forks(fleet.settings.evidence_forks if forks is None else forks, "--forks")
    with fleet.db.session() as s:
        hosts = [
            (
                h.name,
                Target(h.name, h.address, h.port, h.user, h.key_file, h.host_key),
                dict(h.vars),
            )
            for h in s.scalars(select_hosts(selector))
            if h.state not in ("retired", "allocated")
        ]
        if selector and not hosts:
            raise NotFound(f"no hosts match selector '{selector}' (allocated/retired are skipped)")
        gpus = {
            h.name: max(1, int(h.expected.get("gpu_count") or 8))
            for h in s.scalars(select(Host).where(Host.name.in_([n for n, _, _ in hosts])))
        }
    runs: list[ActiveRun] = []
    by_transport: dict[TransportKey, list[tuple[str, Target]]] = {}
    for name, target, vars_ in hosts:
        key = transport_key(vars_.get("gpufleet_transport", "ssh"), vars_)
        by_transport.setdefault(key, []).append((name, target))
    for key, members in by_transport.items():
        transport = key[0]
        tr = transport_for_host(key, fleet)
        for name, target in members:
            cmd = (command or test.command).format(level=level, gpus=gpus[name], seconds=seconds)
            raw = asyncio.run(run_many(tr, [target], cmd, forks=forks, timeout_s=timeout_s))[0]
            if raw.outcome is not Outcome.OK or raw.output is None:
                runs.append(ActiveRun(name, False, f"{raw.outcome.value}: {raw.reason}"))
                continue
            try:
                result = test.parse(raw.output, f"{name}: {cmd}")
            except GpufleetError as exc:
                runs.append(ActiveRun(name, False, f"bad output: {exc}"))
                continue
            if test.kind is EvidenceKind.DCGM and getattr(result, "level", None) is None:
                result = result.model_copy(update={"level": level})  # dcgmi -j omits it
            data = result.model_dump(mode="json")
            ok = passed(result)
            record_evidence(
                fleet,
                name,
                test.kind,
                data,
                f"{transport}: {cmd}",
                passed=ok,
                summary=test.describe(result),
            )
            runs.append(ActiveRun(name, ok is not False, test.describe(result), data))
    return sorted(runs, key=lambda r: r.host)
