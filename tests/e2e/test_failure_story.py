"""The seed's story (issue 9 item 8), end to end on the simulated lab, both databases.

Twelve H100 hosts of one pool. Failures from many jobs arrive across the fleet, most on two
hosts: gpu-03 runs a driver off the pool baseline (and an operator declared a driver upgrade
on it yesterday), gpu-08 has a fabric port down. One other host fails three times, all from
one job (the job's own bug). The report names exactly gpu-03 and gpu-08, each with the
correlated evidence; ``--quarantine`` moves them out and the rest stay where they were.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from gpufleet.domain.changes import DeclaredChangeKind
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import create_fleet
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health.failures import failure_report, import_failures, record_failure
from gpufleet.service.hosts import operations
from gpufleet.service.hosts.baselines import baseline_from_host, save_baseline, set_pool_baseline
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import list_hosts
from gpufleet.testing import FakeClock

DRIFT, FABRIC, ONE_JOB = "gpu-03", "gpu-08", "gpu-11"


def test_failures_point_at_the_two_bad_hosts(fleet: Fleet, tmp_path: Path) -> None:
    clock = fleet.clock
    assert isinstance(clock, FakeClock)
    d = tmp_path / "lab"
    enroll_lab(fleet, d, 12, models=["h100-8x"], faults={FABRIC: ["ib-down"]}, now=fleet.now())
    collect(fleet)
    pool = list_hosts(fleet, "gpu-01")[0].pool
    assert pool
    save_baseline(fleet, baseline_from_host(fleet, "gpu-01", "h100-lab", "training"))
    set_pool_baseline(fleet, pool, "h100-lab")
    validate(fleet)
    # A day later gpu-03 gets another driver, declared by an operator.
    clock.advance(days=1)
    lf2 = create_fleet(
        12,
        models=["h100-8x"],
        faults={FABRIC: ["ib-down"], DRIFT: ["driver-drift"]},
        now=fleet.now(),
    )
    lf2.save(d)
    operations.record_change(fleet, DRIFT, DeclaredChangeKind.DRIVER_UPGRADE, "CHG-1", "")
    validate(fleet)
    clock.advance(days=1)
    before = {h.name: h.state for h in list_hosts(fleet, None)}

    t0 = fleet.now() - timedelta(hours=20)
    lines = []
    for n in range(5):  # gpu-03: 5 failures from 4 jobs, all on GPU 3
        lines.append(
            f'{{"job": "train-{n % 4}", "host": "{DRIFT}", "gpu": "3", '
            f'"time": "{(t0 + timedelta(hours=n)).isoformat()}", '
            '"message": "Failed to initialize NVML: Driver/library version mismatch"}'
        )
    for n in range(4):  # gpu-08: 4 NCCL timeouts from 4 jobs
        lines.append(
            f'{{"job": "nccl-{n}", "host": "{FABRIC}", "time": '
            f'"{(t0 + timedelta(hours=n)).isoformat()}", "message": '
            '"NCCL watchdog: collective operation timed out after 1800000 ms"}'
        )
    for n, h in enumerate(("gpu-01", "gpu-05", "gpu-06", "gpu-10")):  # background noise
        lines.append(
            f'{{"job": "misc-{n}", "host": "{h}", "gpu": "0", "time": '
            f'"{t0.isoformat()}", "message": "segfault in user code"}}'
        )
    for n in range(3):  # one job, three failures: the job's own bug, not the host
        lines.append(
            f'{{"job": "oom-job", "host": "{ONE_JOB}", "gpu": "1", "time": '
            f'"{(t0 + timedelta(minutes=n)).isoformat()}", '
            '"message": "torch.cuda.OutOfMemoryError: CUDA out of memory"}'
        )
    lines.insert(3, "{not json")
    lines.insert(
        7, '{"job": "x", "host": "gpu-99", "time": "2026-01-01T00:00:00Z", "message": "m"}'
    )
    f = tmp_path / "failures.jsonl"
    f.write_text("\n".join(lines) + "\n")
    imp = import_failures(fleet, f)
    assert imp.recorded == 16
    assert [e.split(": ")[0] for e in imp.errors] == [f"{f}:4", f"{f}:8"]
    assert "gpu-99" in imp.errors[1]
    # and one more, recorded by hand (an old failure outside the window)
    r = record_failure(
        fleet,
        job="old",
        host=DRIFT,
        gpu="3",
        time=(fleet.now() - timedelta(days=30)).isoformat(),
        message="GPU has fallen off the bus",
    )
    assert r.category == "gpu"

    rep = failure_report(fleet, timedelta(days=7))
    assert sorted(rep.flagged) == [DRIFT, FABRIC]
    by = {g.host: g for g in rep.groups}
    assert len(by[DRIFT].failures) == 5 and by[DRIFT].jobs == 4
    line = by[DRIFT].line()
    assert line.startswith(f"{DRIFT}: 5 failures from 4 jobs, all on GPU 3")
    assert "driver" in line and "off baseline h100-lab" in line
    assert "change-declared yesterday" in line
    assert by[DRIFT].categories == {"driver": 5}
    assert any(e.startswith("fabric port") and "Down" in e for e in by[FABRIC].evidence)
    assert by[FABRIC].categories == {"network": 4}
    assert not by[ONE_JOB].flagged and by[ONE_JOB].jobs == 1
    assert not any(e.startswith("fabric port") for e in by["gpu-01"].evidence)

    done = failure_report(fleet, timedelta(days=7), quarantine=True, label="failures report 7d")
    assert sorted(done.quarantined) == [DRIFT, FABRIC]
    after = {h.name: h for h in list_hosts(fleet, None)}
    assert after[DRIFT].state == "quarantined" and after[FABRIC].state == "quarantined"
    assert "failures report 7d" in (after[DRIFT].status_reason or "")
    assert {n: h.state for n, h in after.items() if n not in (DRIFT, FABRIC)} == {
        n: s for n, s in before.items() if n not in (DRIFT, FABRIC)
    }
