"""store/repo.py: the shared queries (host by name, hosts with their latest facts, the
baseline that applies to a host), on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.domain.spec import Baseline, BaselineStatus
from gpufleet.errors import NotFound
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet, write_inventory
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.select import select_hosts
from gpufleet.service.hosts.baselines import drift, save_baseline, set_pool_baseline
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.views.summary import host_labels
from gpufleet.store import repo
from gpufleet.store.tables import FactSnapshot, Host


def _lab(fleet: Fleet, tmp_path: Path) -> None:
    d = tmp_path / "lab"
    d.mkdir()
    fl = create_fleet(3, models=["h100-8x"], faults={})
    fl.save(d)
    write_inventory(fl, d / "inventory.ini", transport="sim", lab_dir=d)
    text = (d / "inventory.ini").read_text()
    # gpu-01, gpu-02 in pool "train"; gpu-03 names its own baseline (enroll points its
    # pool "solo" at it too).
    text = text.replace("gpu-01 ", "gpu-01 gpufleet_pool=train ", 1)
    text = text.replace("gpu-02 ", "gpu-02 gpufleet_pool=train ", 1)
    text = text.replace("gpu-03 ", "gpu-03 gpufleet_pool=solo gpufleet_baseline=own ", 1)
    (d / "inventory.ini").write_text(text)
    enroll(fleet, load_inventory(d / "inventory.ini"))


def test_host_by_name_or_not_found(fleet: Fleet, tmp_path: Path) -> None:
    _lab(fleet, tmp_path)
    with fleet.db.session() as s:
        assert repo.host_by_name(s, "gpu-02").name == "gpu-02"
        assert repo.host_by_name(s, "gpu-02", for_update=True).name == "gpu-02"
        with pytest.raises(NotFound, match="no host named 'gpu-9'"):
            repo.host_by_name(s, "gpu-9")


def test_hosts_with_latest_facts_follow_the_selector(fleet: Fleet, tmp_path: Path) -> None:
    _lab(fleet, tmp_path)
    with fleet.db.session() as s:
        rows = repo.hosts_with_latest_facts(s, select_hosts(None))
        assert [(h.name, snap) for h, snap in rows] == [
            ("gpu-01", None), ("gpu-02", None), ("gpu-03", None)
        ]
    collect(fleet, "gpu-01,gpu-03")
    collect(fleet, "gpu-01")  # a second snapshot: the latest one is returned
    with fleet.db.session() as s:
        rows = repo.hosts_with_latest_facts(s, select_hosts("gpu-*"))
        got = {h.name: snap for h, snap in rows}
        assert list(got) == ["gpu-01", "gpu-02", "gpu-03"]
        latest = {h.name: h.latest_snapshot_id for h, _ in rows}
        assert got["gpu-01"] is not None and got["gpu-01"].id == latest["gpu-01"]
        assert got["gpu-02"] is None
        assert got["gpu-03"] is not None and got["gpu-03"].id == latest["gpu-03"]
        # Extra clauses may name the snapshot table (a model filter).
        only = repo.hosts_with_latest_facts(
            s, select_hosts("state:enrolled,state:validating"), FactSnapshot.gpu_count == 8
        )
        assert [h.name for h, _ in only] == ["gpu-01", "gpu-03"]
        assert repo.hosts_with_latest_facts(s, select_hosts("nope-*")) == []


def test_the_baseline_that_applies_to_a_host(fleet: Fleet, tmp_path: Path) -> None:
    _lab(fleet, tmp_path)
    with fleet.db.session() as s:
        host = repo.host_by_name(s, "gpu-01")
        assert repo.baseline_name_for_host(s, host) is None
        assert repo.baseline_for_host(s, host) is None
    save_baseline(fleet, Baseline(name="pool-b", status=BaselineStatus.VALIDATED, driver="1.0"))
    set_pool_baseline(fleet, "train", "pool-b")
    set_pool_baseline(fleet, "solo", "pool-b")
    with fleet.db.session() as s:
        one = repo.host_by_name(s, "gpu-01")
        three = repo.host_by_name(s, "gpu-03")
        b = repo.baseline_for_host(s, one)
        assert b is not None and b.name == "pool-b" and b.driver == "1.0"
        assert b.status is BaselineStatus.VALIDATED
        # The host's own gpufleet_baseline wins over its pool's; "own" is not stored (yet).
        assert repo.baseline_name_for_host(s, three) == "own"
        assert repo.baseline_for_host(s, three) is None
    save_baseline(fleet, Baseline(name="own", driver="2.0"))
    with fleet.db.session() as s:
        b3 = repo.baseline_for_host(s, s.get_one(Host, three.id))
        assert b3 is not None and b3.name == "own" and b3.driver == "2.0"
    # Drift and labels use the same answer.
    collect(fleet)
    rep = drift(fleet)
    assert rep.baselines == {"gpu-01": "pool-b", "gpu-02": "pool-b", "gpu-03": "own"}
    labels = {h.host: h.labels for h in host_labels(fleet)}
    assert labels["gpu-03"]["gpufleet.io/baseline"] == "own"
    assert labels["gpu-01"]["gpufleet.io/baseline"] == "pool-b"
