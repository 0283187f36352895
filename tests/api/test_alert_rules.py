"""The shipped alert rules (``src/gpufleet/api/prometheus/alerts.yml``) pass Debian's
``promtool check rules`` and their unit tests (``promtool test rules``): quarantined share,
expiring leases, stale collection and inspection, open critical alarms, blast-radius guard."""

from __future__ import annotations

import subprocess
from importlib.resources import files
from pathlib import Path

import yaml

TESTS = Path(__file__).parent / "prometheus" / "alerts_test.yml"


def test_shipped_alert_rules_check_and_pass_their_unit_tests(promtool: str) -> None:
    rules = files("gpufleet") / "api" / "prometheus" / "alerts.yml"
    names = {r["alert"] for g in yaml.safe_load(rules.read_text())["groups"] for r in g["rules"]}
    assert names == {
        "GpufleetQuarantinedShare",
        "GpufleetLeasesExpiring",
        "GpufleetStaleCollection",
        "GpufleetStaleInspection",
        "GpufleetCriticalAlarmsOpen",
        "GpufleetBlastRadiusGuardTripped",
    }
    check = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    tested = {
        line.split(":", 1)[1].strip()
        for line in TESTS.read_text().splitlines()
        if line.strip().startswith("alertname:")
    }
    assert tested == names  # every rule has a unit test
    run = subprocess.run(
        [promtool, "test", "rules", TESTS.name],
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
