"""Facts health needs (issue 10 item 1), read from REAL captures in all three formats.

Expected values were read from the captures by hand; where a peer project's test asserts the
same value on the same capture it is named (telegraf's ``TestSetIfUsed`` asserts the RTX 4000
SFF Ada counter 4251825415 and the T.Limit-relative shutdown threshold -7 C).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpufleet.collect.kernel_log import parse_xids
from gpufleet.collect.nvidia_smi import (
    parse_nvidia_smi_text,
    parse_nvidia_smi_xml,
    parse_query_gpu_report,
)
from gpufleet.domain.checks import CHECKS, CheckContext, CheckStatus
from gpufleet.domain.facts import (
    FACTS_VERSION,
    ClockEventReasons,
    GpuFabric,
    HostFacts,
    NvidiaSmiReport,
    TemperatureThresholds,
)
from gpufleet.domain.health import Fault
from gpufleet.domain.profiles import evaluate, load_profiles
from gpufleet.domain.spec import ExpectedSpec
from gpufleet.lab.captures import load_exporter_bundle

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "captured"
XML = CAPTURED / "nvidia-smi-xml"
TEXT = CAPTURED / "nvidia-smi-q"
BUNDLES = CAPTURED / "nvidia-smi-csv"
H100 = BUNDLES / "nvidia_gpu_exporter_linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
H100_MIG = BUNDLES / "nvidia_gpu_exporter_linux-x86_64__nvidia-h100-mig__590.48.01.txt"
RTX2080_R610 = (
    BUNDLES / "nvidia_gpu_exporter_linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt"
)
CSV_LOAD = "load :: query-gpu (csv, what the exporter parses)"
Q_LOAD = "load :: query (-q)"
NOW = datetime(2026, 7, 14, 9, 0, tzinfo=UTC)
IDLE_ONLY = ClockEventReasons(
    gpu_idle=True, applications_clocks_setting=False, sw_power_cap=False, hw_slowdown=False,
    hw_thermal_slowdown=False, hw_power_brake_slowdown=False, sw_thermal_slowdown=False,
    sync_boost=False, display_clocks_setting=False,
)


def _xml(name: str) -> NvidiaSmiReport:
    return parse_nvidia_smi_xml((XML / name).read_text())


def _bundle(path: Path, section: str) -> str:
    return load_exporter_bundle(path)[section]


# ------------------------------------------------------------------------------ XML


def test_xml_v13_reasons_counters_limits_thresholds() -> None:
    g = _xml("telegraf_rtx-4000-sff-ada-v13.xml").gpus[0]
    assert g.clock_event_reasons == IDLE_ONLY.model_copy(
        update={
            "sw_power_cap_us": 4251825415,  # > 2**32, as telegraf's test asserts
            "sync_boost_us": 0, "sw_thermal_slowdown_us": 0, "hw_thermal_slowdown_us": 0,
            "hw_power_brake_us": 0,
        }
    )
    assert (g.power_limit_w, g.power_limit_requested_w, g.power_limit_default_w) == (70, 70, 70)
    assert (g.power_limit_min_w, g.power_limit_max_w) == (30, 70)
    # v13 prints the thresholds relative to T.Limit; telegraf asserts -7 for the shutdown one.
    assert g.temperature_thresholds == TemperatureThresholds(
        target_c=88, tlimit_c=49, shutdown_tlimit_c=-7, slowdown_tlimit_c=-2,
        max_operating_tlimit_c=0,
    )
    assert g.compute_mode == "Default"
    assert g.utilization_memory_pct == 37
    assert (g.ecc_channel_repair_pending, g.ecc_tpc_repair_pending) == (False, False)
    assert g.ecc_unrepairable_memory is None  # "N/A"
    assert g.fabric is None  # every fabric value is N/A on a workstation card


def test_xml_sw_power_cap_active() -> None:
    g = _xml("telegraf_3090-v13.xml").gpus[0]
    assert g.clock_event_reasons is not None
    assert g.clock_event_reasons.sw_power_cap is True
    assert g.clock_event_reasons.hw_power_brake_slowdown is False
    assert g.clock_event_reasons.sw_power_cap_us == 9840338777
    assert (g.power_limit_w, g.power_limit_min_w, g.power_limit_max_w) == (350, 100, 480)
    assert g.temperature_thresholds == TemperatureThresholds(
        shutdown_c=98, slowdown_c=95, max_operating_c=93, target_c=83
    )


def test_xml_old_throttle_names_and_power_readings() -> None:
    """R460 names them clocks_throttle_reasons; power_readings/power_limit is the requested
    limit there, enforced_power_limit the enforced one."""
    gpus = _xml("datakit_gtx-8card.xml").gpus
    assert [g.clock_event_reasons.sw_power_cap for g in gpus if g.clock_event_reasons] == [
        False, False, False, True, False, False, True, False
    ]
    g = gpus[3]
    assert g.clock_event_reasons is not None and g.clock_event_reasons.hw_slowdown is False
    assert g.clock_event_reasons.sw_power_cap_us is None  # no counters before R535
    assert (g.power_limit_w, g.power_limit_requested_w, g.power_limit_default_w) == (
        250, 250, 250
    )
    assert (g.power_limit_min_w, g.power_limit_max_w) == (100, 250)
    assert g.temperature_thresholds == TemperatureThresholds(
        shutdown_c=90, slowdown_c=87, max_operating_c=83, memory_max_c=85
    )
    assert [g.utilization_memory_pct for g in gpus] == [52, 41, 42, 12, 55, 50, 22, 4]


def test_xml_mig_memory_used_free() -> None:
    g = _xml("telegraf_a100-sxm4-v12.xml").gpus[0]
    assert [(m.memory_total_mib, m.memory_used_mib, m.memory_free_mib) for m in g.mig_devices] == [
        (19968, 12, 19955)
    ] * 4
    assert g.temperature_thresholds == TemperatureThresholds(
        shutdown_c=92, slowdown_c=89, max_operating_c=85, memory_max_c=95
    )
    assert g.utilization_memory_pct is None  # N/A under MIG
    assert g.fabric is None  # A100: fabric state N/A (NVML fabric info is Hopper+)


# ----------------------------------------------------------------------------- -q text


def test_text_560_thresholds_limits_reasons() -> None:
    report = parse_nvidia_smi_text(
        (TEXT / "gpud_nvidia-smi-query.560.35.03.out.0.valid.txt").read_text()
    )
    g = report.gpus[0]
    assert g.clock_event_reasons == IDLE_ONLY
    assert g.temperature_thresholds == TemperatureThresholds(
        shutdown_c=100, slowdown_c=97, max_operating_c=91, memory_max_c=95, target_c=84
    )
    assert (g.power_limit_w, g.power_limit_requested_w, g.power_limit_default_w) == (
        250, 250, 250
    )
    assert (g.power_limit_min_w, g.power_limit_max_w) == (100, 300)
    assert (g.compute_mode, g.utilization_memory_pct) == ("Default", 0)


def test_text_h100_fabric_completed_on_a_real_hgx() -> None:
    report = parse_nvidia_smi_text(
        (TEXT / "gpud_nvidia-smi-query.535.161.08.out.0.valid.txt").read_text()
    )
    assert [g.fabric for g in report.gpus] == [GpuFabric(state="Completed", status="Success")] * 8
    assert {g.architecture for g in report.gpus} == {"Hopper"}


def test_text_r610_ceiling_limits_and_counters() -> None:
    g = parse_nvidia_smi_text(_bundle(RTX2080_R610, Q_LOAD)).gpus[0]
    assert (g.power_limit_w, g.power_limit_requested_w, g.power_limit_default_w) == (
        250, 250, 250
    )
    assert (g.power_limit_min_w, g.power_limit_max_w) == (105, 350)
    assert g.clock_event_reasons is not None
    assert g.clock_event_reasons.sw_power_cap_us == 15820333506
    assert g.temperature_thresholds == TemperatureThresholds(
        shutdown_c=100, slowdown_c=97, max_operating_c=89, target_c=84
    )


def test_text_mig_devices_memory() -> None:
    g = parse_nvidia_smi_text(_bundle(H100_MIG, Q_LOAD)).gpus[0]
    first = g.mig_devices[0]
    assert (first.gpu_instance_id, first.memory_total_mib) == (2, 40448)
    assert (first.memory_used_mib, first.memory_free_mib) == (11091, 29357)


# ------------------------------------------------------------ the same H100, -q vs CSV


def test_h100_text_and_csv_agree() -> None:
    text = parse_nvidia_smi_text(_bundle(H100, Q_LOAD)).gpus[0]
    csv = parse_query_gpu_report(_bundle(H100, CSV_LOAD)).gpus[0]
    # -q text: everything, concrete values
    assert text.temperature_thresholds == TemperatureThresholds(
        tlimit_c=26, shutdown_tlimit_c=-8, slowdown_tlimit_c=-2, max_operating_tlimit_c=0,
        memory_max_tlimit_c=0,
    )
    assert text.fabric == GpuFabric(
        state="Completed", status="Success", clique_id="0",
        cluster_uuid="00000000-0000-0000-0000-000000000000",
    )
    assert (text.ecc_channel_repair_pending, text.ecc_tpc_repair_pending) == (False, False)
    assert text.ecc_unrepairable_memory is False
    assert text.utilization_memory_pct == 11
    # the CSV of the same GPU a moment later
    assert csv.temperature_thresholds == TemperatureThresholds(tlimit_c=26)
    assert csv.fabric == text.fabric
    assert csv.utilization_memory_pct == 11
    for attr in (
        "power_limit_w", "power_limit_requested_w", "power_limit_default_w",
        "power_limit_min_w", "power_limit_max_w", "compute_mode",
    ):
        assert getattr(csv, attr) == getattr(text, attr), attr
    assert (csv.power_limit_requested_w, csv.power_limit_min_w) == (700, 200)
    assert csv.compute_mode == "Default"
    # reasons and counters: none active, zero time throttled, in both formats
    assert text.clock_event_reasons == ClockEventReasons(
        gpu_idle=False, applications_clocks_setting=False, sw_power_cap=False,
        hw_slowdown=False, hw_thermal_slowdown=False, hw_power_brake_slowdown=False,
        sw_thermal_slowdown=False, sync_boost=False, display_clocks_setting=False,
        sw_power_cap_us=0, sync_boost_us=0, sw_thermal_slowdown_us=0,
        hw_thermal_slowdown_us=0, hw_power_brake_us=0,
    )
    # the exporter does not query display_clocks_setting; everything else agrees
    assert csv.clock_event_reasons == text.clock_event_reasons.model_copy(
        update={"display_clocks_setting": None}
    )


# --------------------------------------------------------------------------- kernel log


def test_xid_process_name() -> None:
    log = (CAPTURED / "kernel-log/gpud_dmesg-time-format-iso.log").read_text()
    by_line = {e.line: e for e in parse_xids(log)}
    assert (by_line[14].code, by_line[14].pid, by_line[14].process_name) == (
        94, 1248209, "python3.10"
    )
    assert (by_line[11].code, by_line[11].pid, by_line[11].process_name) == (48, None, None)


# ------------------------------------------------------- stored snapshots stay readable


def test_snapshot_without_the_new_fields_reads() -> None:
    """A snapshot written before these fields existed reads back with them None."""
    report = parse_nvidia_smi_text(_bundle(H100, Q_LOAD))
    stored = HostFacts(
        facts_version=FACTS_VERSION, collected_at=NOW, nvidia_smi=report
    ).model_dump(mode="json")
    for gpu in stored["nvidia_smi"]["gpus"]:
        for key in (
            "clock_event_reasons", "temperature_thresholds", "fabric", "compute_mode",
            "power_limit_requested_w", "utilization_memory_pct", "ecc_channel_repair_pending",
        ):
            del gpu[key]
    old = HostFacts.model_validate(stored)
    assert old.gpus[0].fabric is None and old.gpus[0].clock_event_reasons is None
    assert old.gpus[0].power_limit_w == 700


# ------------------------------------------------------------------ fabric readiness


NVSWITCH = ExpectedSpec(nvswitch=True)


def _h100_host(**overrides: object) -> HostFacts:
    report = parse_nvidia_smi_text(
        (TEXT / "gpud_nvidia-smi-query.535.161.08.out.0.valid.txt").read_text()
    )
    data: dict[str, object] = {
        "facts_version": FACTS_VERSION, "collected_at": NOW, "nvidia_smi": report,
        "modules": ["nvidia", "ib_umad", "mlx5_ib"], "fabricmanager_active": True,
        "fabricmanager_version": report.driver_version,
    }
    data.update(overrides)
    return HostFacts.model_validate(data)


def _fabric_ready(facts: HostFacts, spec: ExpectedSpec = NVSWITCH) -> tuple[CheckStatus, str]:
    params = load_profiles()["test"].checks["fabric_ready"]
    r = CHECKS["fabric_ready"](facts, CheckContext(now=NOW, spec=spec), params)
    return r.status, r.message


def _with_state(state: str | None, status: str | None = None) -> HostFacts:
    """EDITED: the real 535.161.08 H100 report with GPU 2's fabric state replaced."""
    facts = _h100_host()
    assert facts.nvidia_smi is not None
    gpus = list(facts.nvidia_smi.gpus)
    fabric = None if state is None else GpuFabric(state=state, status=status)
    gpus[2] = gpus[2].model_copy(update={"fabric": fabric})
    report = facts.nvidia_smi.model_copy(update={"gpus": gpus})
    return facts.model_copy(update={"nvidia_smi": report})


def test_fabric_ready_passes_on_a_real_completed_hgx() -> None:
    assert _fabric_ready(_h100_host()) == (CheckStatus.PASS, "fabric Completed on 8 GPUs")


@pytest.mark.parametrize(
    ("facts", "why"),
    [
        (_with_state("In Progress", "N/A"), "GPU 2 fabric state 'In Progress'"),
        (_with_state("Not Started"), "GPU 2 fabric state 'Not Started'"),
        (_with_state("Completed", "NVML_ERROR_UNKNOWN"), "GPU 2 fabric status"),
        (_with_state(None), "GPU 2 (Hopper) reports no fabric state"),  # fail closed
        (_h100_host(fabricmanager_version="550.54.15"), "fabric manager 550.54.15 differs"),
        (_h100_host(fabricmanager_version=None), "fabric manager version not collected"),
        (_h100_host(modules=["nvidia", "mlx5_ib"]), "kernel module ib_umad not loaded"),
        (_h100_host(modules=[]), "kernel modules not collected"),
        (_h100_host(nvidia_smi=None), "GPU report not collected"),
    ],
)
def test_fabric_not_ready_fails(facts: HostFacts, why: str) -> None:
    status, message = _fabric_ready(facts)
    assert status is CheckStatus.FAIL
    assert why in message


def test_reported_state_fails_even_without_nvswitch_in_the_spec() -> None:
    assert _fabric_ready(_with_state("In Progress"), ExpectedSpec())[0] is CheckStatus.FAIL
    assert _fabric_ready(_h100_host(), ExpectedSpec())[0] is CheckStatus.PASS


def test_pcie_host_without_fabric_skips() -> None:
    report = parse_nvidia_smi_text(
        (TEXT / "gpud_nvidia-smi-query.560.35.03.out.0.valid.txt").read_text()
    )
    facts = HostFacts(facts_version=FACTS_VERSION, collected_at=NOW, nvidia_smi=report)
    assert _fabric_ready(facts, ExpectedSpec(nvswitch=False))[0] is CheckStatus.SKIP


def test_an_unready_fabric_never_validates() -> None:
    """No profile passes, not even ``test``: the host stays out of the pool."""
    verdict = evaluate(_with_state("In Progress"), NVSWITCH, None, load_profiles(), None, NOW)
    assert verdict.profiles_passed == set()
    assert verdict.results["fabric_ready"].fault is Fault.FABRICMANAGER_DOWN
    ready = evaluate(_h100_host(), NVSWITCH, None, load_profiles(), None, NOW)
    assert ready.results["fabric_ready"].status is CheckStatus.PASS
    assert not any(r.startswith("fabric_ready") for r in ready.reasons)
    assert any(r.startswith("fabric_ready: GPU 2 fabric state") for r in verdict.reasons)
