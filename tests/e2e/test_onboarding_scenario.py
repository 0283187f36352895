"""The users' scenario (issue: lifecycle/validation), end to end on the lab, both databases.

16 hosts of one pool; A runs another driver than the pool baseline; B has an IB port Down;
C lost one of its 8 GPUs from the driver (still in lspci); D has a fatal Xid 79.
"""

from __future__ import annotations

from pathlib import Path

from tests.labproof import prove

from gpufleet.domain.spec import BaselineStatus
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import LabFleet, apply_change
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.baselines import (
    baseline_from_host,
    drift,
    save_baseline,
    set_pool_baseline,
)
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import list_hosts, show_host
from gpufleet.service.views.summary import host_labels

ALL = {"training-multinode", "training-single", "inference", "test"}
A, B, C, D = "gpu-02", "gpu-05", "gpu-09", "gpu-13"


def build(tmp_path: Path, fleet: Fleet) -> Path:
    d = tmp_path / "lab"
    enroll_lab(
        fleet,
        d,
        16,
        models=["h100-8x"],
        faults={A: ["driver-drift"], B: ["ib-down"], C: ["gpu-missing"], D: ["xid:79"]},
        now=fleet.now(),
    )
    collect(fleet)
    pool = list_hosts(fleet, "gpu-01")[0].pool
    assert pool
    ref = baseline_from_host(fleet, "gpu-01", "h100-lab", "training")
    save_baseline(fleet, ref.model_copy(update={"status": BaselineStatus.VALIDATED}))
    set_pool_baseline(fleet, pool, "h100-lab")
    prove(fleet, tmp_path)  # the training profiles' DCGM and NCCL (issue 24 item 5)
    return d


def test_scenario(fleet: Fleet, tmp_path: Path) -> None:
    d = build(tmp_path, fleet)
    rep = validate(fleet)
    by = {v.host: v for v in rep.verdicts}
    clean = [h for h in by if h not in (A, B, C, D)]
    assert len(clean) == 12
    for h in clean:
        assert by[h].state == "available", (h, by[h].reasons)
        assert set(by[h].profiles) == ALL

    assert by[B].state == "available"
    assert set(by[B].profiles) == {"inference", "training-single", "test"}
    labels = {r.host: r for r in host_labels(fleet, B)}[B].labels
    assert labels["gpufleet.io/fabric"] == "none"
    assert "gpufleet.io/validated.training-multinode" not in labels
    assert labels["gpufleet.io/validated.inference"] == "true"

    assert by[A].state == "validating"
    assert any("driver" in r for r in by[A].reasons), by[A].reasons
    assert A in drift(fleet).by_host

    assert by[C].state == "quarantined" and "gpu_lost" in by[C].faults
    assert by[D].state == "quarantined" and "fatal_xid" in by[D].faults
    assert show_host(fleet, C).view.fault == "gpu_lost"
    assert show_host(fleet, D).view.fault == "fatal_xid"

    # Lab change: A's driver aligned with the baseline -> available.
    apply_change(LabFleet.load(d), A, clear_faults=["driver-drift"]).save(d)
    rep2 = validate(fleet, A)
    assert rep2.verdicts[0].state == "available", rep2.verdicts[0].reasons
    assert A not in drift(fleet).by_host

    # A GPU swap on a clean host is detected from the serials: back to validating.
    apply_change(LabFleet.load(d), "gpu-01", gpu_swap=True).save(d)
    run = collect(fleet, "gpu-01")
    assert any("gpu_swap" in c for c in run.results[0].changes), run.results[0].changes
    assert show_host(fleet, "gpu-01").view.state == "validating"
    events = [e["kind"] for e in show_host(fleet, "gpu-01").events]
    assert "change-detected" in events and "transition" in events
