"""The dashboard's rack pages in a real browser (Debian's Chromium, Playwright) against a real
``gpufleet serve`` over a lab NVL72 rack built with the CLI (issue 27): the rack list with
its missing-tray finding, and one rack's trays in slot order with fabric state, the rack
incident's restriction, validated profiles, lease and alarms."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.web.test_browser import ARTIFACTS, CHROMIUM, GPUFLEET, _free_port, _gpufleet

pytestmark = pytest.mark.xdist_group("browser")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("browser-racks")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")} | {
        "GPUFLEET_HOME": str(tmp / "home"), "GPUFLEET_ACTOR": "lab-admin", "COLUMNS": "200"}
    lab = tmp / "lab"
    _gpufleet(env, "lab", "create", "--rack", "gb200-nvl72", "--racks", "1", "--dir", str(lab),
              "--fault", "nvl01-t18=tray-missing")
    _gpufleet(env, "enroll", "-i", str(lab / "inventory.ini"))
    _gpufleet(env, "validate", ok=(1,))
    for tray in ("nvl01-t03", "nvl01-t07"):
        _gpufleet(env, "lab", "change", tray, "--add-fault", "fabric-route-unhealthy",
                  "--dir", str(lab))
    _gpufleet(env, "inspect", "run", ok=(0, 1))
    _gpufleet(env, "allocate", "--hosts", "1", "--selector", "nvl01-t02", "--owner", "team-a",
              "--purpose", "p", "--for", "1h")
    token = _gpufleet(env, "token", "create", "--role", "viewer", "--name", "browser").strip()
    port = _free_port()
    proc = subprocess.Popen([GPUFLEET, "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
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
                    raise AssertionError(f"serve did not start: {proc.communicate()[1]}") from None
                time.sleep(0.2)
        yield url, token
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_rack_list_and_rack_page(served: tuple[str, str]) -> None:
    url, token = served
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
        page.goto(url + "/racks")
        page.fill("#token", token)
        page.keyboard.press("Enter")
        expect(page).to_have_url(url + "/racks")
        row = page.get_by_test_id("rack-table").locator("tbody tr")
        expect(row).to_have_count(1)
        expect(row.get_by_test_id("rack-trays")).to_have_text("17/18")
        expect(row).to_contain_text("tray index 17")
        page.screenshot(path=str(ARTIFACTS / "dashboard-racks.png"), full_page=True)
        row.locator("a").first.click()
        trays = page.get_by_test_id("tray-table").locator("tbody tr")
        expect(trays).to_have_count(17)
        hosts = [trays.nth(i).get_attribute("data-host") for i in range(17)]
        assert hosts == [f"nvl01-t{i:02d}" for i in range(1, 18)]  # slot order
        first = page.locator("tr[data-host='nvl01-t01']")
        expect(first).to_contain_text("rack-incident")
        expect(first).to_contain_text("rack-manifest")
        expect(page.locator("tr[data-host='nvl01-t02']")).to_contain_text("team-a")
        expect(page.locator("tr[data-host='nvl01-t05']")).to_contain_text("inference")
        expect(page.locator("tr[data-host='nvl01-t03'] [data-testid=tray-fabric]")).to_contain_text(
            "restricted")
        expect(page.get_by_test_id("rack-findings")).to_contain_text("missing_tray")
        page.screenshot(path=str(ARTIFACTS / "dashboard-rack.png"), full_page=True)
        browser.close()
