"""R610's ``nvidia-smi -q`` text renamed the T.Limit threshold labels (issue 28, a held-out
disagreement): ``GPU Shutdown T.Limit Temp Specification`` ... The capture is an EDITED copy
of the H100 590.48.01 bundle's idle ``-q`` section with only those three labels renamed
(tests/fixtures/captured/nvidia-smi-q/PROVENANCE.md)."""

from __future__ import annotations

from gpufleet.collect.nvidia_smi import parse_nvidia_smi_text
from gpufleet.domain.facts import TemperatureThresholds
from gpufleet.lab.captures import captures_dir, load_exporter_bundle

EDITED = "EDITED_r610-tlimit-specification_nvidia_gpu_exporter_h100-80gb-hbm3_590.48.01_q-idle.txt"
H100 = "nvidia_gpu_exporter_linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"


def test_r610_tlimit_specification_labels_are_read() -> None:
    text = (captures_dir() / "nvidia-smi-q" / EDITED).read_text(encoding="utf-8")
    gpu = parse_nvidia_smi_text(text).gpus[0]
    assert gpu.temperature_thresholds == TemperatureThresholds(
        tlimit_c=46, shutdown_tlimit_c=-8, slowdown_tlimit_c=-2, max_operating_tlimit_c=0,
        memory_max_tlimit_c=0,
    )


def test_the_edited_capture_reads_like_its_original() -> None:
    edited = (captures_dir() / "nvidia-smi-q" / EDITED).read_text(encoding="utf-8")
    original = load_exporter_bundle(captures_dir() / "nvidia-smi-csv" / H100)["idle :: query (-q)"]
    assert edited != original
    assert parse_nvidia_smi_text(edited) == parse_nvidia_smi_text(original)
