"""``gpufleet inspect [SELECTOR]``, ``inspect report`` and ``inspect guard`` through the CLI on
SQLite and PostgreSQL (sim lab); the HTML report is looked at in headless Chromium and a
screenshot kept under the test artifacts."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright
from tests.clitools import Cli, cli_for_backend

from gpufleet.lab.fleet import LabFleet, create_fleet, write_inventory

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(
    os.environ.get("GPUFLEET_TEST_ARTIFACTS") or Path(__file__).parents[1] / "artifacts"
)


@pytest.fixture(params=["sqlite", "postgres"])
def cli(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    c = cli_for_backend(request, tmp_path, "alice")
    d = tmp_path / "lab"
    d.mkdir()
    fl = create_fleet(4, models=["h100-8x"], faults={})
    fl.save(d)
    write_inventory(fl, d / "inventory.ini", transport="sim", lab_dir=d)
    c.run("enroll", "-i", str(d / "inventory.ini"))
    c.run("validate")
    c.env["GPUFLEET_GUARD_SHARE"] = "0.5"
    return c


def fault(cli: Cli, host: str, faults: list[str]) -> None:
    d = cli.tmp / "lab"
    fl = LabFleet.load(d)
    hosts = [h.model_copy(update={"faults": faults}) if h.name == host else h for h in fl.hosts]
    fl.model_copy(update={"hosts": hosts}).save(d)


def test_inspect_report_and_guard(cli: Cli, tmp_path: Path) -> None:
    first = cli.json("inspect")
    assert [h["outcome"] for h in first["hosts"]] == ["ok"] * 4
    assert all(h["findings"] == [] for h in first["hosts"])
    fault(cli, "gpu-02", ["ecc-uncorrectable"])
    fault(cli, "gpu-03", ["disk-full"])
    second = cli.json("inspect", "gpu-0*")
    by = {h["host"]: h for h in second["hosts"]}
    (f,) = by["gpu-02"]["findings"]
    assert (f["rule"], f["severity"], f["action"], f["gpu_index"]) == (
        "ecc-uncorrectable",
        "critical",
        "reset_gpu",
        f["gpu_index"],
    )
    assert any(a.startswith("quarantined") for a in by["gpu-02"]["actions"])
    assert [x["rule"] for x in by["gpu-03"]["findings"]] == ["disk-full"]
    assert cli.state("gpu-02") == "quarantined" and cli.state("gpu-03") == "available"
    alarms = cli.json("alarms", "list")
    assert sorted((a["host"], a["kind"], a["severity"]) for a in alarms) == [
        ("gpu-02", "health", "critical"),
        ("gpu-03", "health", "warning"),
    ]
    assert cli.json("inspect", "guard") == []
    cli.run("inspect", "nope-*", code=4)
    cli.run("inspect", "--every", "soon", code=2)

    text = cli.run("inspect", "report", "--format", "csv").stdout
    rows = {r["host"]: r for r in csv.DictReader(io.StringIO(text))}
    assert set(rows) == {"gpu-01", "gpu-02", "gpu-03", "gpu-04"}
    assert rows["gpu-02"]["worst"] == "critical" and rows["gpu-02"]["rules"] == "ecc-uncorrectable"
    assert rows["gpu-02"]["ecc_uncorrectable_max"] == "2"
    assert rows["gpu-01"]["findings"] == "0" and rows["gpu-01"]["temperature_max"] == "59"
    table = cli.run("inspect", "report", "--since", "1h").stdout
    assert "gpu-02" in table and "gpu-03" in table and "59.0" in table, table
    cli.run("inspect", "report", "--format", "pdf", code=2)
    cli.run("inspect", "report", "--since", "yesterday", code=2)

    out = tmp_path / "report.html"
    cli.run("inspect", "report", "--format", "html", "-o", str(out))
    page_html = out.read_text()
    assert "<script" not in page_html and "http" not in page_html.split("<body>")[1]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    backend = "pg" if "--db" in cli.global_args else "sqlite"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(out.as_uri())
        assert page.title() == "gpufleet inspection report"
        offenders = page.locator("table").first.locator("tr")
        assert offenders.count() == 3  # header, gpu-02 (critical) then gpu-03 (warning)
        assert "gpu-02" in offenders.nth(1).inner_text()
        assert page.locator("svg.spark polyline").count() == 1  # one model, one sparkline
        assert page.locator("svg.bars rect").count() == 2  # two rules fired
        page.screenshot(path=str(ARTIFACTS / f"inspect-report-{backend}.png"), full_page=True)
        browser.close()
    assert (ARTIFACTS / f"inspect-report-{backend}.png").stat().st_size > 10_000
