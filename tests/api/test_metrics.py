"""``/metrics``: the fleet's gauges match the fleet, and the live exposition passes Debian's
``promtool check metrics``."""

from __future__ import annotations

import subprocess

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from gpufleet.domain.events import AlarmKind, AlarmSeverity
from gpufleet.service.core.alarms import raise_alarm
from gpufleet.service.core.fleet import Fleet
from gpufleet.store.tables import Host
from tests.api.conftest import auth


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_count_the_fleet_and_pass_promtool(
    client: TestClient, lab_fleet: Fleet, promtool: str
) -> None:
    with lab_fleet.db.session() as s:
        host = s.scalar(select(Host).where(Host.name == "gpu-02"))
        assert host is not None
        raise_alarm(s, lab_fleet, host, AlarmKind.DUPLICATE_HOST, AlarmSeverity.CRITICAL, "dup")
    r = client.post(
        "/api/v1/leases",
        json={"hosts": 1, "owner": "a", "purpose": "b", "for": "2h"},
        headers=auth("operator"),
    )
    assert r.json()["granted"] is True
    client.post(
        "/api/v1/maintenance/on",
        json={"selector": "gpu-06", "reason": "psu"},
        headers=auth("admin"),
    )
    m = client.get("/metrics")  # no token: Prometheus scrapes it
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    got = samples(m.text)
    pool = "train-h100"
    assert got[("gpufleet_hosts", (("pool", pool), ("state", "available")))] == 4
    assert got[("gpufleet_hosts", (("pool", pool), ("state", "allocated")))] == 1
    assert got[("gpufleet_hosts", (("pool", pool), ("state", "maintenance")))] == 1
    assert got[("gpufleet_hosts", (("pool", ""), ("state", "quarantined")))] == 0
    model = "NVIDIA H100 80GB HBM3"
    assert got[("gpufleet_gpus", (("model", model), ("state", "available")))] == 32
    assert got[("gpufleet_validated_gpus", (("model", model), ("profile", "inference")))] == 32
    assert got[("gpufleet_leases", (("state", "active"),))] == 1
    assert got[("gpufleet_leases_expiring", ())] == 1  # 2h < 24h
    assert got[("gpufleet_hosts_never_collected", ())] == 0
    assert got[("gpufleet_last_collection_age_seconds", ())] >= 0
    key = ("gpufleet_open_alarms", (("kind", "duplicate-host"), ("severity", "critical")))
    assert got[key] == 1
    check = subprocess.run(
        [promtool, "check", "metrics"], input=m.text, capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
