"""Issue 29 item 8: reasons are a code and parameters (domain/reasons.py). The English text
is what it always was (stored, in JSON); the code reads back from stored text; every
template has a zh_CN translation with the same fields; Chinese is rendered piece by piece
and a piece no template knows stays as stored."""

from __future__ import annotations

import string
from datetime import UTC, datetime

import pytest

from gpufleet.domain.checks import ActiveEvidence, CheckContext, CheckStatus
from gpufleet.domain.checks.active import dcgm_diag, nccl
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.reasons import (
    FRAGMENTS,
    NUMBER_PARAMS,
    TEMPLATES,
    Reason,
    localize,
    parse,
    reason,
)
from gpufleet.i18n import catalog_path, gettext_in, read_po, reason_text

NOW = datetime(2026, 12, 5, tzinfo=UTC)


def _zh(message: str) -> str:
    return gettext_in("zh_CN", message)


def _fields(text: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(text) if f}


def test_a_missing_result_keeps_its_english_text_and_carries_its_code() -> None:
    ctx = CheckContext(now=NOW, evidence=ActiveEvidence(since="the driver change on 2026-12-01"))
    r = nccl(HostFacts(collected_at=NOW), ctx, {"require": True})
    assert r.status is CheckStatus.FAIL
    assert r.message == (
        "no NCCL all-reduce result since the driver change on 2026-12-01 (required)"
    )
    assert r.code == "active.missing_since_required"
    assert r.params == {
        "what": {"code": "what.nccl", "params": {}},
        "since": {"code": "since.change",
                  "params": {"change": "driver change", "day": "2026-12-01"}},
    }
    params = {"require": True, "min_level": 2, "or_gpu_burn": True}
    d = dcgm_diag(HostFacts(collected_at=NOW), CheckContext(now=NOW), params)
    assert d.message == "no DCGM diag at level 2 or deeper or gpu-burn result (required)"
    assert d.code == "active.missing_required"
    assert _zh(TEMPLATES[d.code]) != TEMPLATES[d.code]


def test_a_text_message_gets_the_code_of_the_template_it_matches() -> None:
    from gpufleet.domain.checks.base import res

    r = res("row_remap", CheckStatus.WARN, "row remapping pending on GPU 6: needs GPU reset")
    assert (r.code, r.params) == ("memory.remap_pending", {"gpus": "6"})
    other = res("x", CheckStatus.FAIL, "something no template knows")
    assert (other.code, other.params) == (None, {})


@pytest.mark.parametrize("code", sorted(TEMPLATES))
def test_every_template_reads_back_its_own_text(code: str) -> None:
    params = {f: str(i) if f in NUMBER_PARAMS else f"v{i}"  # a number field: digits only
              for i, f in enumerate(sorted(_fields(TEMPLATES[code])))}
    text = Reason(code, params).text
    found = parse(text)
    assert found is not None and found.text == text, (code, text, found)


def test_every_template_and_fragment_has_a_zh_cn_translation_with_its_fields() -> None:
    po = read_po(catalog_path().read_text("utf-8"))
    for template in [*TEMPLATES.values(), *FRAGMENTS.values()]:
        zh = po.get(template)
        assert isinstance(zh, str) and zh, template
        assert _fields(zh) == _fields(template), template


def test_stored_text_reads_in_chinese_piece_by_piece() -> None:
    stored = (
        "driver_version: drift from baseline b1: driver 535.154.05, expected 590.48.01; "
        "nccl: no NCCL all-reduce result (required); ib_ports: 7 of 8 IB/RoCE ports up at "
        ">= 200 Gb/s, need 8; down: mlx5_4/1 (Down/Disabled 200 Gb/s); mystery: left as is"
    )
    zh = localize(stored, _zh)
    assert zh == (
        "driver_version：相对基线 b1 漂移：driver 为 535.154.05，应为 590.48.01；"
        "nccl：没有 NCCL all-reduce 结果（必需）；"
        "ib_ports：8 个 IB/RoCE 端口中 7 个以 >= 200 Gb/s 运行，需要 8 个；"
        "未连通：mlx5_4/1 (Down/Disabled 200 Gb/s)；mystery: left as is"
    )
    assert localize(stored, lambda m: m) == stored  # English: word for word
    assert reason_text(stored, "en") == stored
    held = "not training-multinode: nccl: no NCCL all-reduce result (required)"
    assert reason_text(held, "zh_CN") == (
        "不满足 training-multinode：nccl：没有 NCCL all-reduce 结果（必需）"
    )
    assert reason_text("unreachable: connect to h1:22: Connection refused", "zh_CN") == (
        "不可达：连接 h1:22 失败：连接被拒绝"
    )


def test_an_unknown_code_is_refused() -> None:
    with pytest.raises(KeyError, match=r"no\.such"):
        reason("no.such")


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("baseline: baseline b1 is candidate, validated required",
         "baseline：基线 b1 为候选，需要已验证"),
        ("xid: fatal Xid 79 (GPU_HAS_FALLEN_OFF_THE_BUS, RESTART_BM) x1 on PCI:0000:07:00; "
         "Xid 48 (DBE, RESET_GPU) x2; also Xid 31 (MMU_FAULT, NONE) x1",
         "xid：致命 Xid 79（GPU_HAS_FALLEN_OFF_THE_BUS，RESTART_BM）1 次，位于 PCI:0000:07:00；"
         "Xid 48（DBE，RESET_GPU）2 次；另有 Xid 31（MMU_FAULT，NONE）1 次"),
        ("ib_ports: 6 of 8 IB/RoCE ports up at >= 200 Gb/s, need 8; down: a/1 (Down); "
         "nccl: no NCCL all-reduce result (required)",
         "ib_ports：8 个 IB/RoCE 端口中 6 个以 >= 200 Gb/s 运行，需要 8 个；未连通：a/1 (Down)；"
         "nccl：没有 NCCL all-reduce 结果（必需）"),
        ("pcie_link: GPU 1 gen 3 < 4; GPU 2 x8 < x16",
         "pcie_link：GPU 1 PCIe 代数 3 < 4；GPU 2 链路宽度 x8 < x16"),
        ("ecc_mode: ECC disabled on GPU 0-1 (enabled after the next reboot)",
         "ecc_mode：GPU 0-1 的 ECC 已关闭（下次重启后启用）"),
        ("nvlink: GPU 3 link 4, 5 inactive; GPU 3 has 16 active links, expected 18",
         "nvlink：GPU 3 的链路 4, 5 未激活；GPU 3 有 16 条活动链路，应为 18 条"),
        ("not training: host gpu-02 owes a passing reclaim (lease 7): run 'gpufleet reclaim "
         "gpu-02' to re-run the checks, or 'gpufleet unquarantine gpu-02 --force --reason ...' "
         "(recorded)",
         "不满足 training：主机 gpu-02 尚欠一次通过的回收（lease 7）：运行 'gpufleet reclaim "
         "gpu-02' 重新检查，或 'gpufleet unquarantine gpu-02 --force --reason ...'（会记录）"),
        ("xid-79: GPU 0: 1 x Xid 79 (GPU_HAS_FALLEN_OFF_THE_BUS, RESTART_BM) in 3600 s "
         "(recommended: reboot)",  # a health rule's alarm
         "xid-79：GPU 0：3600 秒内 1 次 Xid 79 (GPU_HAS_FALLEN_OFF_THE_BUS, RESTART_BM)"
         "（建议：reboot）"),
        ("driver 535.154.05 on 1 host, baseline 590.48.01",  # the dashboard's drift summary
         "driver 535.154.05：1 台主机，基线 590.48.01"),
        ("same machine as host gpu-01 (same system UUID: u1); not counted twice: remove one "
         "of the two names",
         "与主机 gpu-01 是同一台机器（系统 UUID 相同：u1）；不重复计数：请删除两个名称中的一个"),
    ],
)
def test_check_messages_read_in_chinese(stored: str, shown: str) -> None:
    assert reason_text(stored, "zh_CN") == shown
    assert reason_text(stored, "en") == stored


def test_real_check_results_carry_their_code() -> None:
    from gpufleet.domain.checks.memory import ecc_enabled
    from gpufleet.domain.facts import Gpu, NvidiaSmiReport

    gpus = [Gpu(index=0, ecc_mode_current=False), Gpu(index=1, ecc_mode_current=True)]
    facts = HostFacts(collected_at=NOW, nvidia_smi=NvidiaSmiReport(gpus=gpus))
    r = ecc_enabled(facts, CheckContext(now=NOW), {})
    assert (r.status, r.code, r.params, r.message) == (
        CheckStatus.FAIL, "memory.ecc_off", {"gpus": "0"}, "ECC disabled on GPU 0"
    )
    assert localize(f"ecc_enabled: {r.message}", _zh) == "ecc_enabled：GPU 0 的 ECC 已关闭"
