"""The pin table (gpufleet.domain.pins) is the one place a pinned baseline field is declared:
every pin has its Baseline field, drift field, check (in every packaged profile) and
``baseline create`` flag, and the generated drift and checks behave for each pin alike."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from gpufleet.cli.baseline import app as baseline_app
from gpufleet.collect.ib import parse_ibstat
from gpufleet.domain.accelerators import SoftwareVersions, Vendor
from gpufleet.domain.checks import CHECK_PARAMS, CHECKS, DRIFT_CHECKS, CheckContext, CheckStatus
from gpufleet.domain.drift import DRIFT_FIELDS, DriftItem, diff_against_baseline
from gpufleet.domain.facts import FACTS_VERSION, HostFacts
from gpufleet.domain.pins import BASELINE_META, PINS, Compare, Pin, PinValue, baseline_values
from gpufleet.domain.profiles import Decision, evaluate, load_profiles
from gpufleet.domain.spec import Baseline, ExpectedSpec
from gpufleet.testing import DRIVER, NOW, make_facts

IDS = [p.field for p in PINS]
CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "captured"


#: The Ascend stack of a real 910B3 host (mind-cluster kg_parse capture: driver and firmware
#: version.info, ascend_toolkit_install.info), as the Ascend plugin reads it.
ASCEND_STACK = SoftwareVersions(driver="23.0.7", firmware="7.1.0.11.220", runtime="7.0.T10")


def clean() -> HostFacts:
    """The clean host, with every pinned fact collected (the accelerator firmware and
    runtime pins read a second vendor's stack: an Ascend one here)."""
    facts = make_facts(container_toolkit="1.16.2", fabricmanager_version=DRIVER)
    return facts.model_copy(update={"accelerator_versions": {Vendor("huawei"): ASCEND_STACK}})


def from_host(facts: HostFacts) -> Baseline:
    return Baseline.model_validate({"name": "ref"} | baseline_values(facts))


def other(pin: Pin, value: PinValue) -> PinValue:
    """A pinned value the clean host does not have."""
    if pin.compare is Compare.MAP:
        assert isinstance(value, dict) and value
        key = sorted(value)[0]
        return {**value, key: "not-this"}
    if pin.compare is Compare.ONE_OF:
        return ["0.0-not-this"]
    return "0.0-not-this"


def test_pins_and_baseline_fields_are_the_same_set() -> None:
    pinned = [f for f in Baseline.model_fields if f not in BASELINE_META]
    assert sorted(pinned) == sorted(p.field for p in PINS)
    assert tuple(p.drift_field for p in PINS) == DRIFT_FIELDS
    assert frozenset(p.check for p in PINS) == DRIFT_CHECKS


@pytest.mark.parametrize("pin", PINS, ids=IDS)
def test_every_pin_has_a_check_in_every_profile(pin: Pin) -> None:
    assert pin.check in CHECKS and CHECK_PARAMS[pin.check] == {}
    assert CHECKS[pin.check].__doc__ == pin.doc
    for name, profile in load_profiles().items():
        assert pin.check in profile.checks, f"{pin.check} missing from profile {name}"
        assert not profile.checks[pin.check].get("advisory"), (name, pin.check)


def test_every_pin_has_a_baseline_create_flag() -> None:
    group = typer.main.get_command(baseline_app)
    create = group.commands["create"]  # type: ignore[attr-defined]
    options = {o: p for p in create.params for o in p.opts}
    for pin in PINS:
        assert pin.flag in options, f"baseline create has no {pin.flag} for {pin.field}"
        param = options[pin.flag]
        assert param.name == pin.field
        assert param.multiple is (pin.compare in (Compare.ONE_OF, Compare.MAP)), pin.flag


@pytest.mark.parametrize("pin", PINS, ids=IDS)
def test_a_baseline_from_the_host_pins_it_and_shows_no_drift(pin: Pin) -> None:
    facts = clean()
    baseline = from_host(facts)
    assert getattr(baseline, pin.field), f"--from-host did not pin {pin.field}"
    assert diff_against_baseline(facts, baseline) == []
    r = CHECKS[pin.check](facts, CheckContext(now=NOW, baseline=baseline), {})
    assert r.status is CheckStatus.PASS, r.message


@pytest.mark.parametrize("pin", PINS, ids=IDS)
def test_a_changed_pin_is_drift_on_its_field_and_fails_its_check_only(pin: Pin) -> None:
    facts = clean()
    ref = from_host(facts)
    changed = ref.model_copy(update={pin.field: other(pin, getattr(ref, pin.field))})
    items = diff_against_baseline(facts, changed)
    assert items, pin.field
    assert all(i.field.split(".")[0] == pin.drift_field for i in items), items
    ctx = CheckContext(now=NOW, baseline=changed)
    for p in PINS:
        r = CHECKS[p.check](facts, ctx, {})
        want = CheckStatus.FAIL if p is pin else CheckStatus.PASS
        assert (r.status, r.fault) == (want, None), (p.check, r.message)
    assert "expected" in CHECKS[pin.check](facts, ctx, {}).message or pin.compare is Compare.ONE_OF


@pytest.mark.parametrize("pin", PINS, ids=IDS)
def test_an_unpinned_field_is_skipped(pin: Pin) -> None:
    facts = clean()
    unpinned = from_host(facts).model_copy(update={pin.field: Baseline.model_fields[pin.field]
                                                   .get_default(call_default_factory=True)})
    r = CHECKS[pin.check](facts, CheckContext(now=NOW, baseline=unpinned), {})
    assert r.status is CheckStatus.SKIP and "does not pin" in r.message
    r = CHECKS[pin.check](facts, CheckContext(now=NOW, baseline=None), {})
    assert (r.status, r.message) == (CheckStatus.SKIP, "no baseline assigned")


# ----------------------------------------------- the fact added through the table: HCA firmware


def ibstat_facts(capture: str) -> HostFacts:
    """Facts with the ports of a real ibstat capture (gpud, Apache-2.0; unedited)."""
    path = CAPTURED / "ib" / capture
    assert path.is_file(), f"capture {capture} missing"
    return HostFacts(facts_version=FACTS_VERSION, collected_at=NOW,
                     ib_ports=parse_ibstat(path.read_text(), capture))


def test_hca_firmware_pinned_from_a_real_host_and_drift_on_another() -> None:
    # Two real H100 hosts: the reference runs ConnectX-7 28.39.1002 and 22.39.1002 on the
    # frontend NICs (mlx5_1, _2, _7, _8); the other still has 22.38.1002 on those four.
    ref = ibstat_facts("gpud_ibstat.47.0.h100.all.active.0.txt")
    baseline = from_host(ref)
    assert baseline.hca_firmware == ["22.39.1002", "28.39.1002"]
    assert diff_against_baseline(ref, baseline) == []
    ctx = CheckContext(now=NOW, baseline=baseline)
    ok = CHECKS["hca_firmware"](ref, ctx, {})
    assert (ok.status, ok.message) == (CheckStatus.PASS, "HCA firmware version as in baseline ref")

    other = ibstat_facts("gpud_ibstat.47.0.h100.some.down.0.txt")
    assert diff_against_baseline(other, baseline) == [
        DriftItem("hca_firmware", "22.39.1002, 28.39.1002", "22.38.1002")
    ]
    r = CHECKS["hca_firmware"](other, ctx, {})
    assert (r.status, r.fault) == (CheckStatus.FAIL, None)
    assert r.message == (
        "HCA firmware not in baseline ref (22.39.1002, 28.39.1002): "
        "mlx5_1, mlx5_2, mlx5_7, mlx5_8: 22.38.1002"
    )
    # On an otherwise clean host with the same baseline: drift, not hardware; the host stays
    # in validation with the HCA firmware as the reason, whichever profile it tries.
    host = clean().model_copy(update={"ib_ports": other.ib_ports})
    pinned = from_host(clean()).model_copy(update={"hca_firmware": baseline.hca_firmware})
    out = evaluate(host, ExpectedSpec(), pinned, load_profiles(), None, NOW)
    assert out.decision is Decision.STAY_VALIDATING and out.faults == set()
    assert [d.name for d in out.drift] == ["hca_firmware"]
    assert f"hca_firmware: {r.message}" in out.reasons
    assert out.profiles_passed == set()  # drift fails every profile


def test_hca_firmware_not_collected_is_not_drift() -> None:
    baseline = from_host(ibstat_facts("gpud_ibstat.47.0.h100.all.active.0.txt"))
    blind = HostFacts(facts_version=FACTS_VERSION, collected_at=NOW, ib_ports=None)
    assert diff_against_baseline(blind, baseline) == []
    r = CHECKS["hca_firmware"](blind, CheckContext(now=NOW, baseline=baseline), {})
    assert (r.status, r.message) == (CheckStatus.SKIP, "HCA firmware version not collected")
