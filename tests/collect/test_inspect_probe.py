"""The inspection probe (issue 10 item 2): the real POSIX sh script run against a sysroot built
from the captured H100 ``/sys/class/infiniband`` tree, and the pure parser on real captures
(the nvidia_gpu_exporter H100 ``--query-gpu`` CSV, gpud's iso dmesg with Xid lines)."""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpufleet.collect.inspect import (
    PROBE_FIELDS,
    parse_df,
    parse_gpus,
    parse_ports,
    parse_probe,
    probe_script,
    split_probe,
)
from gpufleet.errors import ParseError
from gpufleet.lab.captures import load_exporter_bundle

CAPTURED = Path(__file__).parents[1] / "fixtures" / "captured"
H100 = (
    CAPTURED
    / "nvidia-smi-csv/nvidia_gpu_exporter_linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
)
AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _load_csv() -> str:
    return load_exporter_bundle(H100)["load :: query-gpu (csv, what the exporter parses)"]


def test_query_gpu_capture_parses_to_a_sample() -> None:
    (g,) = parse_gpus(_load_csv() + "@@rc 0\n")
    assert (g.index, g.model, g.pci_bus_id) == (0, "NVIDIA H100 80GB HBM3", "0000:00:09.0")
    assert (g.temperature_c, g.power_w, g.sm_clock_mhz) == (59, 631.95, 1980)
    assert (g.utilization_gpu_pct, g.ecc_volatile_uncorrectable, g.remap_pending) == (100, 0, False)
    assert (g.pcie_width, g.pcie_width_max, g.reasons) == (16, 16, frozenset())
    assert g.retired_pending is None  # [N/A] on Hopper: not collected, not "no"


def test_nvidia_smi_failure_leaves_gpus_unknown_and_names_it() -> None:
    text = (
        "@@probe gpu\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
        "driver.\n@@rc 9\n@@probe kmsg\n@@probe end\n"
    )
    res = parse_probe(text, AT, source="gpu-07")
    assert res.sample.gpus is None
    assert (
        "gpu-07: nvidia-smi --query-gpu: nvidia-smi exited 9: NVIDIA-SMI has failed"
        in (res.problems[0])
    )
    with pytest.raises(ParseError, match=r"expected 36 columns, got 2"):
        parse_gpus("0, 59\n@@rc 0\n")  # no header: the probe's own field order
    assert len(PROBE_FIELDS) == 36


def test_xids_are_counted_once_across_sweeps() -> None:
    log = (CAPTURED / "kernel-log/gpud_dmesg-time-format-iso.log").read_text()
    xids = [line for line in log.splitlines() if "NVRM: Xid" in line]
    text = "@@probe gpu\n@@rc 0\n@@probe kmsg\n" + "\n".join(xids) + "\n@@probe end\n"
    first = parse_probe(text, AT)
    assert len(first.sample.xids) == len(xids) > 0
    assert first.kmsg_cursor is not None
    again = parse_probe(text, AT, kmsg_since=first.kmsg_cursor)
    assert again.sample.xids == () and again.kmsg_cursor == first.kmsg_cursor


def test_ports_and_df_and_garbage() -> None:
    ports = parse_ports("port mlx5_0/1 state=ACTIVE link_downed=0 symbol_error=3\n")
    assert ports[0].name == "mlx5_0/1" and ports[0].counters == {
        "link_downed": 0,
        "symbol_error": 3,
    }
    with pytest.raises(ParseError, match=r"ib:1: port mlx5_0/1: link_downed is not a number"):
        parse_ports("port mlx5_0/1 state=ACTIVE link_downed=lots\n", "ib")
    (d,) = parse_df(
        "Filesystem 1024-blocks Used Available Capacity Mounted on\n"
        "/dev/nvme0n1p2 1000 990 10 99% /data set\n"
    )
    assert (d.path, d.used_pct) == ("/data set", 99.0)
    with pytest.raises(ParseError, match="not a complete probe answer"):
        split_probe("@@probe gpu\n0, 1\n")


def test_the_real_script_reads_a_sysroot(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(CAPTURED / "ib/gpud_sys-class-infiniband-h100.0", root / "sys/class/infiniband")
    (root / "proc").mkdir()
    (root / "proc/uptime").write_text("1234.50 999.00\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    csv = tmp_path / "gpu.csv"
    csv.write_text(_load_csv())
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\ncat '{csv}'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "GPUFLEET_SYSROOT": str(root)}
    out = subprocess.run(
        ["sh", "-c", probe_script([str(tmp_path)])],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    res = parse_probe(out, AT)
    assert res.problems == ()
    assert res.sample.gpus is not None and res.sample.gpus[0].sm_clock_mhz == 1980
    names = [p.name for p in res.sample.ports]
    assert "mlx5_0/1" in names and "mlx5_bond_0/1" in names and len(names) == 9
    assert all(p.state == "ACTIVE" for p in res.sample.ports)
    assert res.sample.ports[0].counters["link_downed"] == 0
    assert res.sample.uptime_s == 1234.5
    assert res.sample.driver_age_s is None  # no nvidia module in this sysroot
    (disk,) = res.sample.disks  # df of the given path: its file system's mount point
    assert disk.size_kib > disk.used_kib > 0 and str(tmp_path).startswith(disk.path)


def test_the_real_script_reads_the_driver_load_time(tmp_path: Path) -> None:
    """The ``driver`` part: the host's clock minus the mtime of ``/sys/module/nvidia`` (sysfs
    makes the directory when the module loads), by the real probe under ``sh``."""
    import time

    root = tmp_path / "root"
    module = root / "sys/module/nvidia"
    module.mkdir(parents=True)
    loaded = time.time() - 120
    os.utime(module, (loaded, loaded))
    (root / "proc").mkdir()
    (root / "proc/uptime").write_text("864000.00 999.00\n")
    env = {"PATH": os.environ["PATH"], "GPUFLEET_SYSROOT": str(root)}
    out = subprocess.run(
        ["sh", "-c", probe_script([str(tmp_path)])],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    res = parse_probe(out, AT)
    assert res.sample.uptime_s == 864000.0
    assert res.sample.driver_age_s is not None and 119 <= res.sample.driver_age_s <= 180
    assert res.sample.settled_s == res.sample.driver_age_s  # grace counts from the reload
    bad = parse_probe("@@probe driver\nsoon\n@@probe end\n", AT)
    assert bad.sample.driver_age_s is None
    assert any("driver load age" in p and "'soon'" in p for p in bad.problems)
