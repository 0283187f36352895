"""Active tests (DCGM diag, NCCL all_reduce_perf, gpu-burn): run over SSH or ingested from the
operator's own tooling, parsed, and stored as evidence the next validation uses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gpufleet.collect.active import parse_dcgm_diag_json, parse_gpu_burn, parse_nccl_tests
from gpufleet.collect.transport import Outcome, RawResult
from gpufleet.domain.events import EvidenceKind
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError, GpufleetError, NotFound
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.pipeline import (
    Claimed,
    Pipeline,
    check_forks,
    check_timeout,
    claim_hosts,
    claim_lease,
    drop_claim,
    holds_claim,
)
from gpufleet.service.hosts.validate import record_evidence, store_evidence
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
    except (ValueError, KeyError):
        raise ConfigError(f"unknown active test {kind!r}: use {', '.join(ACTIVE_TESTS)}") from None


def ingest_file(
    fleet: Fleet, host: str, kind: str, path: Path, *, level: int | None = None
) -> BaseModel:
    """Parse a file the operator's tooling produced and store it for ``host``. ``level``: the
    ``dcgmi diag -r`` level the run used (its JSON does not say; training-multinode needs 2)."""
    test = active_test(kind)
    result = test.parse(path.read_text(errors="replace"), str(path))
    if level is not None:
        if test.kind is not EvidenceKind.DCGM:
            raise ConfigError(f"--level is for DCGM diag results, not {kind}")
        result = result.model_copy(update={"level": level})
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


def fill_command(template: str, **values: int) -> str:
    """``template`` with ``{level}``, ``{gpus}`` and ``{seconds}`` filled in; every other
    brace is the user's (a shell ``{}``, ``${x}``, an awk ``{print $1}``) and stays as typed
    (``str.format`` raised on ``{}`` or ``{0}``)."""
    out = template
    for key, value in values.items():
        out = out.replace("{" + key + "}", str(value))
    return out


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
    on_start: Callable[[int], None] | None = None,
    on_result: Callable[[RawResult], None] | None = None,
    token: str | None = None,
    take_over: str | None = None,
) -> list[ActiveRun]:
    """Run an active test on the selected hosts over their transport and store the results.
    ``timeout_s`` / ``forks`` default to the settings (GPUFLEET_EVIDENCE_TIMEOUT / _FORKS).

    The claim -> run -> apply pipeline of ``collect`` (:mod:`gpufleet.service.core.pipeline`):
    hosts are claimed (a host another worker holds is reported, not tested twice), up to
    ``forks`` tests run at once with no database transaction open (they take minutes), and
    each result is stored in its own short transaction while the claim still holds.
    Allocated and retired hosts are not tested. ``token`` / ``take_over``: a run chunk's
    claim token and its earlier attempts' prefix (:mod:`gpufleet.service.background.jobs`).
    """
    test = active_test(kind)
    timeout_s = check_timeout(
        fleet.settings.evidence_timeout_s if timeout_s is None else timeout_s, "--timeout"
    )
    forks = check_forks(fleet.settings.evidence_forks if forks is None else forks, "--forks")
    connect_s = fleet.settings.connect_timeout_s

    def lease(n: int) -> timedelta:
        return claim_lease(n, forks, timeout_s, connect_s)

    got = claim_hosts(
        fleet,
        selector,
        None,
        lease,
        skip_states=(HostState.RETIRED, HostState.ALLOCATED),
        token=token,
        take_over=take_over,
    )
    if selector and not (got.hosts or got.busy or got.refused):
        raise NotFound(f"no hosts match selector '{selector}' (allocated/retired are skipped)")

    def command_for(c: Claimed) -> str:
        gpus = max(1, int(c.expected.get("gpu_count") or 8))
        return fill_command(command or test.command, level=level, gpus=gpus, seconds=seconds)

    def apply(c: Claimed, raw: RawResult) -> ActiveRun:
        return _apply_active(fleet, test, c, raw, command_for(c), level)

    runs = [ActiveRun(name, False, f"error: {why}") for name, why in got.refused]
    runs += [ActiveRun(name, False, HELD_ELSEWHERE) for name in got.busy]
    runs += Pipeline(
        fleet,
        got,
        command=command_for,
        apply=apply,
        forks=forks,
        timeout_s=timeout_s,
        on_start=on_start,
        on_result=on_result,
    ).run()
    return sorted(runs, key=lambda r: r.host)


#: The summary of a host another worker holds (collecting or testing it).
HELD_ELSEWHERE = "skipped: another worker holds this host (collecting or testing it)"


def _apply_active(
    fleet: Fleet, test: ActiveTest, c: Claimed, raw: RawResult, cmd: str, level: int
) -> ActiveRun:
    """Parse one host's output (no transaction) and store it while the claim holds; the
    claim is released either way."""
    name = c.target.name
    run: ActiveRun
    result: BaseModel | None = None
    if raw.outcome is not Outcome.OK or raw.output is None:
        run = ActiveRun(name, False, f"{raw.outcome.value}: {raw.reason}")
    else:
        try:
            result = test.parse(raw.output, f"{name}: {cmd}")
        except GpufleetError as exc:
            run = ActiveRun(name, False, f"bad output: {exc}")
        else:
            if test.kind is EvidenceKind.DCGM and getattr(result, "level", None) is None:
                result = result.model_copy(update={"level": level})  # dcgmi -j omits it
            ok = passed(result)
            run = ActiveRun(
                name, ok is not False, test.describe(result), result.model_dump(mode="json")
            )
    now = fleet.now()
    with fleet.db.session() as s:
        host = s.get(Host, c.host_id, with_for_update=True)
        if host is None:
            return ActiveRun(name, False, "host removed while it was tested")
        if not holds_claim(host, c.token):
            return ActiveRun(
                name,
                False,
                "result discarded: the claim expired and another worker holds the host now",
            )
        if result is not None and run.result is not None:
            store_evidence(
                s,
                fleet,
                host,
                test.kind,
                run.result,
                f"{c.transport}: {cmd}",
                passed=passed(result),
                summary=run.summary,
            )
        drop_claim(host, now)
    return run
