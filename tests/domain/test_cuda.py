"""Issue 26: NVIDIA's driver table and the CUDA gate (domain.cuda)."""

from __future__ import annotations

import pytest

from gpufleet.domain.cuda import (
    cuda_max,
    cuda_refusal,
    cuda_table,
    driver_serves,
    parse_cuda,
    parse_table,
)
from gpufleet.domain.placement import HostView, Request, allocatable, explain
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError


def test_shipped_table_rows_from_nvidia_release_notes() -> None:
    t = cuda_table()
    rows = dict(t.toolkit)
    assert rows[(12, 2)] == "535.54.03" and rows[(12, 4)] == "550.54.14"
    assert rows[(11, 8)] == "520.61.05" and rows[(12, 0)] == "525.60.13"
    # oldest first and each minimum no older than the one before
    versions = [v for v, _ in t.toolkit]
    assert versions == sorted(versions)
    drivers = [tuple(int(p) for p in d.split(".")) for _, d in t.toolkit]
    assert drivers == sorted(drivers)
    assert t.minor_compat == {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


@pytest.mark.parametrize(
    ("driver", "top"),
    [
        ("535.154.05", "12.2"),  # the seed's node
        ("535.54.03", "12.2"),  # exactly the 12.2 GA driver
        ("535.54.02", "12.1"),
        ("550.90.07", "12.4"),
        ("545.23.08", "12.3"),
        ("570.86.10", "12.8"),
        ("580.65.06", "13.0"),
        ("470.82.01", "11.4"),
        ("440.33", None),  # older than every row
        (None, None),
        ("unknown", None),
    ],
)
def test_cuda_max(driver: str | None, top: str | None) -> None:
    assert cuda_max(driver) == top


def test_seed_refusal_names_the_driver_and_what_it_serves() -> None:
    assert cuda_refusal("535.154.05", "12.4") == "driver 535.154.05 serves CUDA up to 12.2"
    assert driver_serves("550.54.14", "12.4") and driver_serves("550.90.07", "12.4.1")
    assert not driver_serves("535.154.05", "12.4")
    assert cuda_refusal(None, "12.4") == "no NVIDIA driver version collected"
    assert "newer than gpufleet's driver table" in (cuda_refusal("999.1", "14.0") or "")


@pytest.mark.parametrize("bad", ["12", "x", "12.4a", "", "v12.4"])
def test_malformed_cuda_is_a_usage_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="MAJOR\\.MINOR"):
        parse_cuda(bad)


def test_table_rows_that_do_not_parse_are_named() -> None:
    with pytest.raises(ConfigError, match="toolkit row 'twelve'"):
        parse_table("toolkit: {twelve: '525.60.13'}")
    with pytest.raises(ConfigError, match="CUDA 12\\.0: driver 'new'"):
        parse_table("toolkit: {'12.0': new}")
    with pytest.raises(ConfigError, match="no toolkit rows"):
        parse_table("minor_compat: {'12': '525.60.13'}")


def test_placement_leaves_out_hosts_whose_driver_cannot_serve_it() -> None:
    old = HostView("node-a", HostState.AVAILABLE, 8, "H100", driver="535.154.05")
    new = HostView("node-b", HostState.AVAILABLE, 8, "H100", driver="550.90.07")
    req = Request(gpus=8, cuda="12.4")
    assert not allocatable(req, old) and allocatable(req, new)
    assert allocatable(Request(gpus=8), old)  # no --cuda: no gate
    refusal = explain(Request(gpus=16, cuda="12.4"), [old, new])
    assert "1 cannot run CUDA 12.4 (node-a: driver 535.154.05 serves CUDA up to 12.2)" in (
        refusal.message
    )
    assert refusal.counts["cuda_refused"] == 1
    assert "CUDA 12.4" in Request(gpus=8, cuda="12.4").describe()
