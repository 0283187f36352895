"""lab/demo.py: ``gpufleet lab demo`` as a use case (the CLI only prints its report), on
SQLite and PostgreSQL; and the CLI command end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat

from gpufleet.domain.events import AlarmKind
from gpufleet.lab.demo import (
    DEMO_RACK_FAULTY,
    RACK_FROM,
    STEPS,
    DemoReport,
    build_lab,
    evidence_hosts,
    reference_hosts,
    run_demo,
    run_rack,
)
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.views.racks import show_rack


def test_demo_runs_every_step_and_reports_it(fleet: Fleet, tmp_path: Path) -> None:
    seen: list[tuple[str, bool]] = []

    def on_step(step: str, rep: DemoReport) -> None:
        seen.append((step, rep.summary is not None))

    rep = run_demo(fleet, tmp_path / "lab", 6, on_step=on_step)
    assert [s for s, _ in seen] == list(STEPS)
    assert [done for _, done in seen] == [False] * 6 + [True, True]
    assert rep.rack is None  # the rack comes from RACK_FROM hosts on
    assert (tmp_path / "lab" / "inventory.ini").is_file()
    assert rep.enrolled is not None and len(rep.enrolled.added) == 6
    assert rep.collection is not None and len(rep.collection.results) == 6
    refs = reference_hosts(rep.lab)
    assert {b.pool: b.reference for b in rep.baselines} == refs and refs
    assert all(b.baseline.name == f"{b.pool}-ref" for b in rep.baselines)
    assert rep.validation is not None and len(rep.validation.verdicts) == 6
    assert rep.summary is not None and rep.summary.hosts == 6
    assert set(rep.summary.drift.baselines.values()) == {f"{p}-ref" for p in refs}


def test_the_demo_ends_with_proven_training_hosts(fleet: Fleet, tmp_path: Path) -> None:
    """Issue 24 item 5: the demo runs the lab's evidence (NVIDIA's real DCGM output at level
    2 on every NVIDIA host, the real 8x A100 all-reduce on the A100 hosts) after one validated
    baseline per pool, so its A100 hosts end training-multinode with proof, its H100 hosts
    training-single and held out of multinode with the reason (no H100 NCCL capture)."""
    rep = run_demo(fleet, tmp_path / "lab", 6)
    assert evidence_hosts(rep.lab) == {"dcgm": ["gpu-01", "gpu-02", "gpu-03", "gpu-04",
                                                "gpu-05", "gpu-06"],
                                       "nccl": ["gpu-01", "gpu-02"]}
    assert [(r.host, r.ok) for r in rep.evidence] == [
        (f"gpu-0{i}", True) for i in range(1, 7)] + [("gpu-01", True), ("gpu-02", True)]
    assert rep.validation is not None
    by = {v.host: v for v in rep.validation.verdicts}
    models = {h.name: h.model for h in rep.lab.hosts}
    a100 = [n for n, m in models.items() if m == "a100-8x" and by[n].state == "available"]
    assert a100, models
    for name in a100:
        assert "training-multinode" in by[name].profiles, by[name]
    h100 = [n for n, m in models.items() if m == "h100-8x" and by[n].state == "available"]
    assert h100, models
    for name in h100:
        assert "training-single" in by[name].profiles
        assert by[name].held_out["training-multinode"] == [
            "nccl: no NCCL all-reduce result (required)"]


@pytest.fixture(params=["sqlite", "postgres"])
def cli(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    return cli_for_backend(request, tmp_path, "demo-test")


def test_lab_demo_cli_prints_each_step(cli: Cli) -> None:
    out = flat(cli.run("lab", "demo", "--hosts", "4").stdout)
    for title in ("1. lab fleet: 4 hosts", "2. enroll", "3. collect",
                  "baselines: one reference build per pool",
                  "active tests: DCGM diag (level 2), NCCL all-reduce", "4. validate",
                  "fleet summary"):
        assert title in out, title
    assert "4 added, 0 updated, 0 unchanged" in out


def test_the_demo_fleet_is_mixed_from_eight_hosts(tmp_path: Path) -> None:
    """``make demo`` (32 hosts) shows Ascend and AMD hosts beside the NVIDIA pools, one NPU in
    Alarm, and one healthy host of each of issue 28's vendors; from 8 hosts on Ascend and AMD
    only; a small demo stays NVIDIA only."""
    lab = build_lab(tmp_path / "lab", 32)
    assert [h.model for h in lab.hosts[-9:]] == [
        "ascend-910b3-8x", "ascend-910b3-8x", "mi100-4x", "k100ai-4x", "mlu370-x8-2x",
        "p800-8x", "c500-8x", "bi-v150-16x", "s60-2x"]
    assert lab.hosts[-8].faults == ["npu-alarm"] and lab.hosts[-9].faults == []
    assert all(h.faults == [] for h in lab.hosts[-6:])
    assert reference_hosts(lab)["train-910b"] == lab.hosts[-9].name
    eight = build_lab(tmp_path / "eight", 8)
    assert [h.model for h in eight.hosts[-3:]] == [
        "ascend-910b3-8x", "ascend-910b3-8x", "mi100-4x"]
    assert all(h.spec.vendor in ("nvidia", "huawei", "amd") for h in eight.hosts)
    small = build_lab(tmp_path / "small", 6)
    assert all(h.spec.vendor == "nvidia" for h in small.hosts)


#: Issue 28 item 5: ``make demo``'s summary line counts each vendor's accelerators.
DEMO_LINE = (
    "32 hosts, 220 accelerators (160 NVIDIA GPUs, 16 Ascend NPUs, 16 Iluvatar CoreX GPUs, "
    "8 Kunlunxin XPUs, 8 MetaX GPUs, 4 AMD Instinct GPUs, 4 Hygon DCUs, 2 Cambricon MLUs, "
    "2 Enflame GCUs), 189 available"
)


def test_make_demo_counts_accelerators_per_vendor(fleet: Fleet, tmp_path: Path) -> None:
    """The 32-host demo: every vendor's host collected and validated from its real
    captures (each of issue 28's vendors available, the Enflame S60 host for ``test`` only:
    its second card runs ECC on, memory short of the model's), and the summary line counts
    each vendor's accelerators by the vendor's own name for them."""
    rep = run_demo(fleet, tmp_path / "lab", 32)
    assert rep.summary is not None and rep.summary.counts_line() == DEMO_LINE
    assert rep.validation is not None
    by = {v.host: v for v in rep.validation.verdicts}
    new = {h.spec.vendor: h.name for h in rep.lab.hosts[-6:]}
    assert list(new) == ["hygon", "cambricon", "kunlunxin", "metax", "iluvatar", "enflame"]
    assert {v: by[n].state for v, n in new.items()} == dict.fromkeys(new, "available")
    assert by[new["enflame"]].profiles == ["test"]
    assert all(by[n].profiles == ["inference", "test"] for v, n in new.items() if v != "enflame")


def test_the_demo_rack_makes_one_rack_incident(fleet: Fleet, tmp_path: Path) -> None:
    """Issue 27 item 8: ``make demo`` (32 hosts, from RACK_FROM on) shows one GB200 NVL72 rack
    of 18 trays, validated, then a switch fault two trays see: one rack incident with one
    alarm, the rack's trays restricted, none quarantined."""
    assert RACK_FROM <= 8  # make demo has it, and so does the 8-host demo
    rack = run_rack(fleet, tmp_path / "rack")
    assert len(rack.lab.hosts) == 18 and rack.anchor == "nvl01-t01"
    assert {v.state for v in rack.validation.verdicts} == {"available"}
    assert rack.sweep.guard_tripped is False
    (inc,) = rack.sweep.incidents
    assert inc["hosts"] == list(DEMO_RACK_FAULTY) and inc["trays"] == 18
    shown = show_rack(fleet, rack.anchor)
    assert [t.state for t in shown.tray_rows] == ["available"] * 18
    assert all(t.restricted for t in shown.tray_rows)
    alarms = [a["kind"] for t in shown.tray_rows for a in t.alarms]
    assert alarms == [AlarmKind.RACK_INCIDENT]
