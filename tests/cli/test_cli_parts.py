"""``gpufleet parts``, ``remediate``, ``pool health-policy`` and the ladder in ``hosts show``,
on SQLite and PostgreSQL, with a sim lab: a GPU that failed on one host (marked unusable, sent
for RMA) and is then moved into another host keeps its history there, and failing again is
recognised (the lab moves the card's serial and UUID between hosts)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend

from gpufleet.lab.fleet import LabFleet, apply_change, create_fleet, write_inventory
from gpufleet.lab.templates import fault_gpu_index, move_gpu


@pytest.fixture(params=["sqlite", "postgres"])
def cli(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    return cli_for_backend(request, tmp_path, "alice")


def test_a_moved_gpu_keeps_its_history_and_is_recognised(cli: Cli, tmp_path: Path) -> None:
    d = tmp_path / "lab"
    d.mkdir()
    fl = create_fleet(2, models=["h100-8x"], faults={})
    fl.save(d)
    write_inventory(fl, d / "inventory.ini", transport="sim", lab_dir=d)
    cli.run("enroll", "-i", str(d / "inventory.ini"))
    cli.run("validate")
    pool = fl.host("gpu-01").spec.pool
    policy = cli.json("pool", "health-policy", pool, "--gpu-fault", "partial")
    assert policy["gpu_fault"] == "partial" and policy["holders"] == "refuse"
    assert policy["fallback_reboot"] is True
    off = cli.json("pool", "health-policy", pool, "--fallback-reboot", "off")
    assert off["fallback_reboot"] is False and off["gpu_fault"] == "partial"
    cli.run("pool", "health-policy", pool, "--fallback-reboot", "maybe", code=2)
    assert cli.json("pool", "health-policy", pool, "--fallback-reboot", "on")["fallback_reboot"]

    # GPU i of gpu-01 shows uncorrectable ECC: unusable, the host stays available with 7
    apply_change(LabFleet.load(d), "gpu-01", add_faults=["ecc-uncorrectable"]).save(d)
    cli.run("validate", code=0)
    i = fault_gpu_index(LabFleet.load(d).host("gpu-01"))
    shown = cli.json("hosts", "show", "gpu-01")
    assert shown["host"]["state"] == "available" and shown["usable_gpus"] == 7
    (bad,) = shown["unusable_gpus"]
    assert bad["index"] == i
    serial = bad["serial"]
    assert shown["labels"]["nvidia.com/gpu.count"] == "7"

    # the card goes back to the vendor: maintenance with the ticket and ETA, in summary too
    rep = cli.json(
        "remediate",
        "gpu-01",
        "--action",
        "service-request",
        "--gpu",
        str(i),
        "--ticket",
        "RMA-123",
        "--eta",
        "2030-01-02T08:00",
    )
    assert rep["ok"] and rep["state"] == "maintenance"
    assert "RMA-123" in cli.run("hosts", "show", "gpu-01").stdout
    back = cli.json("summary")["back"]
    assert back == [{"host": "gpu-01", "state": "maintenance", "eta": "2030-01-02T08:00:00+00:00"}]
    ladder = cli.json("hosts", "show", "gpu-01")["remediations"]
    assert [(r["action"], r["outcome"], r["ticket"]) for r in ladder] == [
        ("service-request", "ok", "RMA-123")
    ]

    # "repaired", the same card lands in gpu-02 and fails there again
    moved = move_gpu(LabFleet.load(d), "gpu-01", "gpu-02")
    moved = apply_change(moved, "gpu-01", clear_faults=["all"])
    apply_change(moved, "gpu-02", add_faults=["ecc-uncorrectable"]).save(d)
    cli.run("maintenance", "off", "gpu-01", "--reason", "new card")
    cli.run("validate", code=0)
    two = cli.json("hosts", "show", "gpu-02")
    assert two["usable_gpus"] == 7 and two["unusable_gpus"][0]["serial"] == serial
    recognised = [e["message"] for e in two["events"] if e["kind"] == "gpu-health"]
    assert any(f"this card (serial {serial}) failed before on gpu-01" in m for m in recognised)
    assert cli.json("hosts", "show", "gpu-01")["usable_gpus"] is None  # its new card is fine

    hist = cli.json("parts", "show", serial)
    assert hist["hosts"] == ["gpu-01", "gpu-02"]
    assert [(e["host"], e["kind"]) for e in hist["events"] if e["kind"] != "evidence"] == [
        ("gpu-01", "unusable"),
        ("gpu-01", "rma"),
        ("gpu-02", "unusable"),
    ]
    listed = {r["serial"]: r for r in cli.json("parts", "list", "--with-history")}
    assert listed[serial]["hosts"] == 2 and listed[serial]["host"] == "gpu-02"
    assert listed[serial]["events"] == 3
    cli.run("parts", "show", "NO-SUCH-SERIAL", code=4)
