"""Typos are never silent, through the services on SQLite and PostgreSQL (issue 29 item 1):
the one NotFound of a host, pool or baseline names the nearest known ones; a selector that
matches nothing says which of its terms is unknown; ``check_pools`` refuses before anything
is written; ``enroll(strict=True)`` refuses an inventory naming an unknown baseline. Each
fails on 84be469/8608b99 (no suggestion, no check_pools, no strict)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.domain.leases import OnExpiry
from gpufleet.errors import ConfigError, NotFound
from gpufleet.inventory import load_inventory
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.allocation import leases
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.select import selected_names
from gpufleet.service.hosts import baselines, operations
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.views.hosts import list_hosts, show_host


def test_unknown_names_get_the_nearest_known(fleet: Fleet, tmp_path: Path) -> None:
    enroll_lab(fleet, tmp_path / "lab", 2, models=["h100-8x"], faults={})
    pool = show_host(fleet, "gpu-01").view.pool
    assert pool == "train-h100"
    with pytest.raises(NotFound, match=r"no host named 'gpu01' \(did you mean gpu-01\?\)"):
        show_host(fleet, "gpu01")
    with pytest.raises(NotFound, match=r"did you mean gpu-01\?"):
        operations.maintenance_on(fleet, "gpu01", "x")
    with pytest.raises(NotFound, match=r"^no pool named 'trian-h100' \(did you mean train-h100"):
        list_hosts(fleet, "pool:trian-h100")
    with fleet.db.session() as s, pytest.raises(
        NotFound, match=r"match selector 'pool:trian-h100,gpu-9\*': no pool named 'trian-h100'"
    ):
        selected_names(s, "pool:trian-h100,gpu-9*")
    with pytest.raises(NotFound, match=r"no pool named 'trian-h100' \(did you mean train-h100"):
        leases.set_policy(fleet, "trian-h100", OnExpiry.NOTIFY)
    with pytest.raises(NotFound, match=r"did you mean train-h100\?\); use --create"):
        baselines.check_pools(fleet, ["trian-h100"], create=False)
    baselines.check_pools(fleet, ["trian-h100"], create=True)
    baselines.check_pools(fleet, [pool], create=False)


def test_enroll_strict_refuses_an_unknown_baseline(fleet: Fleet, tmp_path: Path) -> None:
    inv = tmp_path / "inv.ini"
    inv.write_text("[g]\nh-01 gpufleet_baseline=h100-2026q4\nh-02\n")
    with pytest.raises(ConfigError, match=r"inv.ini:2: host h-01: no baseline named"):
        enroll(fleet, load_inventory(inv), strict=True)
    assert list_hosts(fleet) == []
    rep = enroll(fleet, load_inventory(inv))
    assert rep.added == ["h-01", "h-02"]
    assert [w for w in rep.warnings if "no baseline named 'h100-2026q4'" in w]
