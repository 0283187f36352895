"""Issues 25 and 30 item 3: the fast read layer (:mod:`gpufleet.service.core.fastread`) gives
exactly what the store's queries give, on both databases, whether it reads on the driver's own
connection (the lean start) or on the store engine's (Typer, the API); it declines (None)
whatever it cannot answer exactly, which the store's query then reports."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from gpufleet.config import load_settings, unknown_variables
from gpufleet.config_lean import lean_store
from gpufleet.domain.placement import Request
from gpufleet.errors import ConfigError, NotFound
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.allocation.allocation import allocate
from gpufleet.service.allocation.leases import get_lease, lease_view, release, show_lease
from gpufleet.service.core import fastread
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.operations import maintenance_on
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import list_hosts
from gpufleet.store.readmodel import open_read

SELECTORS = [
    None, "", " ", "all", " all ", "gpu-0*", "GPU-01", "gpu-0?", "gpu_0?", "pool:train-a100",
    "pool:train-h100,gpu-01", "state:available", "state:MAINTENANCE",
    "model:h100", "rack:R01", "group:GPU_A100", "group:lab", "gpu-01, gpu-02", "gpu-%",
]  # fmt: skip

DECLINED = ["nope", "state:bogus", "gpu-0[12]", "a,,b", "kind:x", "pool:nope",
            ",".join(["x"] * 501)]  # fmt: skip


def _fleet(fleet: Fleet, tmp_path: Path) -> None:
    enroll_lab(fleet, tmp_path / "lab", 5, models=["a100-8x", "h100-8x"],
               faults={"gpu-03": ["gpu-missing"]})  # fmt: skip
    collect(fleet, "gpu-01,gpu-02,gpu-03,gpu-04")  # gpu-05: never collected
    validate(fleet, "gpu-01,gpu-02,gpu-03")  # gpu-03: quarantined, with its fault
    maintenance_on(fleet, "gpu-02", "cables", eta=fleet.clock() + timedelta(hours=3))


def test_host_list_is_the_store_query_on_both_connections(fleet: Fleet, tmp_path: Path) -> None:
    _fleet(fleet, tmp_path)
    with open_read(fleet.db.url) as lean:
        assert lean is not None
        for sel in SELECTORS:
            try:
                want = list_hosts(fleet, sel, limit=10_000)  # a page: the store's query
            except NotFound:  # matches nothing: declined, the store's query reports it
                assert sel in ("gpu_0?", "gpu-%", "rack:R01"), sel
                assert fastread.host_list(lean, sel) is None, sel
                continue
            assert fastread.host_list(lean, sel) == want, sel
            with fastread.fleet_read(fleet) as engine:
                assert fastread.host_list(engine, sel) == want, sel
            assert list_hosts(fleet, sel) == want, sel  # the command's read
        got = fastread.host_list(lean, "gpu-02")
        assert got is not None and got[0].eta is not None and got[0].state == "maintenance"
        for sel in DECLINED:
            assert fastread.host_list(lean, sel) is None, sel
            with pytest.raises((NotFound, ConfigError)):
                list_hosts(fleet, sel)  # the store's query reports it


def test_lease_is_the_store_read_on_both_connections(fleet: Fleet, tmp_path: Path) -> None:
    enroll_lab(fleet, tmp_path / "lab", 3, models=["h100-8x"], faults={})
    validate(fleet)
    end = fleet.clock() + timedelta(hours=20)
    one = allocate(fleet, Request(hosts=2), owner="team-a", purpose="llm", until=end,
                   users=["alice", "bob"])  # fmt: skip
    two = allocate(fleet, Request(hosts=1), owner="team-b", purpose="eval", until=end)
    assert one.lease is not None and two.lease is not None
    release(fleet, two.lease.id, "done early")
    for lease_id in (one.lease.id, two.lease.id):
        with fleet.db.session() as s:
            want = lease_view(get_lease(s, lease_id))
        with open_read(fleet.db.url) as lean:
            assert lean is not None
            assert fastread.lease(lean, lease_id) == want
            assert fastread.lease(lean, 99) is None
        assert show_lease(fleet, lease_id) == want
    assert show_lease(fleet, two.lease.id).released_at is not None
    with pytest.raises(NotFound, match="no lease 99"):
        show_lease(fleet, 99)


def test_open_read_declines_what_it_cannot_read(tmp_path: Path, fleet: Fleet) -> None:
    for url in ("sqlite:///" + str(tmp_path / "missing.db"), "sqlite://", "mysql://x/y",
                "postgresql+psycopg://nobody@127.0.0.1:9/x"):  # fmt: skip
        with open_read(url) as got:
            assert got is None, url
    with open_read(fleet.db.url) as got:
        assert got is not None


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"GPUFLEET_HOME": "{tmp}/h"},
        {"gpufleet_home": "{tmp}/h", "GPUFLEET_LANG": "zh_CN"},
        {"GPUFLEET_HOME": "~/x"},
        {"GPUFLEET_DATABASE_URL": "sqlite:///{tmp}/a.db"},
        {"GPUFLEET_DATABASE_URL": ""},
        {"GPUFLEET_DATABASE_URL": "postgresql+psycopg://u:pw@127.0.0.1:5432/db"},
        {"GPUFLEET_ACTOR": "ci-42"},
    ],
)
def test_lean_store_is_what_the_settings_say(env: dict[str, str], tmp_path: Path) -> None:
    environ = {k: v.replace("{tmp}", str(tmp_path)) for k, v in env.items()}
    got = lean_store(environ=environ)
    assert got is not None
    import os

    saved = dict(os.environ)
    try:
        for k in [k for k in os.environ if k.upper().startswith("GPUFLEET_")]:
            del os.environ[k]
        os.environ.update(environ)
        full = load_settings()
        assert not unknown_variables()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert (got.home, got.database_url, got.db_url()) == (
        full.home, full.database_url, full.db_url()
    )
    flags = lean_store(tmp_path / "flag", "sqlite:///x.db", environ=environ)
    assert flags is not None and flags.home == tmp_path / "flag"
    assert flags.db_url() == "sqlite:///x.db"


@pytest.mark.parametrize(
    "env",
    [
        {"GPUFLEET_FORKS": "3"},  # a setting it does not validate
        {"GPUFLEET_FROKS": "3"},  # an unknown variable (the settings warn)
        {"GPUFLEET_URL": "http://127.0.0.1:9"},  # remote mode
        {"GPUFLEET_LOG_LEVEL": "DEBUG"},
        {"GPUFLEET_HOME": "a", "gpufleet_home": "b"},  # given twice
        {"GPUFLEET_HOME": "{tmp}/file"},  # not a directory (the settings refuse it)
        {"GPUFLEET_HOME": ""},
        {"GPUFLEET_ACTOR": " "},  # the settings refuse it
        {"GPUFLEET_ACTOR": "a\x1bb"},
        {"GPUFLEET_DATABASE_URL": "postgresql://u@h/db"},  # another driver
        {"GPUFLEET_DATABASE_URL": "postgresql+psycopg://u:p%40@h/db"},
        {"GPUFLEET_DATABASE_URL": "postgresql+psycopg://u@h/db?sslmode=require"},
        {"GPUFLEET_DATABASE_URL": "sqlite:///x.db?mode=ro"},
        {"GPUFLEET_DATABASE_URL": "sqlite://"},
        {"GPUFLEET_DATABASE_URL": " sqlite:///x.db"},
        {"GPUFLEET_DATABASE_URL": "mysql://u@h/db"},
    ],
)
def test_lean_store_declines_what_it_cannot_vouch_for(
    env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("")
    environ = {k: v.replace("{tmp}", str(tmp_path)) for k, v in env.items()}
    assert lean_store(environ=environ) is None


def test_the_stored_spec_is_the_models_shape_or_declined() -> None:
    """``labels HOST`` reads a stored expected spec without pydantic only when the model
    (:class:`ExpectedSpec`) would take it unchanged; its fields are the model's."""
    import types as pytypes
    from typing import get_args

    from gpufleet.domain.spec import ExpectedSpec
    from gpufleet.domain.spec_stored import FIELDS, stored_spec

    assert list(FIELDS) == list(ExpectedSpec.model_fields)
    for name, kinds in FIELDS.items():
        annotation = ExpectedSpec.model_fields[name].annotation
        assert isinstance(annotation, pytypes.UnionType), name
        assert [a for a in get_args(annotation) if a is not type(None)] == [kinds[0]], name
    taken: list[dict[str, object]] = [
        {},
        {"gpu_count": 8, "gpu_model": "A100", "nvswitch": True, "ib_ports": 8,
         "ib_rate_gbps": 200.0, "rack": "r01", "mig_strategy": "mixed"},
        {"ib_rate_gbps": 200, "rack": None},
    ]  # fmt: skip
    for d in taken:
        got = stored_spec(d)
        model = ExpectedSpec.model_validate(d)
        assert got is not None, d
        assert (got.rack, got.ib_ports, got.ib_rate_gbps, got.mig_strategy) == (
            model.rack, model.ib_ports, model.ib_rate_gbps, model.mig_strategy
        )
    for d in ({"ib_ports": 8.0}, {"mig_strategy": "bogus"}, {"extra": 1}, {"nvswitch": 1},
              {"gpu_count": True}, {"rack": 5}, []):  # fmt: skip
        assert stored_spec(d) is None, d


def test_the_host_list_json_is_the_apis_host_out(fleet: Fleet, tmp_path: Path) -> None:
    """``hosts list --json`` writes the API's ``HostOut`` without importing the API's
    schemas (pydantic): the same keys, in the same order, with the same values."""
    from gpufleet.api.schemas import HostOut
    from gpufleet.cli.hosts_list import host_json

    _fleet(fleet, tmp_path)
    rows = list_hosts(fleet)
    assert any(r.eta is not None for r in rows) and any(r.fault for r in rows)
    assert any(r.last_collected_at is None for r in rows)
    for r in rows:
        assert list(host_json(r).items()) == list(HostOut.of(r).json_dict().items()), r.name


def test_host_detail_is_the_same_on_both_connections_and_the_store(
    fleet: Fleet, tmp_path: Path
) -> None:
    """``hosts show``'s read (issue 30 item 3): the same page on the driver's connection and
    the engine's; its events, open alarms and holding leases are the store's; an unknown name
    is declined (None) and :func:`show_host` names the nearest hosts."""
    from gpufleet.service.core.alarms import open_alarms
    from gpufleet.service.views.hosts import list_events, show_host
    from gpufleet.store.repo import host_by_name

    _fleet(fleet, tmp_path)
    got = allocate(fleet, Request(hosts=1), owner="o", purpose="p",
                   until=fleet.clock() + timedelta(hours=2))  # fmt: skip
    assert got.lease is not None
    with open_read(fleet.db.url) as lean:
        assert lean is not None
        for name in ("gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-05"):
            detail = fastread.host_detail(lean, name)
            assert detail is not None, name
            with fastread.fleet_read(fleet) as engine:
                assert fastread.host_detail(engine, name) == detail, name
            d, facts = detail
            assert (facts is None) == (name == "gpu-05"), name
            events = [{k: v for k, v in e.items() if k != "host"}
                      for e in list_events(fleet, name, limit=15)]  # fmt: skip
            assert d.events == events, name
            with fleet.db.session() as s:
                assert d.alarms == open_alarms(s, [host_by_name(s, name).id]), name
            assert [lv.id for lv in d.leases] == (
                [got.lease.id] if name in got.lease.hosts else []
            ), name
            shown = show_host(fleet, name)  # the command's read: the same, with its labels
            assert (shown.view, shown.events, shown.leases) == (d.view, d.events, d.leases)
            assert (shown.facts is None) == (facts is None)
        assert fastread.host_detail(lean, "gpu-1") is None
        assert fastread.host_detail(lean, "GPU-01") is None  # exactly the name
    with pytest.raises(NotFound, match="gpu-01"):
        show_host(fleet, "gpu-1")
