"""Issue 29 item 5: every vendor's host page looks right, on SQLite and PostgreSQL.

A lab fleet of an H100 host, an Ascend 910B3 host with NPU 5 in Alarm, an AMD MI100 host and
a MetaX C500 host (issue 28's vendors: the lab replays the real captures) is enrolled and
collected through the CLI. ``hosts show`` prints each vendor's stack (driver, firmware,
runtime, tool) and an accelerator table (model, memory, temperature, power, health, error
codes; serial/bus/firmware/UUID), and ``--json`` carries the same (``accelerators``,
``software``); the NVIDIA phrases ("CUDA", "NVIDIA GPUs on PCI", nvidia-smi's failure) appear
on the NVIDIA host only, though the other hosts' facts record nvidia-smi as missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat

MODELS = ["h100-8x", "ascend-910b3-8x", "mi100-4x", "c500-8x"]
NVIDIA_PHRASES = ("CUDA", "NVIDIA", "nvidia-smi", "on PCI", "VBIOS 96.")


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, "alice")
    c.env["COLUMNS"] = "200"
    lab = c.tmp / "lab"
    models = [a for m in MODELS for a in ("--model", m)]
    c.run("lab", "create", "--hosts", "4", *models, "--no-default-faults",
          "--fault", "gpu-02=npu-alarm:5", "--dir", str(lab))
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    c.run("collect")
    yield c


def _rows(text: str, title: str) -> list[list[str]]:
    """The rows of the table titled ``title`` (cells split on runs of two spaces)."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip() == title)
    out: list[list[str]] = []
    for ln in lines[start + 4:]:
        if not ln.strip():
            break
        out.append([c.strip() for c in ln.strip().split("  ") if c.strip()])
    return out


def test_every_vendor_has_its_accelerator_table_and_stack(gf: Cli) -> None:
    pages = {h: gf.run("hosts", "show", h).stdout for h in ("gpu-01", "gpu-02", "gpu-03",
                                                            "gpu-04")}
    docs = {h: gf.json("hosts", "show", h) for h in pages}

    # NVIDIA: unchanged words, from the same table code
    assert "nvidia: driver 590.48.01, CUDA 13.1; 8 GPUs (NVIDIA H100 80GB HBM3), 8 on PCI" \
        in flat(pages["gpu-01"])
    assert len(_rows(pages["gpu-01"], "GPUs")) == 8

    # Ascend: CANN and npu-smi, NPUs, NPU 5 in alarm with its codes
    ascend = pages["gpu-02"]
    assert "huawei: driver 23.0.7, firmware 7.1.0.11.220, CANN 7.0.T10, npu-smi " \
        "24.1.rc1.b030; 8 NPUs (910B3)" in flat(ascend)
    npus = _rows(ascend, "NPUs")
    assert len(npus) == 8
    assert npus[0][:6] == ["0", "910B3", "65536 MiB", "43C", "101.8W", "ok"]
    assert npus[5][5] == "alarm" and npus[5][6].startswith("A4025021, 8C03A000, 8C084E00")
    ids = _rows(ascend, "NPU identifiers")
    assert [r[1:3] for r in ids][:2] == [["-", "0000:c1:00.0"], ["-", "0000:c2:00.0"]]

    # AMD: ROCm stack, GPUs with the VBIOS picked from the firmware table
    amd = pages["gpu-03"]
    assert "amd: driver 6.3.6, ROCM -; 4 GPUs (Instinct MI100)" in flat(amd)
    gpus = _rows(amd, "GPUs")
    assert gpus[0][:5] == ["0", "Instinct MI100", "32752 MiB", "55C", "36W"]
    amd_ids = _rows(amd, "GPU identifiers")
    assert amd_ids[0] == ["0", "-", "0000:83:00.0", "113-D3431401-101", "0x79ccd55167a2124a"]

    # MetaX (issue 28): MACA and mx-smi, health ok
    metax = pages["gpu-04"]
    assert "metax: driver 3.4.4, firmware 1.30.0.0, MACA 3.3.0.15, mx-smi 2.2.9; 8 GPUs " \
        "(C500)" in flat(metax)
    assert {r[5] for r in _rows(metax, "GPUs")} == {"ok"}

    for h in ("gpu-02", "gpu-03", "gpu-04"):
        # the facts say nvidia-smi is missing; the page does not repeat it
        assert docs[h]["facts"]["nvidia_smi_error"]
        assert docs[h]["summary"]["nvidia_smi_error"] is None
        for phrase in NVIDIA_PHRASES:
            assert phrase not in pages[h], (h, phrase)

    # --json: one shape for every vendor, the same values the page shows
    by = {h: (d["software"], d["accelerators"]) for h, d in docs.items()}
    assert [(s["vendor"], s["noun"], s["count"], s["runtime_name"], s["runtime"])
            for h in docs for s in by[h][0]] == [
        ("nvidia", "GPUs", 8, "CUDA", "13.1"),
        ("huawei", "NPUs", 8, "CANN", "7.0.T10"),
        ("amd", "GPUs", 4, "ROCM", None),
        ("metax", "GPUs", 8, "MACA", "3.3.0.15"),
    ]
    npu5 = by["gpu-02"][1][5]
    assert (npu5["vendor"], npu5["index"], npu5["health"]) == ("huawei", 5, "alarm")
    assert npu5["error_codes"][:3] == ["A4025021", "8C03A000", "8C084E00"]
    assert npu5["bus_id"] == "0000:02:00.0" and npu5["memory_total_mib"] == 65536
    mi = by["gpu-03"][1][0]
    assert (mi["uuid"], mi["power_w"], mi["firmware"]["VBIOS"]) == (
        "0x79ccd55167a2124a", 36.0, "113-D3431401-101")
    assert [a["model"] for a in by["gpu-04"][1]] == ["C500"] * 8
    assert docs["gpu-03"]["gpus"] == []  # nvidia-smi's GPUs stay where they were
