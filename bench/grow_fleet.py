"""Grow a fleet kept by ``bench/scale.py --keep DIR`` to N hosts by copying it in SQL.

The read commands' cost depends on the number of hosts, not on how their rows were made: so
collect a few hundred lab hosts once (``scale.py --hosts 300 --keep DIR --only
'collect,validate --no-collect'``), then copy every host with its latest snapshot, GPU and NIC
rows under new names (``NAME-x1``, ``NAME-x2`` ...; GPU UUIDs and serials suffixed too) until
there are N, and measure the reads at N (``scale.py --keep DIR --only summary,...``) without
a collection of N hosts. History (older snapshots, events, collection results) is not copied.
Every column of a copied row is copied as it is (the tables' columns are read from the
database, so any schema works): a snapshot keeps its ``fact_labels_id``, the copies share the
``fact_label_sets`` rows (migration 0017) as equal collected values would.

    .venv/bin/python bench/grow_fleet.py --keep DIR --db sqlite|pg [--hosts 12500]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Connection


def _columns(c: Connection, table: str) -> list[str]:
    return [col["name"] for col in inspect(c).get_columns(table)]


def grow(c: Connection, target: int) -> int:
    """Copy the hosts there are (lowest ids first) until there are ``target``; the count."""
    ids = [r[0] for r in c.execute(text("SELECT id FROM hosts ORDER BY id"))]
    if not ids or len(ids) >= target:
        return len(ids)
    top = {
        t: int(c.execute(text(f"SELECT coalesce(max(id), 0) FROM {t}")).scalar_one())
        for t in ("hosts", "fact_snapshots", "gpus", "nics")
    }
    cols = {t: _columns(c, t) for t in top}
    n, k = len(ids), 0
    while n < target:
        k += 1
        last = ids[min(len(ids), target - n) - 1]
        n += min(len(ids), target - n)
        off = {t: k * top[t] for t in top}  # new ids: old + k * the table's max id
        latest = f"SELECT latest_snapshot_id FROM hosts WHERE id <= {last}"
        subst: dict[str, dict[str, str]] = {
            "hosts": {
                "id": f"id + {off['hosts']}",
                "name": f"name || '-x{k}'",
                "latest_snapshot_id": "NULL",
            },
            "fact_snapshots": {
                "id": f"id + {off['fact_snapshots']}",
                "host_id": f"host_id + {off['hosts']}",
                "run_id": "NULL",
            },
            "gpus": {
                "id": f"id + {off['gpus']}",
                "snapshot_id": f"snapshot_id + {off['fact_snapshots']}",
                "host_id": f"host_id + {off['hosts']}",
                "uuid": f"uuid || '-{k}'",
                "serial": f"serial || '-{k}'",
            },
            "nics": {
                "id": f"id + {off['nics']}",
                "snapshot_id": f"snapshot_id + {off['fact_snapshots']}",
                "host_id": f"host_id + {off['hosts']}",
            },
        }
        where = {
            "hosts": f"id <= {last} AND id <= {top['hosts']}",
            "fact_snapshots": f"id IN ({latest})",
            "gpus": f"snapshot_id IN ({latest})",
            "nics": f"snapshot_id IN ({latest})",
        }
        for t in ("hosts", "fact_snapshots", "gpus", "nics"):
            names = ", ".join(f'"{x}"' for x in cols[t])
            values = ", ".join(subst[t].get(x, f'"{x}"') for x in cols[t])
            c.execute(text(f"INSERT INTO {t} ({names}) SELECT {values} FROM {t} WHERE {where[t]}"))
        c.execute(
            text(
                f"UPDATE hosts SET latest_snapshot_id = (SELECT o.latest_snapshot_id + "
                f"{off['fact_snapshots']} FROM hosts o WHERE o.id = hosts.id - {off['hosts']}) "
                f"WHERE id > {off['hosts']} AND id <= {off['hosts'] + last}"
            )
        )
    if c.dialect.name == "postgresql":
        for t in top:
            c.execute(
                text(
                    f"SELECT setval(pg_get_serial_sequence('{t}', 'id'), (SELECT max(id) FROM {t}))"
                )
            )
    return int(c.execute(text("SELECT count(*) FROM hosts")).scalar_one())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", type=Path, required=True, help="the DIR given to scale.py --keep")
    ap.add_argument("--db", choices=("sqlite", "pg"), required=True)
    ap.add_argument("--hosts", type=int, default=12_500)
    a = ap.parse_args(argv)
    marker = a.keep / a.db / "fleet.json"
    kept: dict[str, Any] = json.loads(marker.read_text())
    eng = create_engine(str(kept["url"]))
    try:
        with eng.begin() as c:
            hosts = grow(c, a.hosts)
    finally:
        eng.dispose()
    kept.update(hosts=hosts, grown=True)
    marker.write_text(json.dumps(kept))
    print(f"{marker.parent}: {hosts} hosts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
