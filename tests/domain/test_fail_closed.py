"""Validation fails closed (issue 6, A.1-A.3), judged on EDITED real captures.

Every capture here is a byte-for-byte copy from tests/fixtures/captured (see PROVENANCE.md
there); each test says which edit it makes, in memory, to show a condition no permitted capture
shows (a cut kernel-log line, a lost GPU, a GPU-less machine). Facts are built the way the
collector builds them (:func:`assemble_facts` on framed sections) and judged by the packaged
profiles, so "the host goes available" is exactly what these tests rule out.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import Section
from gpufleet.collect.kernel_log import parse_xids
from gpufleet.collect.nvidia_smi import parse_nvidia_smi_text, parse_nvidia_smi_xml
from gpufleet.domain.checks import CHECKS, CheckContext, CheckStatus
from gpufleet.domain.facts import FACTS_VERSION, HostFacts, UnreadableXid
from gpufleet.domain.health import Fault
from gpufleet.domain.profiles import Decision, evaluate, load_profiles
from gpufleet.domain.spec import ExpectedSpec

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "captured"
DMESG = "kernel-log/gpud_dmesg-time-format-iso.log"  # Xid 48 (fatal DBE) at line 11, 63 at 12
NOW = datetime(2024, 11, 15, 13, 0, tzinfo=UTC)  # an hour after the capture's Xids
A100_XML = "nvidia-smi-xml/telegraf_a100-sxm4-v12.xml"  # one A100 (trimmed capture)
V100_XML = "nvidia-smi-xml/datakit_gtx-8card.xml"  # 8x Tesla V100S
RTX_Q = "nvidia-smi-q/gpud_nvidia-smi-query.535.154.05.out.3.valid.txt"  # 8x RTX 4090
LSPCI_A100 = "lspci/gpud_lspci.nn.a100.txt"


def text(rel: str) -> str:
    path = CAPTURED / rel
    assert path.is_file(), f"capture {rel} missing from tests/fixtures/captured"
    return path.read_text()


def sections(**overrides: Section | None) -> dict[str, Section]:
    """A host's sections: a one-A100 XML report, an empty kernel log, no lspci section (so
    ``ExpectedSpec(gpu_count=1)`` makes gpu_count pass); ``overrides`` win (None drops one)."""
    base = {
        "hostname": Section("hostname", "gpu-node-07", "", 0),
        "uname-r": Section("uname-r", "5.15.0-105-generic", "", 0),
        "nvidia-smi-xml": Section("nvidia-smi-xml", text(A100_XML), "", 0),
        "kernel-xid": Section("kernel-xid", "", "", 0),
        "ibstat": Section("ibstat", "", "ibstat: command not found", 127),
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def facts_of(secs: dict[str, Section]) -> HostFacts:
    return assemble_facts(secs, NOW, "gpu-node-07")


def judge(f: HostFacts, spec: ExpectedSpec | None = None) -> tuple[Decision, set[str]]:
    out = evaluate(f, spec or ExpectedSpec(), None, load_profiles(), None, NOW)
    return out.decision, out.profiles_passed


ONE = ExpectedSpec(gpu_count=1)


def xid(f: HostFacts) -> tuple[CheckStatus, Fault | None, str]:
    r = CHECKS["xid"](f, CheckContext(now=NOW), {})
    return r.status, r.fault, r.message


# ------------------------------------------------------------------- A.1 kernel log / Xid


def cut_dmesg() -> str:
    """EDITED capture: the Xid 63 line (line 12) cut mid-line, before its code."""
    lines = text(DMESG).splitlines()
    assert "): 63," in lines[11]
    lines[11] = lines[11][: lines[11].index("NVRM: Xid") + len("NVRM: Xid (PCI:0000:19:")]
    return "\n".join(lines)


def test_a_cut_xid_line_does_not_hide_the_fatal_xid_before_it() -> None:
    events: list[UnreadableXid] = []
    parsed = parse_xids(cut_dmesg(), "h:kernel-xid", unreadable=events)
    assert [e.code for e in parsed] == [48] + [94] * 9  # every readable event kept
    assert [u.line for u in events] == [12]
    assert events[0].time == datetime(2024, 11, 15, 12, 2, 3, 498753, tzinfo=UTC)

    f = facts_of(sections(**{"kernel-xid": Section("kernel-xid", cut_dmesg(), "", 0)}))
    assert f.xids is not None and 48 in {e.code for e in f.xids}
    assert [u.line for u in f.xid_unreadable] == [12]
    assert any("gpu-node-07:kernel-xid:12" in p for p in f.problems)
    status, fault, message = xid(f)
    assert (status, fault) == (CheckStatus.FAIL, Fault.FATAL_XID)
    assert "1 unreadable Xid line(s)" in message
    decision, passed = judge(f)
    assert decision is Decision.QUARANTINE and not passed


def test_an_unreadable_xid_line_alone_holds_the_host() -> None:
    # EDITED capture: only the cut line 12 is kept (the readable ones are not Xid lines now).
    lines = cut_dmesg().splitlines()
    only_cut = "\n".join(line if n == 11 else line.replace("NVRM: Xid", "NVRM: xx")
                         for n, line in enumerate(lines))
    f = facts_of(sections(**{"kernel-xid": Section("kernel-xid", only_cut, "", 0)}))
    assert f.xids == [] and len(f.xid_unreadable) == 1
    status, fault, message = xid(f)
    assert (status, fault) == (CheckStatus.FAIL, None)
    assert "cannot rule out a fatal Xid" in message
    decision, passed = judge(f, ONE)
    assert decision is Decision.STAY_VALIDATING and not passed


def test_a_kernel_log_that_could_not_be_read_is_not_no_xid() -> None:
    failed = Section("kernel-xid", "", "cannot read the kernel log (dmesg, journalctl -k)", 1)
    f = facts_of(sections(**{"kernel-xid": failed}))
    assert f.xids is None  # not collected, distinct from []
    status, fault, message = xid(f)
    assert (status, fault) == (CheckStatus.FAIL, None)
    assert "not collected or unreadable" in message and "cannot read the kernel log" in message
    decision, passed = judge(f, ONE)
    assert decision is Decision.STAY_VALIDATING and not passed
    # An empty log that WAS read is "no Xid", and the same host is available.
    clean = facts_of(sections())
    assert clean.xids == [] and xid(clean)[0] is CheckStatus.PASS
    assert judge(clean, ONE)[0] is Decision.AVAILABLE


def test_ibstat_lspci_lsblk_failures_are_none_not_empty() -> None:
    f = facts_of(sections(
        ibstat=Section("ibstat", "", "ibpanic: [1234] main: stat of IB device 'mlx5_0' failed", 1),
        **{"lspci-nn": Section("lspci-nn", "", "lspci: Cannot open /sys/bus/pci/devices", 1)},
    ))
    assert (f.ib_ports, f.pci_devices, f.block_devices) == (None, None, None)
    need = ExpectedSpec(fabric="ib", ib_ports=4)
    r = CHECKS["ib_ports"](f, CheckContext(now=NOW, spec=need), {"required": True})
    assert r.status is CheckStatus.FAIL and "not collected" in r.message


def test_old_snapshot_without_version_is_read_fail_closed() -> None:
    # A snapshot stored before facts_version 2: "xids": [] may have been a failed dmesg.
    old = {"collected_at": "2024-11-15T12:00:00Z", "xids": [], "ib_ports": [],
           "pci_devices": [], "block_devices": [], "problems": []}
    f = HostFacts.model_validate(old)
    assert (f.xids, f.ib_ports, f.pci_devices, f.block_devices) == (None, None, None, None)
    assert xid(f)[0] is CheckStatus.FAIL
    # A current snapshot round-trips exactly.
    new = facts_of(sections())
    again = HostFacts.model_validate(new.model_dump(mode="json"))
    assert again == new and again.facts_version == FACTS_VERSION and again.xids == []


# -------------------------------------------------------------------- A.2 GPU error states


def test_lost_gpu_in_xml_is_recorded_and_fails_health() -> None:
    # EDITED capture: the third GPU of a real 8x V100S report answers "GPU is lost".
    parts = text(V100_XML).split("<gpu id=")
    assert "<product_name>Tesla V100S-PCIE-32GB</product_name>" in parts[3]
    parts[3] = parts[3].replace(
        "<product_name>Tesla V100S-PCIE-32GB</product_name>",
        "<product_name>GPU is lost</product_name>", 1)
    xml = "<gpu id=".join(parts)
    assert all(g.error is None for g in parse_nvidia_smi_xml(text(V100_XML), V100_XML).gpus)
    report = parse_nvidia_smi_xml(xml, "edited")
    assert [g.error for g in report.gpus] == [None, None, "GPU is lost (product_name)"] + [None] * 5
    f = facts_of(sections(**{"nvidia-smi-xml": Section("nvidia-smi-xml", xml, "", 0)}))
    r = CHECKS["gpu_count"](f, CheckContext(now=NOW, spec=ExpectedSpec(gpu_count=8)), {})
    assert (r.status, r.fault) == (CheckStatus.FAIL, Fault.GPU_LOST)
    assert "GPU 2" in r.message and "GPU is lost" in r.message
    decision, passed = judge(f, ExpectedSpec(gpu_count=8))
    assert decision is Decision.QUARANTINE and not passed


def test_unknown_error_and_requires_reset_in_text_report() -> None:
    q = text(RTX_Q)
    # The unedited capture prints "Addressing Mode : Unknown Error" on healthy GPUs: noise.
    assert "Unknown Error" in q
    assert all(g.error is None for g in parse_nvidia_smi_text(q, RTX_Q).gpus)
    # EDITED capture: GPU 1's UUID reads "Unknown Error"; GPU 5's temperature "GPU requires
    # reset".
    blocks = q.split("\nGPU 00000000:")
    blocks[2] = blocks[2].replace(
        "GPU UUID                              : GPU-4962ecf4-ef69-e7c3-fe53-a434de2b7c37",
        "GPU UUID                              : Unknown Error")
    head, sep, rest = blocks[6].partition("GPU Current Temp")
    assert sep
    value_end = rest.index("\n")
    blocks[6] = head + sep + rest[: rest.index(":") + 1] + " GPU requires reset" + rest[value_end:]
    edited = "\nGPU 00000000:".join(blocks)
    gpus = parse_nvidia_smi_text(edited, "edited").gpus
    assert {g.index: g.error for g in gpus if g.error} == {
        1: "Unknown Error (uuid)", 5: "GPU requires reset (temperature_c)"}
    f = HostFacts(facts_version=FACTS_VERSION, collected_at=NOW,
                  nvidia_smi=parse_nvidia_smi_text(edited, "edited"), pci_devices=None, xids=[])
    r = CHECKS["gpu_count"](f, CheckContext(now=NOW, spec=ExpectedSpec(gpu_count=8)), {})
    assert (r.status, r.fault) == (CheckStatus.FAIL, Fault.GPU_LOST)


# ------------------------------------------------------------------ A.3 no GPU, no profile


def gpu_less_lspci() -> str:
    """EDITED capture: a real lspci listing with every NVIDIA (10de) device removed."""
    kept = [ln for ln in text(LSPCI_A100).splitlines() if "[10de:" not in ln]
    assert kept and len(kept) < len(text(LSPCI_A100).splitlines())
    return "\n".join(kept)


def test_gpu_less_vm_is_never_validated_even_without_a_spec() -> None:
    no_smi = Section("nvidia-smi-xml", "", "sh: nvidia-smi: not found", 127)
    f = facts_of(sections(**{
        "nvidia-smi-xml": no_smi,
        "lspci-nn": Section("lspci-nn", gpu_less_lspci(), "", 0),
    }))
    assert f.pci_devices and not f.pci_gpus and f.nvidia_smi is None
    decision, passed = judge(f)  # the inventory gives no expected spec at all
    assert decision is not Decision.AVAILABLE
    assert passed == set()  # no validated.inference, no validated.test
    r = CHECKS["gpu_count"](f, CheckContext(now=NOW, spec=ExpectedSpec()), {})
    assert r.status is CheckStatus.FAIL and "no NVIDIA GPU on the PCI bus" in r.message


def test_driver_without_gpus_is_never_validated() -> None:
    # nvidia-smi answers (a real report) but lists no GPU; lspci shows none either.
    empty = text(A100_XML).split("<gpu id=")[0] + "</nvidia_smi_log>\n"
    f = facts_of(sections(**{
        "nvidia-smi-xml": Section("nvidia-smi-xml", empty, "", 0),
        "lspci-nn": Section("lspci-nn", gpu_less_lspci(), "", 0),
    }))
    assert f.nvidia_smi is not None and f.gpus == []
    decision, passed = judge(f)
    assert decision is not Decision.AVAILABLE and passed == set()


def test_spec_silent_expected_count_comes_from_lspci() -> None:
    # Two real captures of different machines side by side: lspci lists 8 A100s, the XML
    # report one: with no spec, the bus's 8 are expected, and the host is held.
    f = facts_of(sections(**{"lspci-nn": Section("lspci-nn", text(LSPCI_A100), "", 0)}))
    assert len(f.pci_gpus) == 8 and len(f.gpus) == 1
    r = CHECKS["gpu_count"](f, CheckContext(now=NOW, spec=ExpectedSpec()), {})
    assert (r.status, r.fault) == (CheckStatus.FAIL, Fault.GPU_LOST)
    assert r.evidence["expected_from"] == "lspci"
    # lspci not collected and no spec: nothing to hold the driver's count against.
    blind = facts_of(sections())  # no lspci section
    r = CHECKS["gpu_count"](blind, CheckContext(now=NOW, spec=ExpectedSpec()), {})
    assert r.status is CheckStatus.FAIL and "cannot tell" in r.message
    assert judge(blind)[0] is not Decision.AVAILABLE
