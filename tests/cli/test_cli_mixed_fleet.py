"""A mixed fleet side by side through the ``gpufleet`` CLI at 80 columns (issue 15): the
summary's accelerators per vendor and model, capacity per vendor/model, drift of the Ascend
stack, labels with the vendors' conventions; no line wider than the terminal and no model or
host name cut (the tables fold, they never truncate)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.labproof import lab_profiles

ACTOR = "cli-mixed-test"
COLUMNS = 80


def _rows(out: str, title: str) -> list[list[str]]:
    """The body rows of the table titled ``title`` (cells between the box's bars; a wrapped
    cell's continuation line, the one whose last, numeric, cell is empty, is joined to the
    row above with a blank)."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip() == title)
    rows: list[list[str]] = []
    body = False
    for ln in lines[start + 1:]:
        if ln.startswith(("┡", "├")):
            body = True
            continue
        if ln.startswith("└"):
            break
        if body and "│" in ln:
            cells = [c.strip() for c in ln.strip().strip("│").split("│")]
            if cells[-1] or not rows:
                rows.append(cells)
            else:
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
    return rows


def test_summary_capacity_drift_labels_of_a_mixed_fleet_fit_80_columns(tmp_path: Path) -> None:
    env = {**os.environ, "GPUFLEET_HOME": str(tmp_path / "home"), "COLUMNS": str(COLUMNS),
           "GPUFLEET_ACTOR": ACTOR}
    env.pop("GPUFLEET_DATABASE_URL", None)

    def run(*argv: str, code: int = 0) -> str:
        r = subprocess.run([sys.executable, "-m", "gpufleet.cli.main", *argv], env=env,
                           capture_output=True, text=True, check=False)
        assert r.returncode == code, (argv, r.stdout, r.stderr)
        out = r.stdout
        if "--json" not in argv:
            wide = [ln for ln in out.splitlines() if len(ln) > COLUMNS]
            assert not wide, (argv, wide)
        return out

    lab = tmp_path / "lab"
    run("lab", "create", "--hosts", "3", "--model", "h100-8x", "--model", "ascend-910b3-8x",
        "--model", "mi100-4x", "--dir", str(lab))
    run("enroll", "-i", str(lab / "inventory.ini"))
    run("validate")
    # The H100 host's training proof (issue 24 item 5): a validated baseline, DCGM and NCCL
    # (the site profile of tests/labproof.py: the lab's all-reduce is an A100 run). The NPU
    # and MI100 hosts have no DCGM or gpu-burn to show: not training hosts.
    run("baseline", "create", "h100-ref", "--from-host", "gpu-01", "--pool", "train-h100",
        "--status", "validated")
    env["GPUFLEET_PROFILES"] = str(lab_profiles(tmp_path))
    run("evidence", "run", "gpu-01", "--kind", "dcgm", "--level", "2")
    run("evidence", "run", "gpu-01", "--kind", "nccl")
    run("validate")
    run("baseline", "create", "npu-2024", "--driver", "23.0.7", "--accel-firmware",
        "7.1.0.11.220", "--runtime", "8.0.RC3", "--pool", "train-910b")

    out = run("summary")
    assert _rows(out, "accelerators per vendor and model") == [
        ["amd", "Instinct MI100", "1", "4", "4"],
        ["huawei", "910B3", "1", "8", "8"],
        ["nvidia", "H100 80GB HBM3", "1", "8", "8"],
    ]
    # each vendor's accelerators (issue 28), wrapped at 80 columns
    assert ("3 hosts, 20 accelerators (8 Ascend NPUs, 8 NVIDIA GPUs, 4 AMD Instinct GPUs), "
            "20 available") in " ".join(out.split())
    per_profile = {r[0]: r[1:] for r in _rows(out, "available accelerators per profile and model")}
    assert per_profile["huawei 910B3"][0] == "8" and per_profile["amd Instinct MI100"][0] == "4"
    summary = json.loads(run("summary", "--json"))
    assert summary["accelerators"][1] == {"vendor": "huawei", "model": "910B3", "hosts": 1,
                                          "accelerators": 8, "available": 8}

    cap = json.loads(run("capacity", "--json"))
    test_rows = {r["model"]: (r["vendor"], r["free"]) for r in cap["rows"]
                 if r["profile"] == "test"}
    assert test_rows == {"H100 80GB HBM3": ("nvidia", 8), "huawei 910B3": ("huawei", 8),
                         "amd Instinct MI100": ("amd", 4)}
    assert cap["totals"]["free"] == 20
    out = run("capacity")
    title = next(ln.strip() for ln in out.splitlines() if "capacity at" in ln)
    # a model may wrap between its words, never inside one (gpufleet.cli.tables)
    shown = {(r[0], r[1], r[2]) for r in _rows(out, title)}
    assert {("amd Instinct MI100", "train-mi100", "inference"),
            ("huawei 910B3", "train-910b", "inference"),
            ("H100 80GB HBM3", "train-h100", "training-multinode")} <= shown

    drift = run("drift", code=1)
    assert "7.0.T10" in drift and "8.0.RC3" in drift and "gpu-02" in drift

    labels = json.loads(run("labels", "--json"))
    npu = next(r["labels"] for r in labels if r["host"] == "gpu-02")
    assert npu["accelerator"] == "huawei-Ascend910"
    assert npu["accelerator-type"] == "module-910b-8"
    assert npu["node.kubernetes.io/npu.chip.name"] == "910B3"
    assert npu["gpufleet.io/accelerator.vendor"] == "huawei"
    amd = next(r["labels"] for r in labels if r["host"] == "gpu-03")
    assert amd["amd.com/gpu.product-name"] == "AMD_Instinct_MI100"
    assert amd["gpufleet.io/accelerator.count"] == "4"
    run("labels")
