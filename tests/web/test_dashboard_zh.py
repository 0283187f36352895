"""Issue 29 item 8, the dashboard in Chinese: the zh catalog covers every key (the base
and the operations pages') with the same fields, and ``Accept-Language: zh-CN`` (or
``?lang=zh``) gives Chinese page titles and headings through the real ASGI app (SQLite and
PostgreSQL)."""

from __future__ import annotations

import re
import string
from pathlib import Path

from fastapi.testclient import TestClient

from gpufleet.domain.campaign import ActionKind
from gpufleet.domain.spec import Baseline
from gpufleet.service.campaigns.campaign import CampaignSpec, create_campaign
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.baselines import save_baseline
from gpufleet.web import i18n
from tests.web.test_dashboard import signed_in


def _fields(text: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(text) if f}


def test_the_zh_catalog_covers_every_key_with_its_fields() -> None:
    zh = i18n.CATALOGS["zh"]
    keys = set(i18n.EN)  # the base pages' and the operations pages' (i18n_ops.OPS_EN)
    assert keys > i18n.BASE_KEYS and "inspection.title" in keys
    assert not keys - set(zh), sorted(keys - set(zh))
    for key in keys:
        assert zh[key] and _fields(zh[key]) == _fields(i18n.EN[key]), key
    assert i18n.pick_language(None, "zh-CN,zh;q=0.9,en;q=0.8") == "zh"


def test_pages_speak_chinese_for_a_chinese_browser(web: TestClient, viewer_token: str) -> None:
    signed_in(web, viewer_token)
    zh = {"Accept-Language": "zh-CN,zh;q=0.9"}
    for path, title in (("/", "集群概览"), ("/hosts", "主机"), ("/leases", "租约与预留"),
                        ("/drift", "相对基线的漂移"), ("/alarms", "告警"),
                        ("/campaigns", "变更任务"), ("/inspection", "巡检")):
        r = web.get(path, headers=zh)
        assert r.status_code == 200, path
        assert f"<h1>{title}" in r.text, (path, r.text[:2000])
        en = web.get(path)
        assert f"<h1>{title}" not in en.text, path
    assert "<h1>集群概览" in web.get("/?lang=zh").text


def test_campaign_and_health_values_are_words_in_chinese(
    web: TestClient, web_fleet: Fleet, viewer_token: str, tmp_path: Path
) -> None:
    """Status, step and health values read as Chinese words (English and the CSS classes
    keep the value), and the approval label takes a full-width colon."""
    web_fleet.settings.guard_share = 1.0  # not about the blast-radius guard
    web_fleet.settings.guard_hosts = 100
    save_baseline(web_fleet, Baseline(name="b-new", driver="570.86.15"))
    up = tmp_path / "up.yml"
    up.write_text("- hosts: all\n  gather_facts: false\n  tasks: []\n")
    create_campaign(web_fleet, CampaignSpec(
        name="c1", target_baseline="b-new", selector="*", action_kind=ActionKind.PLAYBOOK,
        action=str(up), ticket="T-9"))
    signed_in(web, viewer_token)
    zh = web.get("/campaigns", headers={"Accept-Language": "zh-CN"}).text
    assert '<span class="badge cs-planned">已计划</span>' in zh
    assert "· 待执行</span>" in zh and "审批：<span" not in zh and "审批： <" in zh
    en = web.get("/campaigns").text
    assert '<span class="badge cs-planned">planned</span>' in en
    assert "· pending</span>" in en and "approval: <" in en
    hosts = web.get("/hosts", headers={"Accept-Language": "zh-CN"}).text
    assert re.search(r'class="health h-ok">正常<', hosts), hosts[:3000]
    assert re.search(r'class="health h-ok">ok<', web.get("/hosts").text)
    assert i18n.word("health", "critical", "zh") == "严重"
    assert i18n.word("health", "no-such", "zh") == "no-such"


def test_states_severities_and_reasons_are_chinese_words(
    web: TestClient, viewer_token: str
) -> None:
    """Host state badges read as Chinese words (the value stays the CSS class and the
    ``data-value``), and a stored validation reason a template knows reads in Chinese;
    English shows both unchanged."""
    signed_in(web, viewer_token)
    zh = web.get("/hosts", headers={"Accept-Language": "zh-CN"}).text
    en = web.get("/hosts").text
    assert re.search(r'class="badge st-(\w+)" data-value="\1">[^<\x00-\x7f]+<', zh), zh[:3000]
    assert 'class="badge st-available" data-value="available">可用<' in zh
    assert 'class="badge st-available" data-value="available">available<' in en
    reasons = re.findall(r'<td class="msg">([^<]+)', en)
    translated = re.findall(r'<td class="msg">([^<]+)', zh)
    assert reasons and len(reasons) == len(translated)
    assert any(e != z for e, z in zip(reasons, translated, strict=True)), reasons
    assert i18n.word("sev", "critical", "zh") == "严重"
    assert i18n.word("alarm", "bmc-health", "zh") == "BMC 健康"
