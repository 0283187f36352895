"""History growth when only readings move (issue 8, goal 4): bytes per host per collection.

Builds a lab fleet of N hosts (a100-8x, h100-8x, v100s-8x) on SQLite or PostgreSQL (a scratch
database, dropped afterwards), collects it ``--rounds`` times in this process, the sim
transport's answers varied between rounds the way a real host's are (every GPU's temperature
+7 C, power +11.5 W, utilization +1 %, nvidia-smi's timestamp), and prints how much the
history tables (``fact_snapshots``, ``gpus``, ``nics`` with their indexes and TOAST) grew per
host per collection after the first, and that per host per day at one collection every
5 minutes (PostgreSQL: after a ``VACUUM`` of those tables after each collection, as
autovacuum would do, so that an UPDATE's dead tuples count as the reusable space they are).
``--digest full`` hashes the whole document but ``collected_at`` (the content hash
before the telemetry change, f548a01); ``stable`` (default) is the current ``facts_digest``.

    .venv/bin/python bench/history_readings.py [--hosts 50] [--rounds 3] [--db sqlite|pg]
        [--digest stable|full]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from profile_collect import DEFAULT_PG, lab_fleet  # bench/profile_collect.py

TABLES = ("fact_snapshots", "gpus", "nics")
PER_DAY = 24 * 60 // 5


def full_digest(doc: dict[str, Any]) -> str:
    """The content hash of f548a01: the whole document but ``collected_at``."""
    body = {k: v for k, v in doc.items() if k != "collected_at"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _sizes(fleet: Any, db: str) -> int:
    with fleet.db.engine.connect() as c:
        if db == "sqlite":
            rows = c.exec_driver_sql(
                "SELECT SUM(pgsize) FROM dbstat WHERE name IN "
                "(SELECT name FROM sqlite_master WHERE tbl_name IN (?, ?, ?))",
                TABLES,
            ).scalar()
        else:
            rows = c.exec_driver_sql(
                "SELECT SUM(pg_total_relation_size(t::regclass)) FROM unnest(%s::text[]) AS t",
                (list(TABLES),),
            ).scalar()
    return int(rows or 0)


def _vacuum(fleet: Any, db: str) -> None:
    """PostgreSQL: what autovacuum does between collections (the space of the tuples an
    UPDATE left behind becomes reusable), so the growth measured is the steady state's."""
    if db != "pg":
        return
    with fleet.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        for t in TABLES:
            c.exec_driver_sql(f"VACUUM {t}")


def run(hosts: int, rounds: int, db: str, digest: str, pg_admin: str) -> None:
    import gpufleet.service.hosts.collect as svc
    from gpufleet.lab.fleet import LabFleet

    real_digest = svc.facts_digest

    def vary(lab_dir: Path, k: int) -> None:  # the lab hosts' readings move k rounds
        lab = LabFleet.load(lab_dir)
        moved = [h.model_copy(update={"readings": k}) for h in lab.hosts]
        lab.model_copy(update={"hosts": moved}).save(lab_dir)

    with lab_fleet(hosts, db, pg_admin, "bench") as fleet:
        lab_dir = fleet.home.parent / "lab"  # where lab_fleet enrolled the lab
        try:
            if digest == "full":
                svc.facts_digest = full_digest
            svc.collect(fleet)
            _vacuum(fleet, db)
            start = _sizes(fleet, db)
            for k in range(1, rounds):
                vary(lab_dir, k)
                rep = svc.collect(fleet)
                assert rep.counts == {"ok": hosts}, rep.counts
                _vacuum(fleet, db)
            grown = _sizes(fleet, db) - start
            per = grown / hosts / (rounds - 1)
            print(
                f"[{db}, {digest} digest] {hosts} hosts x {rounds} collections: history "
                f"({', '.join(TABLES)}) grew {grown} bytes after the first: {per:.0f} bytes/host/"
                f"collection, {per * PER_DAY / 1e6:.2f} MB/host/day at 5 minutes"
            )
            fleet.db.dispose()
        finally:
            svc.facts_digest = real_digest


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--db", choices=("sqlite", "pg"), default="sqlite")
    ap.add_argument("--digest", choices=("stable", "full"), default="stable")
    ap.add_argument("--pg", default=DEFAULT_PG)
    a = ap.parse_args(argv)
    run(a.hosts, a.rounds, a.db, a.digest, a.pg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
