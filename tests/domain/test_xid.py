from __future__ import annotations

import re

import pytest

from gpufleet.domain.xid import XidInfo, XidPolicy
from gpufleet.errors import ConfigError


@pytest.fixture(scope="module")
def policy() -> XidPolicy:
    return XidPolicy.load_default()


@pytest.mark.parametrize(
    ("code", "fatal"),
    [(13, False), (31, False), (43, False), (45, False), (46, True), (48, True), (63, False),
     (64, True), (74, True), (79, True), (94, False), (95, True), (109, True), (119, True),
     (144, True), (150, True), (154, False), (157, False), (160, True)],
)
def test_default_catalog(policy: XidPolicy, code: int, fatal: bool) -> None:
    assert policy.is_fatal(code) is fatal
    assert policy.is_known(code)


def test_catalog_rows(policy: XidPolicy) -> None:
    info = policy.lookup(79)
    assert (info.mnemonic, info.action, info.fatal) == (
        "GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", True)
    assert info.describe() == "Xid 79 (GPU_HAS_FALLEN_OFF_THE_BUS, RESTART_BM)"
    # Descriptions with commas survive the YAML flow mappings whole.
    assert policy.lookup(48).description.endswith("reset GPU, check SRAM threshold flag")


def test_unknown_codes_are_nonfatal_but_flagged(policy: XidPolicy) -> None:
    info = policy.lookup(4242)
    assert info == XidInfo(4242, "UNKNOWN", "UNKNOWN", fatal=False, known=False)
    assert not policy.is_fatal(4242) and not policy.is_known(4242)


def test_merged_overrides(policy: XidPolicy) -> None:
    site = policy.merged({109: False, "4242": True, 13: {"fatal": True, "action": "RESET_GPU"}})
    assert not site.is_fatal(109) and site.lookup(109).mnemonic == "CTXSW_TIMEOUT_ERROR"
    assert site.is_fatal(4242) and site.is_known(4242)
    assert site.lookup(13).action == "RESET_GPU" and site.lookup(13).mnemonic == "GR_EXCEPTION"
    assert policy.is_fatal(109), "merged() must not modify the original"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"x": True}, "must be an integer"),
        ({-1: True}, "must be positive"),
        ({13: "yes"}, "expected true/false or a mapping"),
        ({13: {"fatal": "yes"}}, "'fatal' must be true or false"),
        ({13: {"severity": 1}}, "unknown field(s) severity"),
    ],
)
def test_bad_overrides(policy: XidPolicy, overrides: dict[object, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        policy.merged(overrides)  # type: ignore[arg-type]


def test_from_yaml_errors() -> None:
    with pytest.raises(ConfigError, match=r"site\.yaml: expected a top-level 'xids' list"):
        XidPolicy.from_yaml("codes: []", source="site.yaml")
    with pytest.raises(ConfigError, match="needs a 'code'"):
        XidPolicy.from_yaml("xids: [{fatal: true}]")
    with pytest.raises(ConfigError, match="invalid YAML"):
        XidPolicy.from_yaml("xids: [")
    assert XidPolicy.from_yaml("xids: [{code: 5, fatal: true}]").is_fatal(5)
