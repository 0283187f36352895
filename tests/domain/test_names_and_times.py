"""The one "did you mean" (gpufleet.domain.names) and the one reading of an operator's time
(gpufleet.domain.times), on plain values. New in issue 29: both modules are missing on
84be469/8608b99."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from gpufleet.domain.names import close_names, did_you_mean
from gpufleet.domain.times import as_utc, local_zone, parse_time, shown
from gpufleet.errors import ConfigError

SHANGHAI = ZoneInfo("Asia/Shanghai")


def test_did_you_mean_names_the_nearest_known_names_only() -> None:
    hosts = ["gpu-01", "gpu-02", "gpu-10", "cpu-01"]
    assert did_you_mean("gpu01", hosts) == " (did you mean gpu-01?)"
    assert did_you_mean("GPU-1", ["gpu-01", "gpu-10"]) == " (did you mean gpu-01 or gpu-10?)"
    assert did_you_mean("trian-a100", ["train-a100", "infer-h100"]) == (
        " (did you mean train-a100?)"
    )
    assert did_you_mean("zzzz", hosts) == "" and did_you_mean("gpu01", []) == ""
    assert close_names("Train-A100", ["train-a100"]) == ["train-a100"]


def test_a_time_without_a_zone_is_in_the_operators_zone() -> None:
    assert parse_time("2026-12-12T08:00", "--start", SHANGHAI) == datetime(
        2026, 12, 12, 0, 0, tzinfo=UTC
    )
    assert parse_time("2026-12-12 08:00", "--start", UTC) == datetime(2026, 12, 12, 8, tzinfo=UTC)
    # a zone given wins; Z is UTC
    assert parse_time("2026-12-12T08:00+02:00", "--at", SHANGHAI).hour == 6
    assert parse_time("2026-12-12T08:00Z", "--at", SHANGHAI).hour == 8
    with pytest.raises(ConfigError, match="--at 'tomorrow': not a time"):
        parse_time("tomorrow", "--at", UTC)
    with pytest.raises(ConfigError, match="--at '': not a time"):
        parse_time("", "--at", UTC)


def test_naive_means_utc_and_shown_in_the_zone() -> None:
    assert as_utc(datetime(2026, 1, 5, 10)) == datetime(2026, 1, 5, 10, tzinfo=UTC)
    at = shown(datetime(2026, 12, 12, 0, tzinfo=UTC), SHANGHAI)
    assert at.strftime("%H:%M %Z") == "08:00 CST"


def test_the_local_zone_comes_from_tz() -> None:
    assert local_zone({"TZ": "Asia/Shanghai"}) == SHANGHAI
    assert local_zone({"TZ": ":Asia/Shanghai"}) == SHANGHAI
    assert local_zone({}) is None and local_zone({"TZ": "CST-8"}) is None  # the C library's
