"""Tests for ``nvidia-smi topo -m`` and ``nvidia-smi nvlink -s`` parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.collect.topology import parse_nvlink_status, parse_topo_matrix
from gpufleet.errors import ParseError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "nvidia-smi-topo"

# The multi-GPU matrix below is written by hand for this test (no permissively licensed
# multi-GPU capture exists in our fixture set). It mirrors the real layout of recent drivers:
# tab separated, ANSI underline around the header row, " X " on the diagonal, a
# "GPU NUMA ID" column preceded by an empty field, NIC rows with empty affinity cells, and
# the "NIC Legend" block mapping NIC0/NIC1 to RDMA device names.
TOPO_4GPU_2NIC = (
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV12\tNV12\tNV4\tPIX\tSYS\t0-31,64-95\t0\t\tN/A\n"
    "GPU1\tNV12\t X \tNV4\tNV12\tPXB\tSYS\t0-31,64-95\t0\t\tN/A\n"
    "GPU2\tNV12\tNV4\t X \tNV12\tSYS\tPIX\t32-63,96-127\t1\t\tN/A\n"
    "GPU3\tNV4\tNV12\tNV12\t X \tSYS\tPXB\t32-63,96-127\t1\t\tN/A\n"
    "NIC0\tPIX\tPXB\tSYS\tSYS\t X \tSYS\t\t\t\t\n"
    "NIC1\tSYS\tSYS\tPIX\tPXB\tSYS\t X \t\t\t\t\n"
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    "\n"
    "NIC Legend:\n"
    "\n"
    "  NIC0: mlx5_0\n"
    "  NIC1: mlx5_1\n"
    "\n"
)


@pytest.mark.parametrize(
    ("name", "cpus"),
    [
        ("nvidia_gpu_exporter_h100-80gb-hbm3_590.48.01_topo-m.txt", "0-19"),
        ("nvidia_gpu_exporter_h200-mig_590.48.01_topo-m.txt", "0-23"),
    ],
)
def test_single_gpu_captures_with_ansi_escapes(name: str, cpus: str) -> None:
    text = (FIX / name).read_text()
    assert "\x1b[4m" in text  # the capture really carries the escapes
    topo = parse_topo_matrix(text)
    assert topo.devices == ["GPU0"]
    assert topo.links == {"GPU0": {"GPU0": "X"}}
    assert topo.cpu_affinity == {"GPU0": cpus}
    assert topo.numa_affinity == {"GPU0": "0"}
    assert topo.nic_names == {}


def test_four_gpus_two_nics_inline_matrix() -> None:
    topo = parse_topo_matrix(TOPO_4GPU_2NIC)
    assert topo.devices == ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1"]
    assert topo.links["GPU0"] == {
        "GPU0": "X", "GPU1": "NV12", "GPU2": "NV12", "GPU3": "NV4", "NIC0": "PIX", "NIC1": "SYS",
    }
    assert topo.links["NIC1"]["GPU2"] == "PIX"
    assert topo.links["GPU3"]["NIC1"] == "PXB"
    assert topo.cpu_affinity == {
        "GPU0": "0-31,64-95", "GPU1": "0-31,64-95", "GPU2": "32-63,96-127", "GPU3": "32-63,96-127",
    }
    assert topo.numa_affinity == {"GPU0": "0", "GPU1": "0", "GPU2": "1", "GPU3": "1"}
    assert topo.nic_names == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert topo.links["GPU0"]["GPU1"] == "NV12"
    assert topo.links["GPU0"]["GPU3"] == "NV4"
    assert topo.links["GPU0"]["GPU0"] == "X"
    assert "GPU9" not in topo.links["GPU0"]


def test_spaces_instead_of_tabs() -> None:
    spaced = TOPO_4GPU_2NIC.replace("\x1b[4m", "").replace("\x1b[0m", "")
    spaced = "\n".join(line.replace("\t", "    ") for line in spaced.splitlines())
    topo = parse_topo_matrix(spaced)
    assert topo.links["GPU2"]["GPU3"] == "NV12"
    assert topo.cpu_affinity["GPU3"] == "32-63,96-127"
    assert topo.nic_names["NIC1"] == "mlx5_1"


def test_topo_garbage_raises_with_source_and_line() -> None:
    with pytest.raises(ParseError) as err:
        parse_topo_matrix("nvidia-smi: command not found\n", source="h1:topo-m")
    assert err.value.source == "h1:topo-m"
    assert err.value.line == 1
    assert str(err.value).startswith("h1:topo-m:1:")


def test_topo_unknown_link_type_raises() -> None:
    bad = TOPO_4GPU_2NIC.replace("GPU1\tNV12\t X \tNV4", "GPU1\tNV12\t X \tBOGUS")
    with pytest.raises(ParseError) as err:
        parse_topo_matrix(bad)
    assert err.value.line == 3
    assert "BOGUS" in err.value.message


def test_topo_truncated_matrix_raises() -> None:
    # Cut after the GPU1 row: GPU2.. columns have no rows.
    cut = "\n".join(TOPO_4GPU_2NIC.splitlines()[:3]) + "\n"
    with pytest.raises(ParseError, match="truncated"):
        parse_topo_matrix(cut)


def test_topo_short_row_raises() -> None:
    short = TOPO_4GPU_2NIC.replace("GPU3\tNV4\tNV12\tNV12\t X \tSYS\tPXB\t32-63,96-127\t1\t\tN/A",
                                   "GPU3\tNV4\tNV12")
    with pytest.raises(ParseError) as err:
        parse_topo_matrix(short)
    assert err.value.line == 5


def test_topo_empty_raises() -> None:
    with pytest.raises(ParseError):
        parse_topo_matrix("")


# ------------------------------------------------------------------------- nvlink -s


def test_nvlink_a100_eight_gpus() -> None:
    status = parse_nvlink_status((FIX / "gpud_nvidia-smi.nvlink.status.a100.txt").read_text())
    assert status.supported is True
    assert status.message is None
    assert [g.gpu_index for g in status.gpus] == list(range(8))
    assert status.gpus[0].uuid == "GPU-5269b708-678a-b1a8-60f0-c90406537486"
    assert status.gpus[7].uuid == "GPU-754035b4-4708-efcd-b261-623aea38bcad"
    for gpu in status.gpus:
        assert [link.link for link in gpu.links] == list(range(12))
        assert all(link.active and link.speed_gbps == 25.0 for link in gpu.links)


def test_nvlink_h100_eighteen_links() -> None:
    text = (FIX / "nvidia_gpu_exporter_h100-80gb-hbm3_590.48.01_nvlink-s.txt").read_text()
    status = parse_nvlink_status(text)
    assert len(status.gpus) == 1
    assert len(status.gpus[0].links) == 18
    assert status.gpus[0].links[17].speed_gbps == 26.562


@pytest.mark.parametrize(
    "name",
    ["nvidia_gpu_exporter_h100-mig_590.48.01_nvlink-s.txt",
     "nvidia_gpu_exporter_h200-mig_590.48.01_nvlink-s.txt"],
)
def test_nvlink_mig_mode_not_supported(name: str) -> None:
    status = parse_nvlink_status((FIX / name).read_text())
    assert status.supported is False
    assert status.message == "Nvlink queries are not supported for Devices in MIG mode"
    assert status.gpus[0].gpu_index == 0
    assert status.gpus[0].links == []


def test_nvlink_inactive_links() -> None:
    text = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)\n"
        "\t Link 0: 26.562 GB/s\n"
        "\t Link 1: <inactive>\n"
    )
    links = parse_nvlink_status(text).gpus[0].links
    assert links[0].active is True
    assert links[1].active is False
    assert links[1].speed_gbps is None


def test_nvlink_device_without_nvlink() -> None:
    # Message as printed for an L40S in the nvidia_gpu_exporter capture bundle.
    text = ("GPU 0: NVIDIA L40S (UUID: GPU-00000000-0000-0000-0000-000000000000)\n"
            "Device does not have or support Nvlink\n")
    status = parse_nvlink_status(text)
    assert status.supported is False
    assert status.message == "Device does not have or support Nvlink"


def test_nvlink_garbage_raises() -> None:
    with pytest.raises(ParseError) as err:
        parse_nvlink_status("Failed to initialize NVML: Driver/library version mismatch\n",
                            source="h1:nvlink-s")
    assert err.value.source == "h1:nvlink-s"
    assert err.value.line == 1


def test_nvlink_bad_link_value_raises() -> None:
    text = "GPU 0: NVIDIA A100 (UUID: GPU-x)\n\t Link 0: 25 GB/s\n\t Link 1: 2?\n"
    with pytest.raises(ParseError) as err:
        parse_nvlink_status(text)
    assert err.value.line == 3


def test_header_without_leading_corner_cell() -> None:
    text = TOPO_4GPU_2NIC.lstrip("\t")
    assert parse_topo_matrix(text).links["GPU1"]["GPU2"] == "NV4"


def test_header_not_matching_rows_raises() -> None:
    text = TOPO_4GPU_2NIC.replace("GPU0\t X ", "GPUX\t X ", 1)
    with pytest.raises(ParseError) as err:
        parse_topo_matrix(text)
    assert err.value.line == 1


def test_empty_tab_cells_keep_their_columns() -> None:
    # EDITED capture: the real H100 capture (590.48.01) with its CPU Affinity cell emptied
    # ("0-19" removed, the tab kept), as a driver prints when it cannot place the GPU.
    real = (FIX / "nvidia_gpu_exporter_h100-80gb-hbm3_590.48.01_topo-m.txt").read_text()
    assert "GPU0\t X \t0-19\t0\t\tN/A" in real
    edited = real.replace("GPU0\t X \t0-19\t0\t\tN/A", "GPU0\t X \t\t0\t\tN/A")
    topo = parse_topo_matrix(edited)
    assert topo.cpu_affinity == {}  # empty, not the NUMA node shifted left
    assert topo.numa_affinity == {"GPU0": "0"}


def test_empty_affinity_cell_in_a_multi_gpu_row() -> None:
    # The inline matrix with GPU2's CPU Affinity cell emptied (tab kept).
    edited = TOPO_4GPU_2NIC.replace("PIX\t32-63,96-127\t1\t\tN/A", "PIX\t\t1\t\tN/A")
    topo = parse_topo_matrix(edited)
    assert "GPU2" not in topo.cpu_affinity
    assert topo.numa_affinity["GPU2"] == "1"
    assert topo.cpu_affinity["GPU3"] == "32-63,96-127"
    assert topo.links["GPU2"]["NIC1"] == "PIX"


def test_too_many_values_after_the_links_raises() -> None:
    extra = TOPO_4GPU_2NIC.replace("PIX\t32-63,96-127\t1\t\tN/A", "PIX\t32-63\t1\tx\ty\tz")
    with pytest.raises(ParseError, match="values after the links"):
        parse_topo_matrix(extra)
