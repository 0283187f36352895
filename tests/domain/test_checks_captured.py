"""Checks against facts parsed from real captured tool output (tests/fixtures/captured)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gpufleet.collect.nvidia_smi import parse_nvidia_smi_text
from gpufleet.domain.checks import CHECKS, CheckContext, CheckStatus
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.spec import ExpectedSpec

NOW = datetime(2024, 9, 1, tzinfo=UTC)
CTX = CheckContext(now=NOW)
CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "nvidia-smi-q"


def facts_from(name: str) -> HostFacts:
    path = CAPTURES / name
    # The parser and the captures are part of the repository: a missing one is a failure,
    # never a silent skip.
    assert path.is_file(), f"capture {name} missing from {CAPTURES}"
    report = parse_nvidia_smi_text(path.read_text(), name)
    return HostFacts(collected_at=NOW, nvidia_smi=report)


def test_a10_with_pending_row_remap_warns() -> None:
    facts = facts_from("gpud_nvidia-smi-query.535.129.03.out.0.valid.a10.txt")
    result = CHECKS["row_remap"](facts, CTX, {})
    assert result.status is CheckStatus.WARN
    assert result.message == "row remapping pending on GPU 0: needs GPU reset"
    assert result.evidence["uncorrectable_rows"] == {0: 4}
    assert result.fault is None
    ctx = CheckContext(now=NOW, spec=ExpectedSpec(gpu_count=1, gpu_model="A10"))
    for name in ("gpu_count", "gpu_model", "single_gpu_model", "ecc_enabled",
                 "ecc_uncorrectable", "persistence_mode"):
        assert CHECKS[name](facts, ctx, {}).status is CheckStatus.PASS, name


def test_rtx_4090_box_has_ecc_disabled() -> None:
    facts = facts_from("gpud_nvidia-smi-query.535.154.05.out.0.valid.4090.txt")
    ctx = CheckContext(now=NOW, spec=ExpectedSpec(gpu_count=8, gpu_model="4090"))
    assert CHECKS["gpu_count"](facts, ctx, {}).status is CheckStatus.PASS
    ecc = CHECKS["ecc_enabled"](facts, ctx, {})
    assert ecc.status is CheckStatus.FAIL and ecc.message.startswith("ECC disabled on GPU 0, 1")
    # Consumer boards report no ECC counters: nothing to judge, not a pass.
    assert CHECKS["ecc_uncorrectable"](facts, ctx, {}).status is CheckStatus.SKIP
