"""Validation checks judged on REAL captured tool output (tests/fixtures/captured).

Each test parses a capture with the production parser, builds :class:`HostFacts` directly
(no lab, no store) and runs ``CHECKS[name]`` with an :class:`ExpectedSpec`. The captures are
byte-for-byte copies (see the PROVENANCE.md next to them); where a test needs a condition
no permitted capture shows, it says so and edits a copy in memory.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpufleet.collect.active import parse_dcgm_diag_json, parse_gpu_burn, parse_nccl_tests
from gpufleet.collect.ib import parse_ibstat, parse_ibstatus
from gpufleet.collect.kernel_log import parse_xids
from gpufleet.collect.nvidia_smi import parse_nvidia_smi_text, parse_nvidia_smi_xml
from gpufleet.collect.pci import parse_lspci
from gpufleet.domain.checks import CHECKS, ActiveEvidence, CheckContext, CheckResult, CheckStatus
from gpufleet.domain.facts import FACTS_VERSION, HostFacts, NvidiaSmiReport
from gpufleet.domain.health import HARDWARE_FAULTS, Fault
from gpufleet.domain.spec import ExpectedSpec

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "captured"
COLLECTED = datetime(2025, 6, 1, tzinfo=UTC)


def text(rel: str) -> str:
    """A capture's text; a missing capture is an error, never a skip."""
    path = CAPTURED / rel
    assert path.is_file(), f"capture {rel} missing from tests/fixtures/captured"
    return path.read_text(errors="replace")


def facts(**kw: Any) -> HostFacts:
    return HostFacts(facts_version=FACTS_VERSION, collected_at=COLLECTED, **kw)


def check(name: str, f: HostFacts, spec: ExpectedSpec | None = None,
          now: datetime = COLLECTED, evidence: dict[str, Any] | None = None,
          **params: Any) -> CheckResult:
    ctx = CheckContext(now=now, spec=spec or ExpectedSpec(),
                       evidence=ActiveEvidence.from_kinds(evidence))
    result = CHECKS[name](f, ctx, params)
    assert result.name == name
    return result


# ------------------------------------------------------------------ row remapping (A10)


def test_a10_query_capture_with_pending_row_remap_warns() -> None:
    rel = "nvidia-smi-q/gpud_nvidia-smi-query.535.129.03.out.0.valid.a10.txt"
    report = parse_nvidia_smi_text(text(rel), rel)
    assert [g.product_name for g in report.gpus] == ["NVIDIA A10"]
    rr = report.gpus[0].remapped_rows
    assert rr is not None and rr.pending is True and rr.failure is False
    assert rr.uncorrectable == 4

    r = check("row_remap", facts(nvidia_smi=report))
    assert r.status is CheckStatus.WARN
    assert "needs GPU reset" in r.message
    assert r.message == "row remapping pending on GPU 0: needs GPU reset"
    assert r.fault is None  # a GPU reset (reclaim) fixes it: no quarantine
    assert r.evidence["pending"] == [0] and r.evidence["failure"] == []

    # The same capture with the failure flag raised (edited here: no public capture shows
    # one) is the RMA path.
    failed = text(rel).replace(
        "Remapping Failure Occurred        : No", "Remapping Failure Occurred        : Yes"
    )
    assert failed != text(rel)
    r = check("row_remap", facts(nvidia_smi=parse_nvidia_smi_text(failed, rel)))
    assert r.status is CheckStatus.FAIL and r.fault is Fault.ROW_REMAP_FAILURE


# ----------------------------------------------------------------------------- ibstat

RO_CE_12 = ExpectedSpec(fabric="roce", ib_ports=12)


@pytest.mark.parametrize(
    ("capture", "down"),
    [
        ("gpud_ibstat.47.0.h100.some.down.1.txt", {"mlx5_11": "Disabled", "mlx5_5": "Disabled"}),
        ("gpud_ibstat.47.0.h100.some.down.with.polling.1.txt",
         {"mlx5_11": "Polling", "mlx5_5": "Disabled"}),
    ],
)
def test_ibstat_with_ports_down_fails_naming_them(capture: str, down: dict[str, str]) -> None:
    ports = parse_ibstat(text(f"ib/{capture}"), capture)
    assert len(ports) == 12
    r = check("ib_ports", facts(ib_ports=ports), RO_CE_12)
    assert r.status is CheckStatus.FAIL
    assert r.fault is Fault.IB_DOWN and Fault.IB_DOWN not in HARDWARE_FAULTS
    assert r.message.startswith("10 of 12 IB/RoCE ports up, need 12; down: ")
    for ca, phys in down.items():
        assert f"{ca}/1 (Down/{phys}" in r.message, r.message
    assert sorted(r.evidence["down"]) == sorted(f"{ca}/1" for ca in down)
    up_cas = {p.split("/")[0] for p in r.evidence["up"]}
    assert not up_cas & set(down)

    # Needing only the 10 that are up: a warning that still names the down ports.
    r = check("ib_ports", facts(ib_ports=ports), RO_CE_12, min_ports=10)
    assert r.status is CheckStatus.WARN and r.fault is None
    assert all(ca in r.message for ca in down)


def test_ibstat_mixed_fabric_judged_per_link_layer() -> None:
    capture = "gpud_ibstat.47.0.h100.some.down.0.txt"
    ports = parse_ibstat(text(f"ib/{capture}"), capture)
    # The 8 InfiniBand ports are all up at 400 Gb/s; the down ones are Ethernet.
    ib = check("ib_ports", facts(ib_ports=ports),
               ExpectedSpec(fabric="ib", ib_ports=8, ib_rate_gbps=400))
    assert ib.status is CheckStatus.PASS, ib.message
    assert ib.message == "8 of 8 IB/RoCE ports up at >= 400 Gb/s"
    roce = check("ib_ports", facts(ib_ports=ports), ExpectedSpec(fabric="roce", ib_ports=4))
    assert roce.status is CheckStatus.FAIL
    for ca in ("mlx5_2", "mlx5_7", "mlx5_8"):
        assert f"{ca}/1 (Down/Disabled 40 Gb/s)" in roce.message, roce.message
    assert "mlx5_1/1" not in roce.message  # the Ethernet port that is up


@pytest.mark.parametrize(
    ("capture", "spec"),
    [
        ("gpud_ibstat.47.0.h100.all.active.0.txt", RO_CE_12),
        ("gpud_ibstat.47.0.h100.all.active.1.txt", RO_CE_12),
        ("gpud_ibstat.47.0.h100.all.active.2.txt",
         ExpectedSpec(fabric="ib", ib_ports=8, ib_rate_gbps=400)),
        ("gpud_ibstat.47.0.a100.all.active.0.txt",
         ExpectedSpec(fabric="ib", ib_ports=8, ib_rate_gbps=200)),
    ],
)
def test_ibstat_all_active_passes(capture: str, spec: ExpectedSpec) -> None:
    ports = parse_ibstat(text(f"ib/{capture}"), capture)
    r = check("ib_ports", facts(ib_ports=ports), spec)
    assert r.status is CheckStatus.PASS, r.message
    assert r.evidence["down"] == []


def test_ibstatus_all_active_passes() -> None:
    capture = "gpud_ibstatus.39.0.a100.all.active.0.txt"
    ports = parse_ibstatus(text(f"ib/{capture}"), capture)
    # 8 InfiniBand HCAs at 200 Gb/s plus one 40 Gb/s Ethernet port (mlx5_8).
    r = check("ib_ports", facts(ib_ports=ports),
              ExpectedSpec(fabric="ib", ib_ports=8, ib_rate_gbps=200))
    assert r.status is CheckStatus.PASS, r.message
    assert len(r.evidence["up"]) == 8
    # Without a link layer both count; the slow Ethernet port is another NIC, not a dead rail:
    # not counted (evidence), no warning.
    r = check("ib_ports", facts(ib_ports=ports), ExpectedSpec(ib_ports=8, ib_rate_gbps=200))
    assert r.status is CheckStatus.PASS and r.evidence["down"] == ["mlx5_8/1"]
    # Needing all nine names the slow one in the failure.
    r = check("ib_ports", facts(ib_ports=ports), ExpectedSpec(ib_ports=9, ib_rate_gbps=200))
    assert r.status is CheckStatus.FAIL
    assert "mlx5_8/1 (Active/LinkUp 40 Gb/s below rate)" in r.message
    # Asking for more ports than the host has fails without naming a down port.
    r = check("ib_ports", facts(ib_ports=ports), ExpectedSpec(ib_ports=len(ports) + 1))
    assert r.status is CheckStatus.FAIL and "down:" not in r.message


# ------------------------------------------------------------------------- kernel log


def xid_facts(rel: str) -> HostFacts:
    return facts(xids=parse_xids(text(f"kernel-log/{rel}"), rel))


def latest(f: HostFacts) -> datetime:
    times = [e.time for e in f.xids if e.time is not None]
    assert times and len(times) == len(f.xids)
    t = max(times)
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def test_xid_48_is_fatal_with_63_and_94_reported_beside_it() -> None:
    f = xid_facts("gpud_dmesg-time-format-iso.log")
    assert sorted({e.code for e in f.xids}) == [48, 63, 94]
    now = latest(f) + timedelta(minutes=5)
    r = check("xid", f, now=now)
    assert r.status is CheckStatus.FAIL
    assert r.fault is Fault.FATAL_XID and Fault.FATAL_XID in HARDWARE_FAULTS
    assert r.evidence["fatal"] == [48]
    assert r.evidence["nonfatal"] == [63, 94]
    assert r.evidence["counts"] == {48: 1, 63: 1, 94: 9}
    assert r.message.startswith("fatal Xid 48")
    assert "PCI:0000:19:00" in r.message
    assert "also " in r.message and "Xid 94" in r.message and "x9" in r.message

    # A week later the same log is outside the 24 h window: nothing to report.
    r = check("xid", f, now=now + timedelta(days=7))
    assert r.status is CheckStatus.PASS
    assert r.evidence["ignored_older"] == len(f.xids)
    # ... unless the window is widened.
    assert check("xid", f, now=now + timedelta(days=7), window_hours=24 * 8).status \
        is CheckStatus.FAIL


def test_xid_119_gsp_timeout_is_fatal() -> None:
    f = xid_facts("gpud_dmesg-with-xid-119.log")
    assert {e.code for e in f.xids} == {119}
    now = latest(f) + timedelta(minutes=1)  # ctime stamps carry no zone: read as UTC
    r = check("xid", f, now=now)
    assert r.status is CheckStatus.FAIL and r.fault is Fault.FATAL_XID
    assert r.evidence["fatal"] == [119] and r.evidence["counts"] == {119: 5}
    assert "PCI:0000:9b:00" in r.message and "x5" in r.message


def test_xid_13_and_43_only_warn() -> None:
    f = xid_facts("gpud_dmesg.decode.iso.log.0.log")
    assert {e.code for e in f.xids} == {13, 43}
    r = check("xid", f, now=latest(f) + timedelta(seconds=30))
    assert r.status is CheckStatus.WARN
    assert r.fault is None
    assert r.message.startswith("non-fatal ")
    assert r.evidence["fatal"] == [] and r.evidence["nonfatal"] == [13, 43]


def test_kernel_log_without_xid_passes() -> None:
    f = xid_facts("gpud_dmesg.decode.iso.log.1.log")
    assert f.xids == []
    r = check("xid", f, now=COLLECTED)
    assert r.status is CheckStatus.PASS and r.message == "no Xid in the last 24h"


# ---------------------------------------------------------------- lspci vs nvidia-smi


def a100_report(bus_ids: list[str]) -> NvidiaSmiReport:
    """The real A100 XML capture's GPU, placed at each given PCI address (nvidia-smi form)."""
    rel = "nvidia-smi-xml/telegraf_a100-sxm4-v12.xml"
    real = parse_nvidia_smi_xml(text(rel), rel)
    (gpu,) = real.gpus
    gpus = [gpu.model_copy(update={"index": i, "pci_bus_id": b}) for i, b in enumerate(bus_ids)]
    return real.model_copy(update={"gpus": gpus, "attached_gpus": len(gpus)})


def test_lspci_a100_catches_a_gpu_off_the_driver() -> None:
    rel = "lspci/gpud_lspci.nn.a100.txt"
    pci = parse_lspci(text(rel), rel)
    on_bus = [d.address for d in facts(pci_devices=pci).pci_gpus]
    assert len(on_bus) == 8  # plus 6 NVSwitch bridges, which are not GPUs
    # nvidia-smi prints an 8-digit PCI domain: 0001:00:00.0 -> 00000001:00:00.0
    smi_ids = [f"0000{a.upper()}" for a in on_bus]
    spec = ExpectedSpec(gpu_count=8, gpu_model="A100")

    whole = facts(pci_devices=pci, nvidia_smi=a100_report(smi_ids))
    r = check("gpu_count", whole, spec)
    assert r.status is CheckStatus.PASS, r.message
    assert r.message == "8 GPUs (driver and PCI bus agree)"
    assert check("gpu_model", whole, spec).status is CheckStatus.PASS

    lost = on_bus[5]
    short = facts(pci_devices=pci,
                  nvidia_smi=a100_report([s for s, a in zip(smi_ids, on_bus, strict=True)
                                          if a != lost]))
    r = check("gpu_count", short, spec)
    assert r.status is CheckStatus.FAIL
    assert r.fault is Fault.GPU_LOST
    assert r.message == (
        f"driver sees 7 of 8 NVIDIA GPUs on the PCI bus (missing from the driver: {lost})"
    )
    assert r.evidence["missing"] == [lost]
    assert (r.evidence["driver"], r.evidence["pci"]) == (7, 8)

    # Without a spec the bus alone still catches it.
    assert check("gpu_count", short).fault is Fault.GPU_LOST


# ------------------------------------------------------------------------------- ECC

A100_XML = "nvidia-smi-xml/telegraf_a100-sxm4-v12.xml"


def _edit_ecc(xml: str, side: str, field: str, value: int) -> str:
    """Set one ECC counter of the capture's ``volatile``/``aggregate`` block."""
    start = xml.index(f"<{side}>", xml.index("<ecc_errors>"))
    end = xml.index(f"</{side}>", start)
    block = xml[start:end]
    new = block.replace(f"<{field}>0</{field}>", f"<{field}>{value}</{field}>", 1)
    assert new != block, (side, field)
    return xml[:start] + new + xml[end:]


def test_ecc_counts_edited_into_a_real_a100_xml() -> None:
    # The only public capture with non-zero ECC counts (a P100 from netdata) is GPL and was
    # deliberately not copied; so the counts are edited here into the real A100 XML capture
    # (R470+ layout: sram_/dram_ counters), and the parser has to add them up.
    xml = text(A100_XML)
    clean = facts(nvidia_smi=parse_nvidia_smi_xml(xml, A100_XML))
    r = check("ecc_uncorrectable", clean)
    assert r.status is CheckStatus.PASS and r.evidence["volatile"] == {0: 0}
    assert check("ecc_enabled", clean).status is CheckStatus.PASS

    volatile = _edit_ecc(_edit_ecc(xml, "volatile", "dram_uncorrectable", 2),
                         "volatile", "sram_uncorrectable", 1)
    volatile = _edit_ecc(volatile, "aggregate", "dram_uncorrectable", 3)
    r = check("ecc_uncorrectable", facts(nvidia_smi=parse_nvidia_smi_xml(volatile, A100_XML)))
    assert r.status is CheckStatus.FAIL and r.fault is Fault.ECC_UNCORRECTABLE
    assert r.evidence["volatile"] == {0: 3}
    assert r.message == "uncorrectable ECC errors since driver load (GPU 0: 3)"

    lifetime = _edit_ecc(xml, "aggregate", "dram_uncorrectable", 5)
    f = facts(nvidia_smi=parse_nvidia_smi_xml(lifetime, A100_XML))
    r = check("ecc_uncorrectable", f)
    assert r.status is CheckStatus.WARN and r.fault is None
    assert r.evidence["aggregate"] == {0: 5}
    r = check("ecc_uncorrectable", f, aggregate_threshold=5)
    assert r.status is CheckStatus.FAIL and r.fault is Fault.ECC_UNCORRECTABLE

    # Correctable errors alone are not a failure.
    corr = _edit_ecc(xml, "volatile", "dram_correctable", 12)
    r = check("ecc_uncorrectable", facts(nvidia_smi=parse_nvidia_smi_xml(corr, A100_XML)))
    assert r.status is CheckStatus.PASS


def test_ecc_and_retired_pages_edited_into_a_real_v100s_xml() -> None:
    # Same reason as above; the pre-R470 layout (single_bit/double_bit with a total), 8 GPUs.
    rel = "nvidia-smi-xml/datakit_gtx-8card.xml"
    xml = text(rel)
    clean = facts(nvidia_smi=parse_nvidia_smi_xml(xml, rel))
    assert len(clean.gpus) == 8
    assert check("ecc_uncorrectable", clean).status is CheckStatus.PASS
    assert check("retired_pages", clean).status is CheckStatus.PASS

    # First GPU: a volatile double-bit total of 2.
    start = xml.index("<double_bit>", xml.index("<volatile>"))
    end = xml.index("</double_bit>", start)
    edited = xml[:start] + xml[start:end].replace("<total>0</total>", "<total>2</total>") \
        + xml[end:]
    r = check("ecc_uncorrectable", facts(nvidia_smi=parse_nvidia_smi_xml(edited, rel)))
    assert r.status is CheckStatus.FAIL and r.fault is Fault.ECC_UNCORRECTABLE
    assert r.evidence["volatile"][0] == 2
    assert all(n == 0 for i, n in r.evidence["volatile"].items() if i != 0)

    # First GPU: 61 pages retired for double-bit errors (limit 64, default threshold 60).
    start = xml.index("<double_bit_retirement>")
    retired = xml[:start] + xml[start:].replace(
        "<retired_count>0</retired_count>", "<retired_count>61</retired_count>", 1
    )
    r = check("retired_pages", facts(nvidia_smi=parse_nvidia_smi_xml(retired, rel)))
    assert r.status is CheckStatus.FAIL and r.fault is Fault.RETIRED_PAGES_LIMIT
    assert r.evidence["retired"][0] == 61


# ------------------------------------------------------------------ active-test evidence


@pytest.mark.parametrize(
    "rel",
    [
        "dcgm/nvidia-dcgm_JsonResultTests_real-output_diag-3.1.0_8gpu.txt",
        "dcgm/nvidia-dcgm_JsonResultTests_real-output_diag-3.1.0_8gpu.prefix-stripped.json",
    ],
)
def test_dcgm_diag_capture_passes(rel: str) -> None:
    result = parse_dcgm_diag_json(text(rel), rel)
    assert result.passed and result.gpu_ids == list(range(8))
    # As the parsed model and as the plain JSON the store keeps.
    for evidence in (result, result.model_dump(mode="json")):
        r = check("dcgm_diag", facts(), evidence={"dcgm_diag": evidence})
        assert r.status is CheckStatus.PASS, r.message
        assert r.message == "DCGM diag passed"
    # No evidence: skip, or fail when the profile requires it.
    assert check("dcgm_diag", facts(), evidence={}).status is CheckStatus.SKIP
    assert check("dcgm_diag", facts(), evidence={}, require=True).status is CheckStatus.FAIL


def test_nccl_capture_against_thresholds() -> None:
    rel = "active/superbench_nccl_allreduce.log"
    result = parse_nccl_tests(text(rel), rel)
    assert result.avg_bus_bw_gbps == pytest.approx(68.4048)
    for evidence in (result, result.model_dump(mode="json")):
        ok = check("nccl", facts(), evidence={"nccl": evidence}, min_busbw_gbps=60)
        assert ok.status is CheckStatus.PASS, ok.message
        assert ok.message == "NCCL busbw 68.4048 GB/s"
        low = check("nccl", facts(), evidence={"nccl": evidence}, min_busbw_gbps=100)
        assert low.status is CheckStatus.FAIL and low.fault is Fault.DIAG_FAILED
        assert low.message == "NCCL busbw 68.4048 GB/s below 100 GB/s"
    # Exactly at the floor passes.
    at = check("nccl", facts(), evidence={"nccl": result},
               min_busbw_gbps=result.avg_bus_bw_gbps)
    assert at.status is CheckStatus.PASS


def test_gpu_burn_capture_passes() -> None:
    rel = "active/superbench_gpu_burn.excerpt.log"
    result = parse_gpu_burn(text(rel), rel)
    r = check("gpu_burn", facts(), evidence={"gpu_burn": result})
    assert r.status is CheckStatus.PASS, r.message
