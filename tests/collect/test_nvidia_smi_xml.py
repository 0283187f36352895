"""``nvidia-smi -q -x`` parser against every permitted real capture in tests/fixtures/captured.

Expected values in the tables were read from the XML files by hand (grep), not produced by
the parser.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpufleet.collect.nvidia_smi import normalize_pci_bus_id, parse_nvidia_smi_xml
from gpufleet.domain.facts import EccErrors, RemappedRows, RetiredPages
from gpufleet.errors import ParseError
from gpufleet.lab.captures import captures_dir

XML_DIR = captures_dir() / "nvidia-smi-xml"


def _read(name: str) -> str:
    return (XML_DIR / name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class XmlCase:
    file: str
    gpus: int
    product: str
    memory_total_mib: int
    driver: str | None
    cuda: str | None
    pci0: str
    ecc_mode: bool | None
    ecc_volatile: tuple[int, int] | None  # (correctable, uncorrectable) of GPU 0
    remapped: tuple[int, int, bool, bool] | None
    retired: tuple[int, int, bool] | None
    mig_devices: int
    processes0: int
    power_draw_w: float | None
    power_limit_w: float | None
    temperature_c: float | None


CASES = [
    XmlCase("datakit_gtx-1050-1.xml", 1, "NVIDIA GeForce GTX 1050", 4096, "515.65.01", "11.7",
            "0000:01:00.0", None, None, None, None, 0, 2, None, None, 44.0),
    XmlCase("datakit_gtx-1card.xml", 1, "Tesla V100-PCIE-32GB", 32510, "460.39", "11.2",
            "0000:21:01.0", True, (0, 0), None, (0, 0, False), 0, 4, 170.16, 250.0, 66.0),
    XmlCase("datakit_gtx-8card.xml", 8, "Tesla V100S-PCIE-32GB", 32510, "460.73.01", "11.2",
            "0000:00:0d.0", True, (0, 0), None, (0, 0, False), 0, 1, 232.80, 250.0, 66.0),
    XmlCase("telegraf_3090-v13.xml", 1, "NVIDIA GeForce RTX 3090", 24576, "590.44.01", "13.1",
            "0000:09:00.0", None, None, None, None, 0, 0, 35.06, 350.0, 32.0),
    # attached_gpus says 4 but the contributor kept one <gpu>; its 4 MIG devices are there.
    XmlCase("telegraf_a100-sxm4-v12.xml", 1, "NVIDIA A100-SXM4-80GB", 81920, "535.54.03", "12.2",
            "0000:01:00.0", True, (0, 0), None, None, 4, 0, 67.03, 500.0, 27.0),
    XmlCase("telegraf_a10g.xml", 1, "NVIDIA A10G", 23028, "515.105.01", "11.7",
            "0000:00:1e.0", True, (0, 0), (0, 0, False, False), None, 0, 1, 25.58, 300.0, 17.0),
    XmlCase("telegraf_dual_2070-v13.xml", 2, "NVIDIA GeForce RTX 2070", 8192, "590.44.01", "13.1",
            "0000:01:00.0", None, None, None, None, 0, 0, 9.23, 175.0, 14.0),
    XmlCase("telegraf_dual_2080-v13.xml", 2, "NVIDIA GeForce RTX 2080", 8192, "590.44.01", "13.1",
            "0000:01:00.0", None, None, None, None, 0, 0, 1.00, 215.0, 15.0),
    XmlCase("telegraf_dual_a5000-v13.xml", 2, "NVIDIA RTX A5000", 24564, "590.44.01", "13.1",
            "0000:81:00.0", False, None, (0, 0, False, False), None, 0, 1, 6.41, 230.0, 13.0),
    XmlCase("telegraf_gt-1030.xml", 1, "NVIDIA GeForce GT 1030", 1998, "470.74", "11.4",
            "0000:2d:00.0", None, None, None, None, 0, 10, None, 30.0, 36.0),
    XmlCase("telegraf_gtx-1070-ti.xml", 1, "GeForce GTX 1070 Ti", 4096, None, None,
            "0000:01:00.0", None, None, None, None, 0, 0, None, None, 39.0),
    XmlCase("telegraf_gtx-1660-ti.xml", 1, "Graphics Device", 5912, "418.43", "10.1",
            "0000:43:00.0", None, None, None, None, 0, 0, 8.93, 130.0, 40.0),
    XmlCase("telegraf_pro-6000-maxq-blackwell-v13.xml", 1,
            "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 97887, "590.44.01", "13.1",
            "0000:61:00.0", False, None, (0, 0, False, False), None, 0, 1, 3.97, 300.0, 24.0),
    XmlCase("telegraf_quadro-p2000-v12.xml", 1, "Quadro P2000", 5120, "525.125.06", "12.0",
            "0000:17:00.0", None, None, None, None, 0, 0, 4.61, 75.0, 34.0),
    XmlCase("telegraf_quadro-p400.xml", 1, "Quadro P400", 1998, "418.43", "10.1",
            "0000:43:00.0", None, None, None, None, 0, 0, None, None, 33.0),
    XmlCase("telegraf_rtx-3060-v12.xml", 1, "NVIDIA GeForce RTX 3060", 12288, "570.124.04",
            "12.8", "0000:2d:00.0", None, None, None, None, 0, 0, 11.60, 170.0, 42.0),
    XmlCase("telegraf_rtx-3080-v12.xml", 1, "NVIDIA GeForce RTX 3080", 10240, "536.40", "12.2",
            "0000:04:00.0", None, None, None, None, 0, 5, 22.78, 336.0, 31.0),
    XmlCase("telegraf_rtx-3080-v13.xml", 1, "NVIDIA GeForce RTX 3080", 10240, "595.58.03", "13.2",
            "0000:0c:00.0", None, None, None, None, 0, 0, 139.62, 320.0, 27.0),
    # power_limit is the enforced 200 W, not the 350 W default.
    XmlCase("telegraf_rtx-3090-v12.xml", 1, "NVIDIA GeForce RTX 3090", 24576, "525.147.05",
            "12.0", "0000:00:10.0", None, None, None, None, 0, 0, 27.23, 200.0, 37.0),
    XmlCase("telegraf_rtx-4000-sff-ada-v13.xml", 1, "NVIDIA RTX 4000 SFF Ada Generation", 20475,
            "595.84", "13.2", "0000:06:00.0", False, None, (0, 0, False, False), None, 0, 4,
            8.81, 70.0, 38.0),
    XmlCase("telegraf_tesla-t4.xml", 1, "Tesla T4", 15360, "515.105.01", "11.7", "0000:00:1e.0",
            True, (0, 0), None, (0, 0, False), 0, 2, 26.78, 70.0, 40.0),
    XmlCase("telegraf_tesla_p4.xml", 1, "GRID P4-1Q", 1024, "513.46", "11.6", "0000:00:0b.0",
            None, None, None, None, 0, 13, None, None, 0.0),
    XmlCase("telegraf_tesla_t4.xml", 1, "Tesla T4", 15360, "512.78", "11.6", "0000:01:00.0",
            True, (0, 0), None, (0, 0, False), 0, 15, 13.08, 70.0, 31.0),
    # NVIDIA/k8s-test-infra (issue 27): whole captures of real nodes (hw-) and mock-NVML ones
    XmlCase("k8s-test-infra_hw-qx-a100.xml", 1, "NVIDIA A100-SXM4-40GB", 40960, "570.148.08",
            "12.8", "0000:06:00.0", True, (0, 0), (0, 0, False, False), None, 0, 0, 49.68,
            400.0, 33.0),  # average power N/A: the instant reading
    XmlCase("k8s-test-infra_hw-qx-b200.xml", 8, "NVIDIA B200", 183359, "580.105.08", "13.0",
            "0000:8f:00.0", True, (0, 0), (0, 0, False, False), None, 0, 0, 195.68, 1000.0,
            39.0),
    XmlCase("k8s-test-infra_hw-qx-gb200.xml", 4, "NVIDIA GB200", 189471, "580.173.02", "13.0",
            "0000:29:00.0", True, (0, 0), (0, 0, False, False), None, 0, 0, 165.93, 1200.0,
            27.0),
    XmlCase("k8s-test-infra_hw-qx-h100.xml", 8, "NVIDIA H100 80GB HBM3", 81559, "580.105.08",
            "13.0", "0000:53:00.0", True, (0, 0), (0, 0, False, False), None, 0, 0, 68.57,
            700.0, 29.0),
    XmlCase("k8s-test-infra_qx-a100-healthy.xml", 2, "NVIDIA A100-SXM4-40GB", 40960,
            "550.163.01", "12.4", "0000:07:00.0", True, (0, 0), (0, 0, False, False),
            (0, 0, False), 0, 0, 226.54, 400.0, 63.0),
    XmlCase("k8s-test-infra_qx-gb200-ecc-injected.xml", 2, "NVIDIA GB200", 196608, "580.65.06",
            "13.0", "0000:0a:00.0", True, (0, 5), (0, 1, False, True), (0, 0, False), 0, 0,
            618.35, 1000.0, 63.0),
    XmlCase("k8s-test-infra_qx-gb200-fabric-degraded.xml", 2, "NVIDIA GB200", 196608,
            "580.65.06", "13.0", "0000:0a:00.0", True, (0, 0), (0, 0, False, False),
            (0, 0, False), 0, 0, 145.0, 1000.0, 36.0),
    XmlCase("k8s-test-infra_qx-gb200-healthy.xml", 2, "NVIDIA GB200", 196608, "580.65.06",
            "13.0", "0000:0a:00.0", True, (0, 0), (0, 0, False, False), (0, 0, False), 0, 0,
            618.35, 1000.0, 63.0),
    XmlCase("k8s-test-infra_qx-gb200-lost.xml", 2, "NVIDIA GB200", 196608, "580.65.06",
            "13.0", "0000:0a:00.0", True, (0, 5), (0, 1, False, True), (0, 0, False), 0, 0,
            618.35, 1000.0, 63.0),
    XmlCase("k8s-test-infra_qx-gb200-throttle-counters.xml", 2, "NVIDIA GB200", 196608,
            "580.65.06", "13.0", "0000:0a:00.0", True, (0, 0), (0, 0, False, False),
            (0, 0, False), 0, 0, 145.0, 1000.0, 36.0),
]


def test_every_copied_capture_has_a_case() -> None:
    on_disk = {p.name for p in XML_DIR.glob("*.xml")}
    assert on_disk == {c.file for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.file)
def test_capture(case: XmlCase) -> None:
    report = parse_nvidia_smi_xml(_read(case.file), source=case.file)
    assert len(report.gpus) == case.gpus
    assert [g.index for g in report.gpus] == list(range(case.gpus))
    assert report.driver_version == case.driver
    assert report.cuda_version == case.cuda
    gpu = report.gpus[0]
    assert gpu.product_name == case.product
    assert gpu.memory_total_mib == case.memory_total_mib
    assert gpu.pci_bus_id == case.pci0
    assert gpu.ecc_mode_current is case.ecc_mode
    expected_ecc = (
        None if case.ecc_volatile is None
        else EccErrors(correctable=case.ecc_volatile[0], uncorrectable=case.ecc_volatile[1])
    )
    assert gpu.ecc_volatile == expected_ecc
    expected_rr = None if case.remapped is None else RemappedRows(
        correctable=case.remapped[0], uncorrectable=case.remapped[1],
        pending=case.remapped[2], failure=case.remapped[3])
    assert gpu.remapped_rows == expected_rr
    expected_rp = None if case.retired is None else RetiredPages(
        single_bit=case.retired[0], double_bit=case.retired[1], pending=case.retired[2])
    assert gpu.retired_pages == expected_rp
    assert len(gpu.mig_devices) == case.mig_devices
    assert len(gpu.processes) == case.processes0
    assert gpu.power_draw_w == case.power_draw_w
    assert gpu.power_limit_w == case.power_limit_w
    assert gpu.temperature_c == case.temperature_c


def test_a100_mig_devices() -> None:
    gpu = parse_nvidia_smi_xml(_read("telegraf_a100-sxm4-v12.xml")).gpus[0]
    assert gpu.mig_mode_current is True and gpu.mig_mode_pending is True
    assert [(m.gpu_instance_id, m.compute_instance_id) for m in gpu.mig_devices] == [
        (3, 0), (4, 0), (5, 0), (6, 0)]
    assert {m.memory_total_mib for m in gpu.mig_devices} == {19968}
    assert {m.sm_count for m in gpu.mig_devices} == {14}
    assert gpu.utilization_gpu_pct is None  # "N/A" in MIG mode
    assert gpu.temperature_memory_c == 44.0


def test_a100_full_record() -> None:
    gpu = parse_nvidia_smi_xml(_read("telegraf_a100-sxm4-v12.xml")).gpus[0]
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu.serial == "1650522003820"
    assert gpu.product_brand == "NVIDIA"
    assert gpu.architecture == "Ampere"
    assert gpu.vbios_version == "92.00.36.00.02"
    assert (gpu.memory_used_mib, gpu.memory_free_mib) == (50, 80999)
    assert gpu.persistence_mode is False
    assert gpu.ecc_mode_pending is True
    assert gpu.ecc_aggregate == EccErrors(correctable=0, uncorrectable=0)
    assert (gpu.clocks_sm_mhz, gpu.clocks_mem_mhz, gpu.clocks_max_sm_mhz) == (1275, 1593, 1410)
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (4, 4)
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (16, 16)
    assert gpu.fan_speed_pct is None
    assert gpu.performance_state == "P0"


def test_eight_gpus_in_file_order_with_normalised_bus_ids() -> None:
    report = parse_nvidia_smi_xml(_read("datakit_gtx-8card.xml"))
    assert report.attached_gpus == 8
    # nvidia-smi prints "00000000:00:0D.0": 8-digit domain, upper-case hex.
    assert report.gpus[0].pci_bus_id == "0000:00:0d.0"
    assert all(g.pci_bus_id and g.pci_bus_id.startswith("0000:") for g in report.gpus)
    assert [g.utilization_gpu_pct for g in report.gpus][:2] == [97.0, 75.0]


def test_processes() -> None:
    report = parse_nvidia_smi_xml(_read("telegraf_dual_a5000-v13.xml"))
    first, second = (g.processes for g in report.gpus)
    assert [(p.pid, p.type, p.used_memory_mib) for p in first] == [(100477, "C", 22430)]
    assert first[0].name == "/root/src/llama.cpp/build/bin/llama-server"
    assert [p.used_memory_mib for p in second] == [17246]


def test_minimal_old_schema_takes_bus_id_from_gpu_id_attribute() -> None:
    report = parse_nvidia_smi_xml(_read("telegraf_gtx-1070-ti.xml"))
    assert report.attached_gpus is None
    gpu = report.gpus[0]
    assert gpu.pci_bus_id == "0000:01:00.0"
    assert gpu.fan_speed_pct == 100.0
    assert gpu.pcie_gen_current == 1 and gpu.pcie_width_current == 16
    assert gpu.persistence_mode is None and gpu.ecc_volatile is None


def test_new_schema_ecc_counts_are_summed_over_locations() -> None:
    text = _read("telegraf_a10g.xml")
    volatile = text.index("<volatile>")
    head, tail = text[:volatile], text[volatile:]
    tail = (tail.replace("<sram_correctable>0<", "<sram_correctable>3<", 1)
                .replace("<dram_correctable>0<", "<dram_correctable>2<", 1)
                .replace("<dram_uncorrectable>0<", "<dram_uncorrectable>1<", 1))
    gpu = parse_nvidia_smi_xml(head + tail).gpus[0]
    assert gpu.ecc_volatile == EccErrors(correctable=5, uncorrectable=1)
    assert gpu.ecc_aggregate == EccErrors(correctable=0, uncorrectable=0)


def test_v13_sram_parity_and_secded_both_count_as_uncorrectable() -> None:
    text = _read("telegraf_rtx-4000-sff-ada-v13.xml")
    volatile = text.index("<volatile>")
    head, tail = text[:volatile], text[volatile:]
    tail = (tail.replace("<sram_uncorrectable_parity>N/A<", "<sram_uncorrectable_parity>2<", 1)
                .replace("<sram_uncorrectable_secded>N/A<", "<sram_uncorrectable_secded>5<", 1))
    gpu = parse_nvidia_smi_xml(head + tail).gpus[0]
    # the correctable counters stay N/A: unknown, not zero
    assert gpu.ecc_volatile == EccErrors(correctable=None, uncorrectable=7)


def test_old_schema_uses_total_and_falls_back_to_sum() -> None:
    text = _read("datakit_gtx-1card.xml")  # R460: <single_bit>/<double_bit> per location
    volatile = text.index("<volatile>")
    head, tail = text[:volatile], text[volatile:]
    # single_bit: a total is printed -> it wins over the locations
    tail = tail.replace("<total>0</total>", "<total>9</total>", 1)
    gpu = parse_nvidia_smi_xml(head + tail).gpus[0]
    assert gpu.ecc_volatile is not None and gpu.ecc_volatile.correctable == 9
    # drop every <total> of the double_bit block: the locations are added up
    start = tail.index("<double_bit>")
    end = tail.index("</double_bit>")
    block = tail[start:end].replace("<device_memory>0<", "<device_memory>4<", 1)
    block = block.replace("<register_file>0<", "<register_file>1<", 1)
    block = "\n".join(line for line in block.split("\n") if "<total>" not in line)
    gpu = parse_nvidia_smi_xml(head + tail[:start] + block + tail[end:]).gpus[0]
    assert gpu.ecc_volatile == EccErrors(correctable=9, uncorrectable=5)


def test_retired_pages_and_remapped_rows_values() -> None:
    text = _read("telegraf_a10g.xml")
    text = (text.replace("<remapped_row_unc>0<", "<remapped_row_unc>4<")
                .replace("<remapped_row_pending>No<", "<remapped_row_pending>Yes<"))
    gpu = parse_nvidia_smi_xml(text).gpus[0]
    assert gpu.remapped_rows == RemappedRows(correctable=0, uncorrectable=4, pending=True,
                                             failure=False)


def test_truncated_capture_raises_with_source_and_line() -> None:
    text = _read("telegraf_a10g.xml")
    half = text[: len(text) // 2]
    with pytest.raises(ParseError) as info:
        parse_nvidia_smi_xml(half, source="host7:nvidia-smi -q -x")
    err = info.value
    assert err.line is not None and err.line > 1
    assert err.column is not None
    assert str(err).startswith(f"host7:nvidia-smi -q -x:{err.line}:")


@pytest.mark.parametrize(
    "text",
    ["", "   \n", "No devices were found\n", "NVIDIA-SMI has failed because it couldn't "
     "communicate with the NVIDIA driver.", "<nvidia_smi_log><gpu></nvidia_smi_log>"],
)
def test_garbage_raises(text: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_nvidia_smi_xml(text, source="nvsmi")
    assert str(info.value).startswith("nvsmi")


def test_wrong_root_raises() -> None:
    with pytest.raises(ParseError, match="nvidia_smi_log"):
        parse_nvidia_smi_xml("<html><body/></html>")


def test_unreadable_value_raises_naming_the_element() -> None:
    text = _read("telegraf_a10g.xml").replace("<total>23028 MiB</total>", "<total>lots</total>")
    with pytest.raises(ParseError, match=r"fb_memory_usage/total.*lots"):
        parse_nvidia_smi_xml(text)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("00000000:19:00.0", "0000:19:00.0"), ("00000000:9B:00.0", "0000:9b:00.0"),
     ("0000:3b:00.1", "0000:3b:00.1"), ("00000001:0A:1F.7", "0001:0a:1f.7"),
     ("19:00.0", "0000:19:00.0")],
)
def test_normalize_pci_bus_id(raw: str, expected: str) -> None:
    assert normalize_pci_bus_id(raw) == expected



def test_a_hundred_thousand_gpus_do_not_fit() -> None:
    """Issue 6 B.8: a report that parses but names 100k GPUs is refused with a ParseError."""
    gpus = "".join(f'<gpu id="0000:{i % 256:02x}:00.0"><product_name>X</product_name></gpu>'
                   for i in range(100_000))
    xml = f"<nvidia_smi_log><attached_gpus>100000</attached_gpus>{gpus}</nvidia_smi_log>"
    with pytest.raises(ParseError, match="100000 GPUs"):
        parse_nvidia_smi_xml(xml, "h1:nvidia-smi -q -x")


# The GPU fields are read through one walk of each <gpu> (common._XmlFlatView); it must answer
# every lookup as the element index (_XmlView) does, duplicated blocks included.
_DUPLICATED = (
    ("<pci>", "<pci><pci_bus_id>00000000:99:00.0</pci_bus_id></pci><pci>"),
    ("<pci>", "<pci></pci><pci>"),
    ("<retired_pages>", "<retired_pages></retired_pages><retired_pages>"),
    (
        "<temperature>",
        "<temperature><gpu_temp_slow_threshold>1 C</gpu_temp_slow_threshold></temperature>"
        "<temperature>",
    ),
    ("<processes>", "<processes></processes><processes>"),
    ("<mig_devices>", "<mig_devices></mig_devices><mig_devices>"),
)


_WALK_CASES = [
    (p.name, dup)
    for p in sorted(XML_DIR.glob("*.xml"))
    for dup in (None, *_DUPLICATED)
    if dup is None or dup[0] in p.read_text(encoding="utf-8")
]


@pytest.mark.parametrize(("name", "dup"), _WALK_CASES)
def test_one_walk_reads_what_the_element_index_reads(
    name: str, dup: tuple[str, str] | None
) -> None:
    from lxml import etree

    from gpufleet.collect.nvidia_smi.common import _XmlFlatView, _XmlView
    from gpufleet.collect.nvidia_smi.xml import _GPU_PATHS, _PARSER

    text = _read(name)
    if dup is not None:
        text = text.replace(dup[0], dup[1], 1)
    root = etree.fromstring(text.encode(), _PARSER)
    for gpu in root.findall("gpu"):
        flat, slow = _XmlFlatView(gpu, "g", {}, _GPU_PATHS), _XmlView(gpu, "g")
        for path in [*sorted(_GPU_PATHS.all), "serial", "no/such/path"]:
            assert flat.raw(path) == slow.raw(path), path
            f_node, s_node = flat.node(path), slow.node(path)
            assert (f_node is None) == (s_node is None), path
            if f_node is not None and s_node is not None:
                for sub in sorted(_GPU_PATHS.all):
                    assert f_node.raw(sub) == s_node.raw(sub), (path, sub)
        for path in ("mig_devices/mig_device", "processes/process_info", "pci/nope"):
            f_list, s_list = flat.nodes(path), slow.nodes(path)
            assert [v.where("") for v in f_list] == [v.where("") for v in s_list], path
            for sub in ("gpu_instance_id", "pid", "process_name", "fb_memory_usage/total"):
                assert [v.raw(sub) for v in f_list] == [v.raw(sub) for v in s_list], path
