"""Issue 29 items 5 and 6 in a real browser (Debian's Chromium, headless, Playwright) against
a real ``gpufleet serve --port 0`` process over a mixed lab fleet built with the CLI: an H100
host, an Ascend 910B3 host with NPU 5 in Alarm, an AMD MI100 host and a MetaX C500 host.

* ``serve`` says where the dashboard is: the test finds the server by the URL it prints.
* Each vendor's host page shows its accelerator table and software stack, and no NVIDIA
  phrase on the other vendors' hosts.
* The API docs (Swagger UI and ReDoc) render with every request to another origin refused:
  the pages load only the server's own files.

Screenshots go under ``$GPUFLEET_TEST_ARTIFACTS`` (default ``tests/artifacts/``).
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright

from tests.web.test_browser import ARTIFACTS, CHROMIUM, _gpufleet

pytestmark = pytest.mark.xdist_group("browser")

GPUFLEET = str(Path(sys.executable).with_name("gpufleet"))
MODELS = ["h100-8x", "ascend-910b3-8x", "mi100-4x", "c500-8x"]


@dataclass
class Served:
    url: str
    token: str
    printed: str


@dataclass
class Offline:
    """Requests the page tried to send to another origin (each one refused)."""

    origin: str
    refused: list[str] = field(default_factory=list)

    def route(self, route: Route) -> None:
        if route.request.url.startswith(self.origin):
            route.continue_()
        else:
            self.refused.append(route.request.url)
            route.abort()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("vendors")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")} | {
        "GPUFLEET_HOME": str(tmp / "home"), "GPUFLEET_ACTOR": "lab-admin", "COLUMNS": "200",
    }
    lab = tmp / "lab"
    models = [a for m in MODELS for a in ("--model", m)]
    _gpufleet(env, "lab", "create", "--hosts", "4", *models, "--no-default-faults",
              "--fault", "gpu-02=npu-alarm:5", "--dir", str(lab))
    _gpufleet(env, "enroll", "-i", str(lab / "inventory.ini"))
    _gpufleet(env, "collect")
    token = _gpufleet(env, "token", "create", "--role", "viewer", "--name", "browser").strip()
    with serving(env) as (url, printed):
        yield Served(url, token, printed)


@contextmanager
def serving(env: dict[str, str]) -> Iterator[tuple[str, str]]:
    """A real ``gpufleet serve --port 0``, found by the dashboard URL it prints (the URL and
    what it printed); stopped on exit."""
    proc = subprocess.Popen([GPUFLEET, "serve", "--port", "0"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    stderr = proc.stderr
    threading.Thread(target=lambda: [lines.put(ln) for ln in stderr], daemon=True).start()
    printed, url = "", None
    deadline = time.monotonic() + 60
    try:
        while url is None:  # the URL the operator is told, read as they would
            assert time.monotonic() < deadline, f"no dashboard URL printed: {printed}"
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                assert proc.poll() is None, f"serve exited: {printed}"
                continue
            printed += line
            if m := re.search(r"dashboard: (http://127\.0\.0\.1:\d+)/", line):
                url = m.group(1)
        page_ok = False
        while not page_ok:
            try:
                with urllib.request.urlopen(f"{url}/api/v1/health", timeout=2) as r:
                    page_ok = r.status == 200
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, printed
                time.sleep(0.2)
        yield url, printed
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield b
        b.close()


@pytest.fixture
def offline_page(served: Served, browser: Browser) -> Iterator[tuple[Page, Offline]]:
    ctx = browser.new_context(viewport={"width": 1440, "height": 900}, locale="en-US")
    guard = Offline(served.url)
    ctx.route("**/*", guard.route)
    yield ctx.new_page(), guard
    ctx.close()


def _sign_in(page: Page, served: Served) -> None:
    page.goto(served.url + "/")
    page.fill("#token", served.token)
    page.keyboard.press("Enter")
    expect(page).to_have_url(served.url + "/")


def test_serve_prints_the_dashboard_and_docs_urls(served: Served) -> None:
    assert f"dashboard: {served.url}/" in served.printed
    assert f"{served.url}/api/v1/docs" in served.printed
    assert f"{served.url}/redoc" in served.printed


def test_each_vendor_host_page_shows_its_accelerators(
    offline_page: tuple[Page, Offline], served: Served
) -> None:
    page, guard = offline_page
    _sign_in(page, served)
    want = {
        "gpu-01": ("nvidia", 8, "CUDA 13.1", "H100 80GB HBM3"),
        "gpu-02": ("huawei", 8, "CANN 7.0.T10", "910B3"),
        "gpu-03": ("amd", 4, "Driver 6.3.6", "Instinct MI100"),
        "gpu-04": ("metax", 8, "MACA 3.3.0.15", "C500"),
    }
    for host, (vendor, n, stack, model) in want.items():
        page.goto(f"{served.url}/hosts/{host}")
        expect(page.get_by_test_id(f"vendor-{vendor}")).to_contain_text(stack)
        rows = page.get_by_test_id("gpu-table").locator("tbody tr")
        expect(rows).to_have_count(n)
        expect(rows.first.locator("td").nth(1)).to_have_text(model)
        body = page.locator("main").inner_text()
        assert "Never collected" not in body
        if vendor != "nvidia":
            for phrase in ("CUDA", "nvidia-smi", "NVIDIA"):
                assert phrase not in body, (host, phrase)
        page.screenshot(path=str(ARTIFACTS / f"dashboard-host-{vendor}.png"), full_page=True)
    # the Ascend host's NPU 5 in alarm, its codes beside it; the others ok
    page.goto(f"{served.url}/hosts/gpu-02")
    npu5 = page.get_by_test_id("gpu-table").locator("tbody tr").nth(5)
    expect(npu5).to_have_class(re.compile(r"\bbad\b"))
    expect(npu5.locator("td").nth(8)).to_have_text("alarm")
    expect(npu5.locator("td").nth(9)).to_contain_text("A4025021")
    expect(page.get_by_test_id("gpu-table").locator("tbody tr.bad")).to_have_count(1)
    assert guard.refused == []


def test_api_docs_render_offline(offline_page: tuple[Page, Offline], served: Served) -> None:
    page, guard = offline_page
    blocked: list[str] = []
    page.on("console", lambda m: blocked.append(m.text) if "Content Security" in m.text else None)
    page.goto(f"{served.url}/api/v1/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("gpufleet", timeout=30_000)
    ops = page.locator(".swagger-ui .opblock")
    expect(ops.first).to_be_visible()
    assert ops.count() > 20
    expect(page.locator(".swagger-ui").get_by_text("/api/v1/hosts/{name}").first).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "api-docs-swagger.png"))
    page.goto(f"{served.url}/redoc")
    expect(page).to_have_url(f"{served.url}/api/v1/redoc")
    # ReDoc draws its menu first, then the API's title and operations (seconds on a busy
    # machine)
    expect(page.locator("h1").first).to_contain_text("gpufleet", timeout=60_000)
    expect(page.get_by_text("/api/v1/hosts/{name}").first).to_be_attached(timeout=30_000)
    page.screenshot(path=str(ARTIFACTS / "api-docs-redoc.png"))
    assert guard.refused == []
    # ReDoc's footer asks for its maker's logo from their CDN: the policy refuses it before
    # any request is made (nothing else is refused; the page works without it)
    assert all("cdn.redoc.ly/redoc/logo" in b for b in blocked), blocked
