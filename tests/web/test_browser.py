"""The dashboard in a real browser: Debian's Chromium (headless) driven by Playwright against
a real ``gpufleet serve`` process over a lab fleet built with the CLI (lab create, enroll,
collect, validate, allocate; sim transport).

Screenshots are saved under ``$GPUFLEET_TEST_ARTIFACTS`` (default ``tests/artifacts/``,
ignored by git) so a person can look at them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect, sync_playwright
from typer.testing import CliRunner

from gpufleet.cli.main import app as cli_app

#: One worker runs the module (``make test``: ``--dist loadgroup``), so the fleet, the
#: server and Chromium of the module fixtures start once, not once per worker.
pytestmark = pytest.mark.xdist_group("browser")

CHROMIUM = "/usr/bin/chromium"
GPUFLEET = str(Path(sys.executable).with_name("gpufleet"))
ARTIFACTS = Path(
    os.environ.get("GPUFLEET_TEST_ARTIFACTS") or Path(__file__).parents[1] / "artifacts"
)


@dataclass
class Served:
    url: str
    token: str
    summary: dict[str, Any]
    env: dict[str, str]


def _gpufleet(env: dict[str, str], *args: str, ok: tuple[int, ...] = (0,)) -> str:
    """The CLI in this process (the same commands; the server below is a real process)."""
    r = CliRunner().invoke(cli_app, list(args), env=env)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    assert r.exit_code in ok, f"gpufleet {' '.join(args)}: {r.exit_code}\n{r.stderr}"
    return r.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("browser")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")} | {
        "GPUFLEET_HOME": str(tmp / "home"),
        "GPUFLEET_ACTOR": "lab-admin",
        "COLUMNS": "200",
    }
    lab = tmp / "lab"
    faults = [
        "gpu-03=ecc-uncorrectable",
        "gpu-05=driver-drift",
        "gpu-07=unreachable",
        "gpu-09=xid:79",
        "gpu-11=remap-pending",
    ]
    _gpufleet(
        env,
        "lab",
        "create",
        "--hosts",
        "14",
        "--dir",
        str(lab),
        "--no-default-faults",
        "--model",
        "h100-8x",
        *(a for f in faults for a in ("--fault", f)),
    )
    _gpufleet(env, "enroll", "-i", str(lab / "inventory.ini"))
    _gpufleet(env, "collect", ok=(0, 1))
    _gpufleet(env, "validate", ok=(0, 1))
    _gpufleet(
        env, "baseline", "create", "h100-lab", "--from-host", "gpu-01", "--pool", "train-h100"
    )
    back = (datetime.now(UTC) + timedelta(hours=30)).isoformat(timespec="minutes")
    _gpufleet(env, "maintenance", "on", "gpu-14", "--reason", "PSU swap", "--eta", back)
    _gpufleet(
        env,
        "allocate",
        "--gpus",
        "16",
        "--owner",
        "team-llm",
        "--purpose",
        "pretraining",
        "--for",
        "6h",
        ok=(0, 1),
    )
    _gpufleet(
        env,
        "allocate",
        "--gpus",
        "8",
        "--owner",
        "ci",
        "--purpose",
        "nccl regression",
        "--for",
        "3d",
        ok=(0, 1),
    )
    token = _gpufleet(env, "token", "create", "--role", "viewer", "--name", "browser").strip()
    summary = json.loads(_gpufleet(env, "summary", "--json"))
    port = _free_port()
    proc = subprocess.Popen(
        [GPUFLEET, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/v1/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    err = proc.communicate()[1]
                    raise AssertionError(f"gpufleet serve did not start: {err}") from None
                time.sleep(0.2)
        yield Served(url, token, summary, env)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def page(served: Served) -> Iterator[Page]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        ctx = browser.new_context(viewport={"width": 1440, "height": 900}, locale="en-US")
        pg = ctx.new_page()
        yield pg
        browser.close()


def _shot(page: Page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"dashboard-{name}.png"), full_page=True)


def _signed_in(page: Page, served: Served) -> None:
    """Each test stands alone (xdist may give it a worker of its own): sign in unless the
    module's page already holds the cookie from the sign-in test."""
    page.goto(served.url + "/")
    if "/login" in page.url:
        page.fill("#token", served.token)
        page.keyboard.press("Enter")
        expect(page).to_have_url(served.url + "/")


def test_sign_in_and_the_overview_counts_match_summary(page: Page, served: Served) -> None:
    page.goto(served.url + "/")
    expect(page).to_have_url(f"{served.url}/login?next=/")
    _shot(page, "0-login")
    page.fill("#token", "gft_not-a-token")
    page.keyboard.press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("not accepted")
    page.fill("#token", served.token)
    page.keyboard.press("Enter")
    expect(page).to_have_url(served.url + "/")
    sm = served.summary
    expect(page.get_by_test_id("kpi-hosts").locator(".n")).to_have_text(str(sm["hosts"]))
    expect(page.get_by_test_id("kpi-gpus").locator(".n")).to_have_text(str(sm["gpus_total"]))
    expect(page.get_by_test_id("kpi-gpus-available").locator(".n")).to_have_text(
        str(sm["gpus_available"])
    )
    expect(page.get_by_test_id("kpi-alarms").locator(".n")).to_have_text(str(len(sm["alarms"])))
    shown = {
        cell.get_attribute("data-state"): int(cell.inner_text())
        for cell in page.locator("[data-testid=per-state] [data-state]").all()
    }
    assert shown == sm["per_state"] and sum(shown.values()) == sm["hosts"] == 14
    assert len(shown) >= 3  # the lab's faults: not every host is available
    _shot(page, "1-overview")


def test_slash_focuses_search_and_the_host_list_filters(page: Page, served: Served) -> None:
    _signed_in(page, served)
    page.goto(served.url + "/hosts")
    rows = page.locator("[data-testid=host-table] tbody tr")
    expect(rows).to_have_count(14)
    page.locator("body").press("/")
    assert page.evaluate("document.activeElement.id") == "search"
    page.keyboard.type("gpu-0?,gpu-12")
    page.keyboard.press("Enter")
    expect(rows).to_have_count(10)
    assert [r.get_attribute("data-host") for r in rows.all()] == [
        *(f"gpu-0{i}" for i in range(1, 10)),
        "gpu-12",
    ]
    page.select_option("select[name=state]", "available")
    page.get_by_role("button", name="Filter").click()
    available = [r.get_attribute("data-host") for r in rows.all()]
    assert available and len(available) < 10
    assert all("available" in r.inner_text() for r in rows.all())
    page.goto(served.url + "/hosts")
    _shot(page, "2-hosts")


def test_a_host_page_shows_its_timeline(page: Page, served: Served) -> None:
    _signed_in(page, served)
    page.goto(served.url + "/hosts")
    page.get_by_role("link", name="gpu-01", exact=True).first.focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(served.url + "/hosts/gpu-01")
    timeline = page.get_by_test_id("timeline")
    expect(timeline).to_be_visible()
    lanes = {
        c.get_attribute("class").split()[1]  # type: ignore[union-attr]
        for c in timeline.locator("circle.mark").all()
    }
    assert {"ln-collection", "ln-state", "ln-change"} <= lanes
    expect(page.get_by_test_id("gpu-table").locator("tbody tr")).to_have_count(8)
    _shot(page, "3-host")
    quarantined = [h for h in served.summary["quarantined"] if h.get("host")]
    if quarantined:  # the lab's default faults quarantine a host: its page says why
        page.goto(f"{served.url}/hosts/{quarantined[0]['host']}")
        expect(page.get_by_test_id("timeline")).to_be_visible()
        _shot(page, "4-host-quarantined")


def test_leases_alarms_drift_pages(page: Page, served: Served) -> None:
    _signed_in(page, served)
    for name in ("leases", "alarms", "drift"):
        page.goto(f"{served.url}/{name}")
        expect(page.locator("h1")).to_be_visible()
        _shot(page, f"5-{name}")
    page.goto(served.url + "/leases")
    expect(page.get_by_test_id("lease-table").locator("tbody tr")).to_have_count(2)
