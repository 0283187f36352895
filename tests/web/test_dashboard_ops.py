"""Issue 29 item 6 through the real ASGI app on SQLite and PostgreSQL: the inspection page, the
campaigns page, a host's charts and the overview's heatmap read the stored samples, findings
and campaigns (the read models of ``service/views/operations.py`` and the campaign
service)."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.domain.campaign import ActionKind
from gpufleet.domain.rules import RulePolicy
from gpufleet.domain.spec import Baseline
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.campaigns.campaign import CampaignSpec, create_campaign
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.tokens import Role, create_token
from gpufleet.service.health.inspect import inspect
from gpufleet.service.hosts.baselines import save_baseline
from gpufleet.service.hosts.validate import validate
from gpufleet.testing import FakeClock
from gpufleet.web.app import attach
from tests.service.test_inspect import set_faults
from tests.web.test_dashboard import signed_in


def test_inspection_campaigns_charts_and_heatmap(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    fleet.settings.guard_share = 1.0  # not about the blast-radius guard
    fleet.settings.guard_hosts = 100
    d = tmp_path / "lab"
    enroll_lab(fleet, d, 3, models=["h100-8x"], faults={})
    validate(fleet)
    for _ in range(2):
        inspect(fleet)
        clock.advance(minutes=10)
    set_faults(d, {"gpu-02": ["ecc-uncorrectable"]}, clock)
    inspect(fleet)
    app = create_app(fleet, TokenStore(None))
    attach(app, fleet, app.state.ctx.tokens)
    web = TestClient(app)
    signed_in(web, create_token(fleet, "dash", Role.VIEWER)[1])

    html = web.get("/inspection").text
    assert re.search(r'data-testid="latest-sweep">.*?3 hosts', html, re.S)
    version = RulePolicy.load_default().version
    assert f'data-testid="rules-version">{version}<' in html
    assert re.findall(r'<tr data-rule="([a-z-]+)"><td class="mono">[a-z-]+</td><td class="num">',
                      html) == ["ecc-uncorrectable"]
    assert re.findall(r'<tr data-host="([^"]+)">', html) == ["gpu-02"]

    page = web.get("/hosts/gpu-02").text
    assert "24 samples" in page  # 8 GPUs x 3 sweeps
    ecc = page.split('data-testid="chart-ecc_uncorrectable"', 1)[1].split("</figure>", 1)[0]
    lines = re.findall(r'data-gpu="(\d+)"[^>]*points="([^"]+)"', ecc)
    assert len(lines) == 8 and all(len(p.split()) == 3 for _, p in lines)
    # x: the three sweeps 10 minutes apart on the axis (100 .. 980)
    assert [p.split(",")[0] for p in lines[0][1].split()] == ["100.0", "540.0", "980.0"]
    assert sum(p.endswith(",10.0") for _, p in lines) == 1  # one GPU's ECC count went up
    assert web.get("/hosts/gpu-01").text.count('class="series"') == 24

    over = web.get("/").text
    heat = {
        host: re.findall(r'data-level="([a-z]+)"', cells)
        for host, cells in re.findall(
            r'<div class="heatrow" data-host="([^"]+)">(.*?)</div>', over, re.S)
    }
    assert sorted(heat) == ["gpu-01", "gpu-02", "gpu-03"]
    assert heat["gpu-01"] == heat["gpu-03"] == ["ok"] * 8
    assert sorted(heat["gpu-02"]) == ["alarm"] + ["ok"] * 7

    assert "No campaign yet" in web.get("/campaigns").text
    save_baseline(fleet, Baseline(name="b-new", driver="570.86.15"))
    up = tmp_path / "up.yml"
    up.write_text("- hosts: all\n  gather_facts: false\n  tasks: []\n")
    spec = CampaignSpec(name="c1", target_baseline="b-new", selector="gpu-*",
                        action_kind=ActionKind.PLAYBOOK, action=str(up), ticket="T-9")
    create_campaign(fleet, spec)
    camp = web.get("/campaigns").text
    assert '<tr data-campaign="c1">' in camp and "T-9" in camp
    assert re.search(r'data-testid="approved-by">awaiting approval<', camp)
    assert "(canary)" in camp and "Skipped" in camp  # gpu-02 is quarantined
