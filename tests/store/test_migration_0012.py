"""Migration 0012 (issue 12 workers): chunks of runs carry host ids instead of names."""

from __future__ import annotations

import json

from sqlalchemy import inspect, text

from gpufleet.store.db import SCHEMA_REVISION, Database


def test_0012_turns_chunk_host_names_into_ids(empty_url: str) -> None:
    db = Database(empty_url)
    db.migrate("0010")
    t = {"t": "2026-12-01 12:00:00+00:00"}
    with db.engine.begin() as c:
        for name in ("gpu-01", "gpu-02"):
            c.execute(
                text(
                    "INSERT INTO hosts (name, address, port, groups, vars, expected, state,"
                    " state_entered_at, health, profiles, created_at, updated_at)"
                    " VALUES (:n, '10.0.0.1', 22, '[]', '{}', '{}', 'enrolled', :t, 'ok',"
                    " '[]', :t, :t)"
                ),
                {"n": name, **t},
            )
        c.execute(
            text(
                "INSERT INTO job_runs (id, kind, state, actor, created_at, hosts, chunks)"
                " VALUES (1, 'collect', 'queued', 'pytest', :t, 3, 1)"
            ),
            t,
        )
        c.execute(
            text(
                "INSERT INTO job_chunks (run_id, seq, hosts, state, attempts, result)"
                " VALUES (1, 0, :h, 'queued', 0, '{}')"
            ),
            {"h": json.dumps(["gpu-02", "gpu-gone", "gpu-01"])},
        )
        ids = dict(c.execute(text("SELECT name, id FROM hosts")).all())
    db.migrate()
    assert db.current_revision() == SCHEMA_REVISION
    with db.engine.connect() as c:
        hosts = c.execute(text("SELECT hosts FROM job_chunks")).scalar_one()
    hosts = json.loads(hosts) if isinstance(hosts, str) else hosts
    assert hosts == [ids["gpu-02"], ids["gpu-01"]]  # a host removed since is dropped
    assert "params" in {col["name"] for col in inspect(db.engine).get_columns("job_runs")}
    assert "job_run_hosts" in inspect(db.engine).get_table_names()
    db.dispose()
