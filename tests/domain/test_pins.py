"""The pin table (gpufleet.domain.pins) is the one place a pinned baseline field is declared:
every pin has its Baseline field, drift field, check (in every packaged profile) and
``baseline create`` flag, and the generated drift and checks behave for each pin alike."""

from __future__ import annotations

import pytest
import typer

from gpufleet.cli.baseline import app as baseline_app
from gpufleet.domain.checks import CHECK_PARAMS, CHECKS, DRIFT_CHECKS, CheckContext, CheckStatus
from gpufleet.domain.drift import DRIFT_FIELDS, diff_against_baseline
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.pins import BASELINE_META, PINS, Compare, Pin, PinValue, baseline_values
from gpufleet.domain.profiles import load_profiles
from gpufleet.domain.spec import Baseline
from gpufleet.testing import DRIVER, NOW, make_facts

IDS = [p.field for p in PINS]


def clean() -> HostFacts:
    """The clean host, with every pinned fact collected."""
    return make_facts(container_toolkit="1.16.2", fabricmanager_version=DRIVER)


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
