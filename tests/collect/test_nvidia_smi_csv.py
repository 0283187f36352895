"""``--query-gpu`` CSV parser and the capture-bundle splitter, against nvidia_gpu_exporter's
real capture bundles (MIT). Expected values were read from the bundles by hand."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpufleet.collect.nvidia_smi import (
    QUERY_GPU_FIELDS,
    parse_query_gpu_csv,
    parse_query_gpu_report,
)
from gpufleet.domain.facts import EccErrors, RemappedRows
from gpufleet.errors import ParseError
from gpufleet.lab.captures import captures_dir, load_exporter_bundle, split_exporter_bundle

BUNDLE_DIR = captures_dir() / "nvidia-smi-csv"
CSV_SECTION = "{phase} :: query-gpu (csv, what the exporter parses)"
H100 = "nvidia_gpu_exporter_linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"


def _sections(name: str) -> dict[str, str]:
    return load_exporter_bundle(BUNDLE_DIR / name)


def _csv(name: str, phase: str = "idle") -> str:
    return _sections(name)[CSV_SECTION.format(phase=phase)]


@dataclass(frozen=True)
class CsvCase:
    file: str
    product: str
    driver: str
    memory_total_mib: int
    memory_used_mib: int
    power_draw_w: float
    power_limit_w: float
    temperature_c: float
    ecc_volatile: tuple[int, int] | None
    remapped: tuple[int, int, bool, bool] | None
    pcie_gen: tuple[int, int]
    persistence: bool | None
    mig: bool | None
    utilization_gpu_pct: float | None


CASES = [
    CsvCase("nvidia_gpu_exporter_linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05.txt",
            "NVIDIA GeForce RTX 2080 SUPER", "595.71.05", 8192, 214, 39.32, 250.0, 40.0,
            None, None, (1, 3), False, None, 0.0),
    CsvCase("nvidia_gpu_exporter_linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt",
            "NVIDIA GeForce RTX 2080 SUPER", "610.57.04", 8192, 211, 39.17, 250.0, 33.0,
            None, None, (1, 3), False, None, 0.0),
    CsvCase("nvidia_gpu_exporter_linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt",
            "NVIDIA GeForce RTX 4080 SUPER", "595.71.05", 16376, 596, 26.20, 320.0, 43.0,
            None, None, (1, 4), False, None, 0.0),
    CsvCase(H100, "NVIDIA H100 80GB HBM3", "590.48.01", 81559, 0, 69.85, 700.0, 41.0,
            (0, 0), (0, 0, False, False), (5, 5), True, False, 0.0),
    CsvCase("nvidia_gpu_exporter_linux-x86_64__nvidia-h100-mig__590.48.01.txt",
            "NVIDIA H100 80GB HBM3", "590.48.01", 81559, 59, 71.15, 700.0, 42.0,
            (0, 0), None, (5, 5), True, True, None),
    CsvCase("nvidia_gpu_exporter_linux-x86_64__nvidia-h200-mig__590.48.01.txt",
            "NVIDIA H200", "590.48.01", 143771, 55, 78.28, 700.0, 28.0,
            (0, 0), None, (5, 5), True, True, None),
    CsvCase("nvidia_gpu_exporter_linux-x86_64__nvidia-h200__590.48.01.txt",
            "NVIDIA H200", "590.48.01", 143771, 0, 77.71, 700.0, 28.0,
            (0, 0), (0, 0, False, False), (5, 5), True, False, 0.0),
    CsvCase("nvidia_gpu_exporter_linux-x86_64__nvidia-l40s__595.80.txt",
            "NVIDIA L40S", "595.80", 46068, 0, 144.97, 350.0, 63.0,
            (0, 0), (0, 0, False, False), (4, 4), False, None, 100.0),
    CsvCase("nvidia_gpu_exporter_windows-x86_64__nvidia-geforce-rtx-2080-super__591.86.txt",
            "NVIDIA GeForce RTX 2080 SUPER", "591.86", 8192, 702, 38.92, 250.0, 40.0,
            None, None, (3, 3), None, None, 0.0),
    CsvCase("nvidia_gpu_exporter_windows-x86_64__nvidia-geforce-rtx-2080-super__610.62.txt",
            "NVIDIA GeForce RTX 2080 SUPER", "610.62", 8192, 797, 39.25, 250.0, 40.0,
            None, None, (3, 3), None, None, 0.0),
]


def test_every_bundle_is_covered() -> None:
    assert {p.name for p in BUNDLE_DIR.glob("*.txt")} == {c.file for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.file.split("__")[1])
def test_bundle_csv_with_header(case: CsvCase) -> None:
    """The bundles query ~200 fields with a header row; the header picks the columns."""
    gpus = parse_query_gpu_csv(_csv(case.file), source=case.file)
    assert len(gpus) == 1
    gpu = gpus[0]
    assert gpu.index == 0
    assert gpu.uuid == "GPU-00000000-0000-0000-0000-000000000000"  # masked by the exporter
    assert gpu.product_name == case.product
    assert (gpu.memory_total_mib, gpu.memory_used_mib) == (case.memory_total_mib,
                                                           case.memory_used_mib)
    assert gpu.power_draw_w == case.power_draw_w
    assert gpu.power_limit_w == case.power_limit_w
    assert gpu.temperature_c == case.temperature_c
    expected_ecc = None if case.ecc_volatile is None else EccErrors(
        correctable=case.ecc_volatile[0], uncorrectable=case.ecc_volatile[1])
    assert gpu.ecc_volatile == expected_ecc
    assert gpu.ecc_aggregate == expected_ecc  # all captures: same as volatile
    expected_rr = None if case.remapped is None else RemappedRows(
        correctable=case.remapped[0], uncorrectable=case.remapped[1],
        pending=case.remapped[2], failure=case.remapped[3])
    assert gpu.remapped_rows == expected_rr
    assert gpu.retired_pages is None  # "[N/A]" everywhere: no page retirement after Volta
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == case.pcie_gen
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (16, 16)
    assert gpu.persistence_mode is case.persistence
    assert gpu.mig_mode_current is case.mig
    assert gpu.utilization_gpu_pct == case.utilization_gpu_pct
    report = parse_query_gpu_report(_csv(case.file))
    assert report.driver_version == case.driver
    assert report.attached_gpus == 1


def _to_noheader_nounits(section: str, fields: tuple[str, ...]) -> str:
    """Re-shape a bundle's ``--format=csv`` section into ``csv,noheader,nounits`` for
    ``fields``, picking columns by header name and dropping the header's unit from values."""
    header, *rows = [line for line in section.splitlines() if line.strip()]
    names, units = [], []
    for cell in header.split(", "):
        m = re.fullmatch(r"(?P<name>\S+)(?: \[(?P<unit>[^\]]+)\])?", cell)
        assert m is not None, cell
        names.append(m["name"])
        units.append(m["unit"])
    out = []
    for row in rows:
        values = dict(zip(names, zip(row.split(", "), units, strict=True), strict=True))
        cells = []
        for f in fields:
            value, unit = values[f]
            cells.append(value.removesuffix(f" {unit}") if unit else value)
        out.append(", ".join(cells))
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.file.split("__")[1])
@pytest.mark.parametrize("phase", ["idle", "load"])
def test_noheader_nounits_matches_the_header_form(case: CsvCase, phase: str) -> None:
    section = _csv(case.file, phase)
    cheap = _to_noheader_nounits(section, QUERY_GPU_FIELDS)
    assert "MiB" not in cheap  # really the nounits form
    assert parse_query_gpu_csv(cheap) == parse_query_gpu_csv(section)


def test_query_fields_are_names_nvidia_smi_accepts() -> None:
    for name in sorted(p.name for p in BUNDLE_DIR.glob("*.txt")):
        help_text = _sections(name)["capabilities :: help-query-gpu"]
        accepted = set(re.findall(r'"([^"]+)"', help_text))
        assert set(QUERY_GPU_FIELDS) <= accepted, (name, set(QUERY_GPU_FIELDS) - accepted)
    # canonical names, so a --format=csv header echoes them back unchanged
    header = _csv(H100).splitlines()[0]
    echoed = {re.sub(r" \[.*\]$", "", c) for c in header.split(", ")}
    assert set(QUERY_GPU_FIELDS) <= echoed


_FIELDS = ("index", "name", "memory.total", "power.draw", "ecc.errors.uncorrected.volatile.total",
           "remapped_rows.pending", "pci.bus_id")


def test_noheader_multi_gpu_and_missing_values() -> None:
    text = (
        "0, NVIDIA H100 80GB HBM3, 81559, 69.85, 0, No, 00000000:19:00.0\n"
        "1, NVIDIA H100 80GB HBM3, 81559, [N/A], 2, Yes, 00000000:3B:00.0\n"
    )
    gpus = parse_query_gpu_csv(text, _FIELDS)
    assert [g.index for g in gpus] == [0, 1]
    assert [g.pci_bus_id for g in gpus] == ["0000:19:00.0", "0000:3b:00.0"]
    assert gpus[1].power_draw_w is None
    assert gpus[1].ecc_volatile == EccErrors(correctable=None, uncorrectable=2)
    assert gpus[1].remapped_rows == RemappedRows(pending=True)
    assert gpus[0].remapped_rows == RemappedRows(pending=False)


def test_with_units_and_header() -> None:
    text = (
        "index, name, memory.total [MiB], power.draw [W], "
        "ecc.errors.uncorrected.volatile.total, remapped_rows.pending, pci.bus_id\n"
        "0, NVIDIA A10, 23028 MiB, 43.89 W, 0, Yes, 00000000:07:00.0\n"
    )
    (gpu,) = parse_query_gpu_csv(text, _FIELDS)
    assert (gpu.memory_total_mib, gpu.power_draw_w) == (23028, 43.89)
    assert gpu.remapped_rows == RemappedRows(pending=True)


def test_index_defaults_to_row_order() -> None:
    gpus = parse_query_gpu_csv("A\nB\n", ("name",))
    assert [(g.index, g.product_name) for g in gpus] == [(0, "A"), (1, "B")]


def test_wrong_column_count_names_the_line() -> None:
    text = (
        "0, NVIDIA H100 80GB HBM3, 81559, 69.85, 0, No, 00000000:19:00.0\n"
        "\n"
        "1, NVIDIA H100 80GB HBM3, 81559, 69.85, 0, No\n"
    )
    with pytest.raises(ParseError) as info:
        parse_query_gpu_csv(text, _FIELDS, source="host3:nvidia-smi --query-gpu")
    assert info.value.line == 3
    assert "expected 7 columns, got 6" in str(info.value)
    assert str(info.value).startswith("host3:nvidia-smi --query-gpu:3:")


def test_bundle_row_with_a_column_cut_off() -> None:
    section = _csv(H100)
    header, row = section.splitlines()[:2]
    with pytest.raises(ParseError) as info:
        parse_query_gpu_csv(f"{header}\n{row.rsplit(',', 1)[0]}\n")
    assert info.value.line == 2


@pytest.mark.parametrize(
    "text",
    [
        "No devices were found\n",
        'Field "bogus.field" is not a valid field to query.\n',
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
    ],
)
def test_error_messages_instead_of_csv_raise(text: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_query_gpu_csv(text)
    assert info.value.line == 1


def test_unreadable_value_names_column_and_line() -> None:
    text = "0, NVIDIA H100 80GB HBM3, lots, 69.85, 0, No, 00000000:19:00.0\n"
    with pytest.raises(ParseError, match=r"memory\.total") as info:
        parse_query_gpu_csv(text, _FIELDS)
    assert info.value.line == 1


def test_empty_output_is_no_gpus() -> None:
    assert parse_query_gpu_csv("") == []


# ----------------------------------------------------------------------- bundle splitter


def test_bundle_sections() -> None:
    sections = _sections(H100)
    assert {
        "nvidia_gpu_exporter GPU capture", "capabilities :: version", "capabilities :: list (-L)",
        "idle :: query (-q)", "load :: query (-q)", CSV_SECTION.format(phase="idle"),
        CSV_SECTION.format(phase="load"), "capabilities :: help-query-gpu",
    } <= set(sections)
    assert sections["capabilities :: version"] == (
        "NVIDIA-SMI version  : 590.48.01\n"
        "NVML version        : 590.48\n"
        "DRIVER version      : 590.48.01\n"
        "CUDA Version        : 13.1\n"
    )
    # the preamble's free-form "# ..." lines after the banner are content, kept verbatim
    preamble = sections["nvidia_gpu_exporter GPU capture"]
    assert preamble.startswith("# The GPU model and driver are in the filename.")
    assert "collected_at:   2026-07-14T08:12:38Z\n" in preamble
    assert sections["idle :: query (-q)"].startswith("\n==============NVSMI LOG==============\n")


@pytest.mark.parametrize("name", sorted(p.name for p in BUNDLE_DIR.glob("*.txt")))
def test_bundle_sections_are_verbatim(name: str) -> None:
    raw = (BUNDLE_DIR / name).read_text(encoding="utf-8")
    sections = load_exporter_bundle(BUNDLE_DIR / name)
    assert len(sections) >= 25
    for title, body in sections.items():
        assert f"# {title}\n" in raw
        assert body in raw, title


def test_malformed_bundles_raise() -> None:
    banner = "#" * 80
    with pytest.raises(ParseError, match="before the first"):
        split_exporter_bundle("stray\n" + banner + "\n# a\n" + banner + "\nx\n")
    with pytest.raises(ParseError, match="duplicate"):
        split_exporter_bundle(f"{banner}\n# a\n{banner}\nx\n{banner}\n# a\n{banner}\ny\n")
    with pytest.raises(ParseError, match="ends inside"):
        split_exporter_bundle(f"{banner}\n# a\n")


def test_captures_dir_default_and_override(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    monkeypatch.delenv("GPUFLEET_CAPTURES", raising=False)
    repo_tests = Path(__file__).resolve().parents[1]
    assert captures_dir() == repo_tests / "fixtures" / "captured"
    monkeypatch.setenv("GPUFLEET_CAPTURES", str(tmp_path))
    assert captures_dir() == tmp_path


def test_gpu_error_states_are_recorded_on_the_gpu() -> None:
    """EDITED capture (issue 6 A.2): the real H100 CSV with its UUID cell replaced by
    "[GPU is lost]", then its memory.total by "[Unknown Error]"; the unedited row has none."""
    text = _csv(H100)
    assert parse_query_gpu_report(text).gpus[0].error is None
    uuid = re.search(r"GPU-[0-9a-f-]{36}", text)
    assert uuid is not None
    lost = text.replace(uuid.group(0), "[GPU is lost]")
    assert parse_query_gpu_report(lost).gpus[0].error == "GPU is lost (uuid)"
    total = "81559 MiB"
    assert total in text
    unknown = text.replace(total, "[Unknown Error]", 1)
    gpu = parse_query_gpu_report(unknown).gpus[0]
    assert (gpu.error, gpu.memory_total_mib) == ("Unknown Error (memory_total_mib)", None)
