"""Issue 8, start-up: ``gpufleet labels HOST`` reads one host lean (the driver itself, no
SQLAlchemy, no facts document) and gives exactly what the full path gives, on both
databases; whenever the lean read cannot answer exactly, the full path does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import select, text, update

from gpufleet.inventory import load_inventory
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.baselines import baseline_from_host, save_baseline
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.labels import HostLabels, lean_host_labels
from gpufleet.service.views.summary import host_labels
from gpufleet.store.db import SCHEMA_REVISION
from gpufleet.store.readmodel import schema_head
from gpufleet.store.tables import FactSnapshot, Host, Pool

FAULTS = {"gpu-04": ["gpu-missing"], "gpu-05": ["nvidia-smi-missing"]}


def _as_json(r: HostLabels) -> dict[str, object]:
    """``labels --json``'s shape for one host (the API's ``LabelsOut``)."""
    taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in r.taints]
    return {"host": r.host, "labels": r.labels, "taints": taints}


def _lab(fleet: Fleet, tmp_path: Path) -> Path:
    d = tmp_path / "lab"
    enroll_lab(fleet, d, 6, models=["a100-8x", "h100-8x", "v100s-8x"], faults=FAULTS)
    return d


def test_schema_head_read_from_the_scripts_is_the_schema_revision() -> None:
    assert schema_head() == SCHEMA_REVISION


def test_lean_labels_equal_the_full_path_and_fall_back_when_unsure(
    fleet: Fleet, tmp_path: Path
) -> None:
    _lab(fleet, tmp_path)
    enroll(fleet, load_inventory(tmp_path / "lab" / "inventory.ini"))
    (tmp_path / "lab" / "extra.ini").write_text("[new]\nnot-collected ansible_host=10.9.9.9\n")
    enroll(fleet, load_inventory(tmp_path / "lab" / "extra.ini"))
    collect(fleet, "gpu-0*")
    save_baseline(fleet, baseline_from_host(fleet, "gpu-01", "b1"))
    save_baseline(fleet, baseline_from_host(fleet, "gpu-02", "b2"))
    with fleet.db.session() as s:  # a baseline by pool, another by the host's own variable
        pools = list(s.scalars(select(Pool)))
        assert pools
        pools[0].baseline = "b1"
        h3 = s.scalar(select(Host).where(Host.name == "gpu-03"))
        assert h3 is not None
        h3.vars = {**h3.vars, "gpufleet_baseline": "b2"}
    url = fleet.db.url
    names = [*(f"gpu-0{i}" for i in range(1, 7)), "not-collected"]
    for name in names:
        full = host_labels(fleet, name)
        assert lean_host_labels(url, name) == full, name
        assert lean_host_labels(url, name.upper()) == full, name  # names: case-insensitive
    assert any(x.labels.get("gpufleet.io/baseline") == "b1" for n in names
               for x in host_labels(fleet, n))
    # not one plain name, or no such host: the full path answers (and reports)
    for selector in (None, "", "gpu-0*", "gpu-01,gpu-02", "pool:x", "state:enrolled", "nope"):
        assert lean_host_labels(url, selector) is None, selector
    # a snapshot without usable fact_labels: the facts must be decoded, by the full path
    with fleet.db.session() as s:
        sid = s.scalar(select(Host.latest_snapshot_id).where(Host.name == "gpu-02"))
        s.execute(update(FactSnapshot).where(FactSnapshot.id == sid).values(fact_labels_id=None))
    assert lean_host_labels(url, "gpu-02") is None
    assert lean_host_labels(url, "gpu-01") is not None
    # a database at another schema revision: not read lean
    with fleet.db.engine.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = '0001'"))
    try:
        assert lean_host_labels(url, "gpu-01") is None
    finally:
        with fleet.db.engine.begin() as c:
            c.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": SCHEMA_REVISION})
    # no database file yet, or a URL the lean read does not handle: the full path
    assert lean_host_labels(f"sqlite:///{tmp_path / 'none.db'}", "gpu-01") is None
    assert lean_host_labels("sqlite://", "gpu-01") is None
    assert lean_host_labels("mysql://x/y", "gpu-01") is None


_CODE = (
    "import sys\n"
    "from gpufleet.cli.main import app\n"
    "sys.argv = ['gpufleet', *sys.argv[1:]]\n"
    "try:\n    app()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
    "print('LOADED', *sorted(m for m in sys.modules if m.startswith(('sqlalchemy', 'rich',"
    " 'gpufleet.domain.facts', 'gpufleet.api', 'gpufleet.service.core.fleet',"
    " 'gpufleet.store.t'))))\n"
)


def _run(env: dict[str, str], *argv: str) -> tuple[str, list[str]]:
    """(stdout, the heavy modules it loaded) of ``gpufleet ARGV`` in a fresh process."""
    out = subprocess.run([sys.executable, "-c", _CODE, *argv], env=env, capture_output=True,
                         text=True, check=True).stdout
    body, loaded = out.rsplit("LOADED", 1)
    return body, loaded.split()


def _env(home: Path, url: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env |= {"GPUFLEET_HOME": str(home), "COLUMNS": "100"}
    if url is not None:
        env["GPUFLEET_DATABASE_URL"] = url
    return env


def test_labels_host_cli_prints_what_the_full_path_prints(fleet: Fleet, tmp_path: Path) -> None:
    """``gpufleet labels HOST`` (a subprocess on the fleet's database, named by
    GPUFLEET_DATABASE_URL) prints the full path's JSON (the API's ``LabelsOut`` shape) and
    table without the ORM tables, Rich (JSON), the API's models or the facts model."""
    _lab(fleet, tmp_path)
    collect(fleet)
    env = _env(tmp_path / "home", fleet.db.url)
    for name in ("gpu-01", "gpu-04", "gpu-05"):
        body, loaded = _run(env, "labels", name, "--json")
        assert not [m for m in loaded if not m.startswith("sqlalchemy")], loaded
        assert "sqlalchemy.orm" not in loaded  # the URL's check loads SQLAlchemy's core only
        assert json.loads(body) == [_as_json(r) for r in host_labels(fleet, name)]
    lean_table, loaded = _run(env, "labels", "gpu-01")
    assert "gpufleet.store.tables" not in loaded
    with fleet.db.session() as s:  # the same host through the full path
        s.execute(update(FactSnapshot).values(fact_labels_id=None))
    full_table, loaded = _run(env, "labels", "gpu-01")
    assert "gpufleet.store.tables" in loaded
    assert lean_table == full_table
    assert "nvidia.com/gpu.product" in lean_table


def test_labels_host_on_the_home_database_imports_no_sqlalchemy(tmp_path: Path) -> None:
    """The default store (SQLite in GPUFLEET_HOME): ``labels HOST --json`` loads no
    SQLAlchemy at all."""
    home = tmp_path / "home"
    fleet = Fleet.open(home=home, actor="pytest")
    try:
        _lab(fleet, tmp_path)
        collect(fleet, "gpu-01")
        body, loaded = _run(_env(home), "labels", "gpu-01", "--json")
        assert loaded == [], loaded
        want = [_as_json(r) for r in host_labels(fleet, "gpu-01")]
        assert json.loads(body) == want
    finally:
        fleet.db.dispose()
