"""Shared fixtures: a fleet on SQLite and on the real PostgreSQL at 127.0.0.1:5432."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from gpufleet.service.core.fleet import Fleet
from gpufleet.store.db import Database
from gpufleet.store.tables import Base
from gpufleet.testing import FakeClock

PG_ADMIN_URL = os.environ.get("GPUFLEET_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

pytest_plugins = ["tests.sshlab_fixtures"]


@pytest.fixture(scope="session")
def pg_database_url() -> Iterator[str]:
    """A private PostgreSQL database for this test session (dropped at the end)."""
    name = f"gpufleet_t_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    db = Database(url)
    db.migrate()
    db.dispose()
    yield url
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


#: The sequences owned by the schema's tables' columns (what ``TRUNCATE ... RESTART IDENTITY``
#: restarts), each with its start value.
_OWNED_SEQUENCES = text(
    "SELECT s.seqrelid::regclass::text, s.seqstart FROM pg_sequence s"
    " JOIN pg_depend d ON d.objid = s.seqrelid AND d.classid = 'pg_class'::regclass"
    " AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')"
    " JOIN pg_class t ON t.oid = d.refobjid"
    " WHERE t.relname = ANY(:tables) AND t.relnamespace = to_regnamespace(current_schema())"
)


def _truncate(db: Database) -> None:
    """Empty every table of the schema (from the models, so a new table is never forgotten).

    PostgreSQL: ``TRUNCATE ... RESTART IDENTITY CASCADE`` of the tables whose heap has pages
    (any row written since their last TRUNCATE, even deleted or rolled back, left one), then
    every owned sequence restarted: the same state as truncating all 32 tables (fresh files,
    no dead rows, planner statistics of an empty table; a plan-shape test depends on that),
    without paying a new file per table and index for the untouched ones (the whole set took
    0.5-0.9 s per test)."""
    tables = [t.name for t in Base.metadata.sorted_tables]
    with db.engine.begin() as c:
        if db.dialect == "postgresql":
            written = [t for t in tables if c.execute(
                text("SELECT pg_relation_size(CAST(:t AS regclass))"), {"t": t}).scalar()]
            if written:
                c.execute(text("TRUNCATE " + ", ".join(written) + " RESTART IDENTITY CASCADE"))
            for seq, start in c.execute(_OWNED_SEQUENCES, {"tables": tables}).all():
                c.execute(text("SELECT setval(CAST(:seq AS regclass), :start, false)"),
                          {"seq": seq, "start": start})
        else:
            c.execute(text("UPDATE hosts SET latest_snapshot_id = NULL"))
            for t in reversed(tables):  # children before parents
                c.execute(text(f"DELETE FROM {t}"))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite database migrated to the current schema once per session (per xdist
    worker). Fixtures copy it rather than running every migration again per test (0.35-0.7 s
    each on the 2-core CI machine). A brand-new SQLite database being created and migrated is
    still tested where that is the point (tests/store, the CLI's first command in a new home)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "fleet.db"
    db = Database(f"sqlite:///{path}")
    db.migrate()
    assert db.status().state == "current"
    db.dispose()
    # the last connection closed: the WAL is checkpointed into the file, which is complete
    assert sorted(p.name for p in path.parent.iterdir()) == ["fleet.db"]
    return path


def copy_sqlite_template(template: Path, to: Path) -> Path:
    """A private copy of :func:`sqlite_template` at ``to`` (the parent is created)."""
    to.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, to)
    return to


@pytest.fixture(params=["sqlite", "postgres"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    """A migrated, empty fleet on each backend, with a hand-moved clock."""
    clock = FakeClock()
    if request.param == "sqlite":
        path = copy_sqlite_template(request.getfixturevalue("sqlite_template"),
                                    tmp_path / "fleet.db")
        f = Fleet.open(home=tmp_path / "home", url=f"sqlite:///{path}",
                       actor="pytest", clock=clock)
    else:
        url = request.getfixturevalue("pg_database_url")
        f = Fleet.open(home=tmp_path / "home", url=url, actor="pytest", clock=clock)
        _truncate(f.db)
    yield f
    f.db.dispose()


@pytest.fixture
def clock(fleet: Fleet) -> FakeClock:
    """The fleet's clock."""
    assert isinstance(fleet.clock, FakeClock)
    return fleet.clock


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep ``--dist loadgroup`` (``make test``) honouring ``xdist_group`` under pytest 9.2.

    pytest-xdist (3.8) tells its controller an item's group by appending ``@GROUP`` to the
    item's ``_nodeid`` on the worker; pytest 9.2 builds ``nodeid`` from a structured ``_id``
    instead, so the suffix is lost and every grouped test was scheduled on its own: both
    workers started their own Slurm cluster, Redfish emulators and probe world, and built the
    wheel twice (pytest-dev/pytest-xdist#1386). Where the suffix is missing, set it the way
    xdist means to (its group names, sorted, joined by ``_``); a no-op once xdist does it."""
    if not config.getoption("loadgroup", default=False):  # set on xdist workers only
        return
    # xdist hands out the groups first (most tests first), then single tests in collection
    # order: a test of a minute or more left near the end of the order (the README tour sits
    # behind ~400 quick ones) keeps one worker busy while the other has finished.
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # pytest before 9.2: xdist's own suffix works
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(names)
        if names and not item.nodeid.endswith(suffix) and hasattr(item, "_id"):
            item._id = NodeId.parse(item.nodeid + suffix)
