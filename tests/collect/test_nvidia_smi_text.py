"""``nvidia-smi -q`` text parser against real captures (gpud, nvidia_gpu_exporter bundles).

Expected values were read from the capture files by hand (grep), not produced by the parser.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpufleet.collect.nvidia_smi import parse_nvidia_smi_text
from gpufleet.domain.facts import EccErrors, RemappedRows
from gpufleet.errors import ParseError
from gpufleet.lab.captures import captures_dir, load_exporter_bundle

Q_DIR = captures_dir() / "nvidia-smi-q"
BUNDLE_DIR = captures_dir() / "nvidia-smi-csv"


def _read(name: str) -> str:
    return (Q_DIR / name).read_text(encoding="utf-8")


def _bundle_q(name: str, phase: str = "idle") -> str:
    return load_exporter_bundle(BUNDLE_DIR / name)[f"{phase} :: query (-q)"]


@dataclass(frozen=True)
class QCase:
    file: str
    gpus: int
    product: str
    driver: str
    cuda: str
    memory_total_mib: int
    pci0: str
    ecc_volatile0: tuple[int, int] | None
    remapped0: tuple[int, int, bool, bool] | None
    processes_total: int


GPUD = [
    QCase("gpud_nvidia-smi-query.535.129.03.out.0.valid.a10.txt", 1, "NVIDIA A10", "535.129.03",
          "12.2", 23028, "0000:07:00.0", (0, 0), (0, 4, True, False), 0),
    QCase("gpud_nvidia-smi-query.535.154.05.out.0.valid.4090.txt", 8, "NVIDIA GeForce RTX 4090",
          "535.154.05", "12.2", 24564, "0000:01:00.0", None, (0, 0, False, False), 8),
    QCase("gpud_nvidia-smi-query.535.154.05.out.0.valid.txt", 8, "NVIDIA GeForce RTX 4090",
          "535.154.05", "12.2", 24564, "0000:01:00.0", None, (0, 0, False, False), 7),
    QCase("gpud_nvidia-smi-query.535.154.05.out.1.valid.txt", 8, "NVIDIA GeForce RTX 4090",
          "535.154.05", "12.2", 24564, "0000:01:00.0", None, (0, 0, False, False), 2),
    QCase("gpud_nvidia-smi-query.535.154.05.out.2.valid.txt", 8, "NVIDIA GeForce RTX 4090",
          "535.154.05", "12.2", 24564, "0000:01:00.0", None, (0, 0, False, False), 2),
    QCase("gpud_nvidia-smi-query.535.154.05.out.3.valid.txt", 8, "NVIDIA GeForce RTX 4090",
          "535.154.05", "12.2", 24564, "0000:01:00.0", None, (0, 0, False, False), 3),
    QCase("gpud_nvidia-smi-query.535.161.08.out.0.valid.txt", 8, "NVIDIA H100 80GB HBM3",
          "535.161.08", "12.2", 81559, "0000:19:00.0", (0, 0), (0, 0, False, False), 0),
    QCase("gpud_nvidia-smi-query.535.183.01.out.0.valid.txt", 8, "NVIDIA H100 80GB HBM3",
          "535.183.01", "12.2", 81559, "0000:53:00.0", (0, 0), (0, 0, False, False), 1),
    # TITAN V: old "Single Bit / Double Bit" ECC layout, all N/A; Remapped Rows N/A (Volta).
    QCase("gpud_nvidia-smi-query.560.35.03.out.0.valid.txt", 1, "NVIDIA TITAN V", "560.35.03",
          "12.6", 12288, "0000:01:00.0", None, None, 3),
]


def _check(report_text: str, case: QCase) -> None:
    report = parse_nvidia_smi_text(report_text, source=case.file)
    assert report.attached_gpus == case.gpus
    assert len(report.gpus) == case.gpus
    assert [g.index for g in report.gpus] == list(range(case.gpus))
    assert report.driver_version == case.driver
    assert report.cuda_version == case.cuda
    gpu = report.gpus[0]
    assert gpu.product_name == case.product
    assert gpu.memory_total_mib == case.memory_total_mib
    assert gpu.pci_bus_id == case.pci0
    expected_ecc = None if case.ecc_volatile0 is None else EccErrors(
        correctable=case.ecc_volatile0[0], uncorrectable=case.ecc_volatile0[1])
    assert gpu.ecc_volatile == expected_ecc
    expected_rr = None if case.remapped0 is None else RemappedRows(
        correctable=case.remapped0[0], uncorrectable=case.remapped0[1],
        pending=case.remapped0[2], failure=case.remapped0[3])
    assert gpu.remapped_rows == expected_rr
    assert sum(len(g.processes) for g in report.gpus) == case.processes_total


@pytest.mark.parametrize("case", GPUD, ids=lambda c: c.file)
def test_gpud_capture(case: QCase) -> None:
    _check(_read(case.file), case)


def test_every_gpud_query_capture_is_covered() -> None:
    on_disk = {p.name for p in Q_DIR.glob("gpud_nvidia-smi-query.*.txt")}
    assert on_disk - {c.file for c in GPUD} == {
        "gpud_nvidia-smi-query.535.183.01.out.0.invalid.txt"}


def test_a10_with_pending_row_remap() -> None:
    gpu = parse_nvidia_smi_text(_read(GPUD[0].file)).gpus[0]
    assert gpu.remapped_rows == RemappedRows(correctable=0, uncorrectable=4, pending=True,
                                             failure=False)
    assert gpu.retired_pages is None  # all N/A on Ampere
    assert gpu.uuid == "GPU-73d12ef7-f589-f867-4259-c7090ab44736"
    assert gpu.serial == "1324521052681"
    assert gpu.vbios_version == "94.02.5C.00.04"
    assert (gpu.product_brand, gpu.architecture) == ("NVIDIA", "Ampere")
    assert gpu.persistence_mode is True
    assert gpu.mig_mode_current is None  # "N/A": the A10 has no MIG
    assert (gpu.ecc_mode_current, gpu.ecc_mode_pending) == (True, True)
    assert (gpu.memory_used_mib, gpu.memory_free_mib) == (4, 22511)
    assert (gpu.temperature_c, gpu.temperature_memory_c) == (33.0, None)
    assert (gpu.power_draw_w, gpu.power_limit_w) == (43.89, 150.0)
    assert (gpu.clocks_sm_mhz, gpu.clocks_mem_mhz, gpu.clocks_max_sm_mhz) == (225, 405, 1695)
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (4, 4)
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (16, 16)
    assert (gpu.fan_speed_pct, gpu.utilization_gpu_pct) == (0.0, 0.0)
    assert gpu.performance_state == "P8"


def test_processes_of_the_4090_host() -> None:
    report = parse_nvidia_smi_text(_read(GPUD[2].file))
    procs = report.gpus[0].processes
    assert [(p.pid, p.type, p.name, p.used_memory_mib) for p in procs] == [
        (58130, "C", "/usr/bin/python", 20322)]
    assert report.gpus[1].pci_bus_id == "0000:23:00.0"


def test_invalid_capture_is_refused_as_truncated() -> None:
    """gpud's ``.invalid`` capture: 'Attached GPUs : 8', then one GPU block that stops after
    'Clocks Event Reasons' (with garbled 'Invalid HW Slowdown' keys). It must not be taken
    for a one-GPU host."""
    name = "gpud_nvidia-smi-query.535.183.01.out.0.invalid.txt"
    with pytest.raises(ParseError) as info:
        parse_nvidia_smi_text(_read(name), source=name)
    err = info.value
    assert err.line == 91  # the last line of the file, where the output stops
    assert "1 of 8" in err.message
    assert str(err).startswith(f"{name}:91:")


@pytest.mark.parametrize(
    "name",
    ["gpud_nvidia-smi.525.125.06.out.0.valid.txt", "gpud_nvidia-smi.550.90.07.out.0.valid.txt"],
)
def test_default_table_is_not_q_output(name: str) -> None:
    with pytest.raises(ParseError, match="NVSMI LOG") as info:
        parse_nvidia_smi_text(_read(name), source=name)
    assert info.value.line == 1


@dataclass(frozen=True)
class BundleCase:
    file: str
    product: str
    driver: str
    memory_total_mib: int
    pci0: str
    persistence: bool | None
    mig: list[tuple[int, int, int, int]]  # (gpu instance, compute instance, MiB, SMs)
    processes: int


BUNDLES = [
    BundleCase("nvidia_gpu_exporter_linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05.txt",
               "NVIDIA GeForce RTX 2080 SUPER", "595.71.05", 8192, "0000:0c:00.0", False, [], 2),
    # R610 prints "Driver Version : 610.57.04 [Deprecated; ...]" and a "KMD Version" line.
    BundleCase("nvidia_gpu_exporter_linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt",
               "NVIDIA GeForce RTX 2080 SUPER", "610.57.04", 8192, "0000:0c:00.0", False, [], 2),
    BundleCase("nvidia_gpu_exporter_linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt",
               "NVIDIA GeForce RTX 4080 SUPER", "595.71.05", 16376, "0000:01:00.0", False, [], 5),
    BundleCase("nvidia_gpu_exporter_linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt",
               "NVIDIA H100 80GB HBM3", "590.48.01", 81559, "0000:00:09.0", True, [], 0),
    BundleCase("nvidia_gpu_exporter_linux-x86_64__nvidia-h100-mig__590.48.01.txt",
               "NVIDIA H100 80GB HBM3", "590.48.01", 81559, "0000:00:09.0", True,
               [(2, 0, 40448, 60), (3, 0, 20096, 32), (9, 0, 9984, 16), (10, 0, 9984, 16)], 0),
    BundleCase("nvidia_gpu_exporter_linux-x86_64__nvidia-h200-mig__590.48.01.txt",
               "NVIDIA H200", "590.48.01", 143771, "0000:83:00.0", True,
               [(2, 0, 71424, 16), (2, 1, 71424, 32), (3, 0, 33280, 32), (9, 0, 16384, 16),
                (10, 0, 16384, 16)], 0),
    BundleCase("nvidia_gpu_exporter_linux-x86_64__nvidia-h200__590.48.01.txt",
               "NVIDIA H200", "590.48.01", 143771, "0000:83:00.0", True, [], 0),
    BundleCase("nvidia_gpu_exporter_linux-x86_64__nvidia-l40s__595.80.txt",
               "NVIDIA L40S", "595.80", 46068, "0000:01:00.0", False, [], 0),
    BundleCase("nvidia_gpu_exporter_windows-x86_64__nvidia-geforce-rtx-2080-super__591.86.txt",
               "NVIDIA GeForce RTX 2080 SUPER", "591.86", 8192, "0000:0c:00.0", None, [], 10),
    BundleCase("nvidia_gpu_exporter_windows-x86_64__nvidia-geforce-rtx-2080-super__610.62.txt",
               "NVIDIA GeForce RTX 2080 SUPER", "610.62", 8192, "0000:0c:00.0", None, [], 19),
]


def test_every_bundle_is_covered() -> None:
    assert {p.name for p in BUNDLE_DIR.glob("*.txt")} == {c.file for c in BUNDLES}


@pytest.mark.parametrize("case", BUNDLES, ids=lambda c: c.file.split("__")[1])
def test_bundle_q_section(case: BundleCase) -> None:
    report = parse_nvidia_smi_text(_bundle_q(case.file), source=case.file)
    assert report.attached_gpus == 1 and len(report.gpus) == 1
    assert report.driver_version == case.driver
    gpu = report.gpus[0]
    assert gpu.product_name == case.product
    assert gpu.memory_total_mib == case.memory_total_mib
    assert gpu.pci_bus_id == case.pci0
    assert gpu.persistence_mode is case.persistence
    assert gpu.mig_mode_current is (True if case.mig else gpu.mig_mode_current)
    assert [(m.gpu_instance_id, m.compute_instance_id, m.memory_total_mib, m.sm_count)
            for m in gpu.mig_devices] == case.mig
    assert len(gpu.processes) == case.processes


def test_h100_under_load() -> None:
    gpu = parse_nvidia_smi_text(
        _bundle_q("nvidia_gpu_exporter_linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt",
                  "load")).gpus[0]
    # R590 has no plain "Power Draw": the average is taken, like --query-gpu power.draw.
    assert gpu.power_draw_w == 629.45
    assert gpu.power_limit_w == 700.0
    assert gpu.utilization_gpu_pct == 100.0
    assert gpu.ecc_volatile == EccErrors(correctable=0, uncorrectable=0)
    assert [(p.pid, p.type, p.used_memory_mib) for p in gpu.processes][:1] == [(11327, "C", 2566)]


def test_r610_power_limit_moved_under_ceiling() -> None:
    gpu = parse_nvidia_smi_text(_bundle_q(
        "nvidia_gpu_exporter_linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt")).gpus[0]
    assert gpu.power_limit_w == 250.0
    assert gpu.power_draw_w == 38.89  # average N/A -> instantaneous


def test_windows_wddm_process_memory_is_unknown() -> None:
    gpu = parse_nvidia_smi_text(_bundle_q(
        "nvidia_gpu_exporter_windows-x86_64__nvidia-geforce-rtx-2080-super__591.86.txt")).gpus[0]
    assert gpu.processes and all(p.used_memory_mib is None for p in gpu.processes)


_MINI = """\
==============NVSMI LOG==============

Timestamp                                 : Wed Sep 25 10:40:24 2024
Driver Version                            : 535.129.03
CUDA Version                              : 12.2

Attached GPUs                             : 1
GPU 00000000:07:00.0
    Product Name                          : NVIDIA A10
    FB Memory Usage
        Total                             : 23028 MiB
"""


def test_minimal_report() -> None:
    report = parse_nvidia_smi_text(_MINI)
    assert report.gpus[0].memory_total_mib == 23028
    assert report.timestamp == "Wed Sep 25 10:40:24 2024"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("", None),
        ("hello world\nthis is not nvidia-smi\n", 1),
        ("\n\nNVIDIA-SMI has failed because it couldn't communicate with the driver\n", 3),
        # a line indented between two levels (siblings of "Total" are at 8 spaces)
        (_MINI + "      Used                              : 4 MiB\n", 12),
        # stray top-level text that is neither "Key : Value" nor a GPU header
        (_MINI + "random trailing garbage\n", 12),
        # cut before the first GPU block
        (_MINI.split("GPU 0000")[0], 7),
        (_MINI.replace("    FB Memory Usage\n        Total                             : 23028 MiB",
                       "    FB Memory Usage\n        Total                             : lots"),
         11),
    ],
)
def test_garbage_raises_with_line(text: str, line: int | None) -> None:
    with pytest.raises(ParseError) as info:
        parse_nvidia_smi_text(text, source="nvsmi-q")
    assert info.value.line == line
    assert str(info.value).startswith("nvsmi-q")


def test_tabs_in_indentation_are_refused() -> None:
    with pytest.raises(ParseError, match="tab"):
        parse_nvidia_smi_text(_MINI.replace("    Product Name", "\tProduct Name"))
