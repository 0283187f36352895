"""Job-failure classification (shipped rules + overlay) and the flag rule (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.domain.failures import Failure, classify, group_failures, load_rules
from gpufleet.errors import ConfigError

T = datetime(2026, 3, 1, 3, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("message", "category"),
    [
        ("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)", "network"),
        ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.", "gpu"),
        ("CUDA error: uncorrectable ECC error encountered", "gpu"),
        ("RuntimeError: No CUDA GPUs are available / no CUDA-capable device is detected", "driver"),
        ("Failed to initialize NVML: Driver/library version mismatch", "driver"),
        ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "user"),
        ("Segmentation fault (core dumped)", "unknown"),
    ],
)
def test_shipped_rules(message: str, category: str) -> None:
    assert classify(message, load_rules())[0] == category


def test_an_overlay_is_tried_first_and_replaces_a_rule_by_name() -> None:
    rules = load_rules(
        "rules:\n  - {name: oom, category: gpu, pattern: 'out of memory'}\n"
        "  - {name: segv, category: user, pattern: 'Segmentation fault'}\n",
        "mine.yaml",
    )
    assert classify("CUDA out of memory", rules) == ("gpu", "oom")
    assert classify("Segmentation fault", rules) == ("user", "segv")
    assert classify("Xid 79", rules) == ("gpu", "xid")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("rules: [{name: a, category: cpu, pattern: x}]", "rule 1: category 'cpu'"),
        ("rules: [{name: a, category: gpu, pattern: '('}]", "rule 1: bad pattern"),
        ("rules: [{name: a, category: gpu}]", "rule 1: expected exactly"),
        ("- a", "expected a mapping"),
    ],
)
def test_a_bad_overlay_names_file_and_rule(text: str, why: str) -> None:
    with pytest.raises(ConfigError, match=rf"mine.yaml: {why}"):
        load_rules(text, "mine.yaml")


def _f(host: str, job: str, gpu: str | None = "3") -> Failure:
    return Failure(job, host, gpu, T, "gpu", "m")


def test_failures_of_several_jobs_flag_a_host_one_jobs_do_not() -> None:
    fs = [_f("gpu-07", f"j{n % 4}") for n in range(6)]
    fs += [_f("gpu-02", "same") for _ in range(6)]  # one job, six times: the job
    fs += [_f(f"gpu-1{n}", f"k{n}") for n in range(3)]
    groups = {
        g.host: g
        for g in group_failures(
            fs,
            fleet_hosts=20,
            evidence={"gpu-07": ["Xid 79 at 03:12", "change-declared yesterday: driver-upgrade"]},
        )
    }
    assert groups["gpu-07"].flagged and not groups["gpu-02"].flagged
    assert groups["gpu-07"].line() == (
        "gpu-07: 6 failures from 4 jobs, all on GPU 3, Xid 79 at 03:12, "
        "change-declared yesterday: driver-upgrade"
    )
    # the same failures spread evenly over a small fleet are no concentration
    even = [_f(f"h{n}", f"j{m}") for n in range(3) for m in range(4)]
    assert not any(g.flagged for g in group_failures(even, fleet_hosts=3))
