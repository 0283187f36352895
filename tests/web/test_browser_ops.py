"""Issue 29 item 6: the dashboard's campaigns page, inspection page and a host's charts of its
stored samples, in Debian's Chromium (headless, Playwright) against a real ``gpufleet serve``
over a lab fleet built with the CLI: four H100 hosts inspected three times (the third after
gpu-02 got uncorrectable ECC errors and gpu-03 a full disk), two campaigns (one approved by
another person). Every request to another origin is refused: the pages load nothing else.

Screenshots go under ``$GPUFLEET_TEST_ARTIFACTS`` (default ``tests/artifacts/``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import Browser, Page, expect

from gpufleet.domain.rules import RulePolicy
from gpufleet.lab.fleet import LabFleet
from tests.web.test_browser import ARTIFACTS, _gpufleet
from tests.web.test_browser_vendors import Offline, browser, serving  # noqa: F401 (a fixture)

pytestmark = pytest.mark.xdist_group("browser")


@dataclass
class Served:
    url: str
    token: str


def _fault(lab: os.PathLike[str], host: str, faults: list[str]) -> None:
    fl = LabFleet.load(lab)
    hosts = [h.model_copy(update={"faults": faults}) if h.name == host else h for h in fl.hosts]
    fl.model_copy(update={"hosts": hosts}).save(lab)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("ops")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")} | {
        "GPUFLEET_HOME": str(tmp / "home"), "GPUFLEET_ACTOR": "alice", "COLUMNS": "200",
    }
    lab = tmp / "lab"
    _gpufleet(env, "lab", "create", "--hosts", "4", "--model", "h100-8x",
              "--no-default-faults", "--dir", str(lab))
    _gpufleet(env, "enroll", "-i", str(lab / "inventory.ini"))
    _gpufleet(env, "validate")
    _gpufleet(env, "inspect")
    time.sleep(1.1)  # samples a second apart: a time axis
    _gpufleet(env, "inspect")
    time.sleep(1.1)
    _fault(lab, "gpu-02", ["ecc-uncorrectable"])
    _fault(lab, "gpu-03", ["disk-full"])
    _fault(lab, "gpu-04", ["power-brake"])
    _gpufleet(env, "inspect", ok=(0, 1))
    _gpufleet(env, "baseline", "create", "b-new", "--driver", "570.86.15")
    (tmp / "up.yml").write_text("- hosts: all\n  gather_facts: false\n  tasks: []\n")
    for name, ticket in (("drv-canary", "OPS-7"), ("drv-rest", "OPS-8")):
        _gpufleet(env, "campaign", "create", name, "--target-baseline", "b-new", "--selector",
                  "gpu-*", "--playbook", str(tmp / "up.yml"), "--ticket", ticket,
                  "--waves", "50%,100%")
    _gpufleet(env | {"GPUFLEET_ACTOR": "bob"}, "campaign", "approve", "drv-canary")
    token = _gpufleet(env, "token", "create", "--role", "viewer", "--name", "browser").strip()
    with serving(env) as (url, _):
        yield Served(url, token)


@pytest.fixture
def page(served: Served, browser: Browser) -> Iterator[Page]:  # noqa: F811
    ctx = browser.new_context(viewport={"width": 1440, "height": 900}, locale="en-US")
    guard = Offline(served.url)
    ctx.route("**/*", guard.route)
    pg = ctx.new_page()
    pg.goto(served.url + "/")
    pg.fill("#token", served.token)
    pg.keyboard.press("Enter")
    expect(pg).to_have_url(served.url + "/")
    yield pg
    assert guard.refused == []
    ctx.close()


def test_campaigns_page_shows_waves_gates_and_approvals(page: Page, served: Served) -> None:
    page.get_by_role("link", name="Campaigns").click()
    expect(page).to_have_url(served.url + "/campaigns")
    rows = page.get_by_test_id("campaign-table").locator("tbody tr")
    expect(rows).to_have_count(2)
    assert [r.get_attribute("data-campaign") for r in rows.all()] == ["drv-rest", "drv-canary"]
    canary = page.get_by_test_id("campaign-drv-canary")
    expect(canary.get_by_test_id("approved-by")).to_have_text("bob")
    expect(page.get_by_test_id("campaign-drv-rest").get_by_test_id("approved-by")).to_have_text(
        "awaiting approval")
    expect(canary.get_by_test_id("gates")).to_contain_text("waves=50%,100%")
    expect(canary.get_by_test_id("gates")).to_contain_text("max_failures=")
    waves = canary.locator("table.waves tbody tr")
    expect(waves).to_have_count(3)  # the canary, then 50 % and 100 %
    expect(waves.first.locator("td").first).to_have_text("0 (canary)")
    hosts = [c.inner_text().split(" ·")[0] for c in canary.locator("table.waves .chip").all()]
    # gpu-02 is quarantined by the inspection: skipped, not planned
    assert sorted(hosts) == ["gpu-01", "gpu-03", "gpu-04"]
    expect(canary).to_contain_text("Skipped: gpu-02")
    page.screenshot(path=str(ARTIFACTS / "dashboard-campaigns.png"), full_page=True)


def test_inspection_page_shows_the_sweep_findings_and_rules(page: Page, served: Served) -> None:
    page.get_by_role("link", name="Inspection").click()
    expect(page).to_have_url(served.url + "/inspection")
    expect(page.get_by_test_id("latest-sweep")).to_contain_text("4 hosts")
    policy = RulePolicy.load_default()
    expect(page.get_by_test_id("rules-version")).to_have_text(policy.version)
    by_rule = page.get_by_test_id("findings-by-rule").locator("tr")
    assert sorted(r.get_attribute("data-rule") or "" for r in by_rule.all()) == [
        "disk-full", "ecc-uncorrectable"]
    offenders = page.get_by_test_id("offender-table").locator("tbody tr")
    assert [r.get_attribute("data-host") for r in offenders.all()] == ["gpu-02", "gpu-03"]
    expect(offenders.first).to_contain_text("critical")
    expect(page.get_by_test_id("findings-total")).to_have_text("2")
    rules = page.get_by_test_id("rule-table").locator("tbody tr")
    expect(rules).to_have_count(len(policy.rules))
    page.screenshot(path=str(ARTIFACTS / "dashboard-inspection.png"), full_page=True)


def test_a_host_page_charts_its_stored_samples(page: Page, served: Served) -> None:
    page.goto(served.url + "/hosts/gpu-02")
    charts = page.get_by_test_id("sample-charts")
    expect(charts).to_contain_text("24 samples")  # 8 GPUs x 3 sweeps
    for metric in ("temperature_c", "power_w", "ecc_uncorrectable"):
        lines = charts.get_by_test_id(f"chart-{metric}").locator("polyline.series")
        expect(lines).to_have_count(8)
        pts = [len((ln.get_attribute("points") or "").split()) for ln in lines.all()]
        assert pts == [3] * 8, (metric, pts)
    # the ECC chart: one GPU's line climbs at the last sweep (a lower y is a higher value)
    ecc = charts.get_by_test_id("chart-ecc_uncorrectable")
    expect(ecc.locator("figcaption")).to_contain_text("0 – 2")
    rising = [
        ln.get_attribute("data-gpu")
        for ln in ecc.locator("polyline.series").all()
        if re.search(r" [\d.]+,10\.0$", ln.get_attribute("points") or "")
    ]
    assert len(rising) == 1
    expect(charts.get_by_test_id("chart-throttle").locator("g.strip")).to_have_count(8)
    expect(charts.get_by_test_id("chart-throttle").locator("rect.throttled")).to_have_count(0)
    page.screenshot(path=str(ARTIFACTS / "dashboard-host-charts.png"), full_page=True)


def test_throttled_samples_are_marked_on_their_gpus_strip(page: Page, served: Served) -> None:
    page.goto(served.url + "/hosts/gpu-04")
    strip = page.get_by_test_id("chart-throttle")
    marks = strip.locator("rect.throttled")
    expect(marks.first).to_be_attached()
    # the power brake came at the last sweep: every mark sits at the right end of the axis
    xs = [float(m.get_attribute("x") or 0) for m in marks.all()]
    assert xs and all(x == 977.0 for x in xs), xs  # 980 (the end) - 3
    marked = {g.get_attribute("data-gpu") for g in strip.locator("g.strip").all()
              if g.locator("rect.throttled").count()}
    assert marked and len(marked) == len(xs)
    page.screenshot(path=str(ARTIFACTS / "dashboard-host-throttle.png"), full_page=True)


def test_the_overview_heatmap_colours_gpus_by_health(page: Page, served: Served) -> None:
    heat = page.get_by_test_id("heatmap")
    rows = heat.locator(".heatrow")
    expect(rows).to_have_count(4)
    levels = {
        r.get_attribute("data-host"): [
            c.get_attribute("data-level") for c in r.locator(".cell").all()
        ]
        for r in rows.all()
    }
    assert levels["gpu-01"] == ["ok"] * 8
    assert sorted(levels["gpu-02"]) == ["alarm"] + ["ok"] * 7  # uncorrectable ECC
    assert "warning" in levels["gpu-04"] and "alarm" not in levels["gpu-04"]  # power brake
    alarm = heat.locator('[data-host="gpu-02"] .cell.lv-alarm')
    assert "uncorrectable ECC" in (alarm.get_attribute("title") or "")
    assert alarm.evaluate("e => getComputedStyle(e).backgroundColor") != "rgba(0, 0, 0, 0)"
    page.screenshot(path=str(ARTIFACTS / "dashboard-overview-heatmap.png"), full_page=True)


def test_the_operations_pages_in_chinese(page: Page, served: Served) -> None:
    """Issue 29 item 8: the campaigns and inspection pages under ``?lang=zh``."""
    page.goto(served.url + "/campaigns?lang=zh")
    expect(page.locator("h1")).to_have_text("变更任务")
    expect(page.get_by_test_id("campaign-drv-rest").get_by_test_id("approved-by")).to_have_text(
        "待批准")
    canary = page.get_by_test_id("campaign-drv-canary")
    expect(canary.locator("table.waves tbody tr").first.locator("td").first).to_have_text(
        "0 (金丝雀)")
    expect(canary).to_contain_text("已跳过")
    page.screenshot(path=str(ARTIFACTS / "dashboard-campaigns-zh.png"), full_page=True)
    page.goto(served.url + "/inspection?lang=zh")
    expect(page.locator("h1")).to_have_text("巡检")
    expect(page.get_by_test_id("latest-sweep")).to_contain_text("4 台主机")
    expect(page.locator("body")).not_to_contain_text("Findings per rule")
    page.screenshot(path=str(ARTIFACTS / "dashboard-inspection-zh.png"), full_page=True)
