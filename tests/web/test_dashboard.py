"""The dashboard through the real ASGI app on SQLite and PostgreSQL: sign-in (the API's
rule: fails closed), every page, the timeline, errors as pages, the text catalog."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.tokens import revoke_token
from gpufleet.service.views.summary import fleet_summary
from gpufleet.service.views.timeline import LANES
from gpufleet.web import i18n

TEMPLATES = Path(__file__).parents[2] / "src" / "gpufleet" / "web" / "templates"


def signed_in(web: TestClient, token: str) -> None:
    r = web.post("/login", data={"token": token, "next": "/hosts"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/hosts", r.text
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")


def test_pages_need_a_token_and_sign_in_keeps_it_in_a_cookie(
    web: TestClient, web_fleet: Fleet, viewer_token: str
) -> None:
    for path in ("/", "/hosts", "/hosts/gpu-01", "/leases", "/drift", "/alarms"):
        r = web.get(path, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")
    bad = web.post("/login", data={"token": "gft_nope"})
    assert bad.status_code == 401 and "not accepted" in bad.text
    # never back to another site after sign-in
    r = web.post(
        "/login", data={"token": viewer_token, "next": "//evil.example/"}, follow_redirects=False
    )
    assert r.headers["location"] == "/"
    signed_in(web, viewer_token)
    page = web.get("/")
    assert page.status_code == 200 and "dash (viewer)" in page.text
    assert viewer_token not in page.text
    # revoked: the next page asks to sign in again
    revoke_token(web_fleet, "dash")
    assert web.get("/", follow_redirects=False).status_code == 303
    # sign out drops the cookie
    assert web.post("/logout", follow_redirects=False).headers["location"] == "/login"


def test_overview_counts_are_the_summary(
    web: TestClient, web_fleet: Fleet, viewer_token: str
) -> None:
    signed_in(web, viewer_token)
    html = web.get("/").text
    sm = fleet_summary(web_fleet)

    def kpi(name: str) -> int:
        m = re.search(rf'data-testid="kpi-{name}"><span class="n">(\d+)<', html)
        assert m, name
        return int(m.group(1))

    assert kpi("hosts") == sm.hosts == 6
    assert kpi("gpus") == sm.gpus_total == 48 and kpi("gpus-available") == sm.gpus_available
    states = dict(re.findall(r'data-state="([a-z]+)">(\d+)<', html))
    assert {k: int(v) for k, v in states.items()} == sm.per_state
    assert (
        "/static/gpufleet.css" in html
        and "http" not in html.split("<body>")[0].replace('name="viewport"', "").split("<title>")[0]
    )


def test_host_list_filters_with_the_cli_selectors(web: TestClient, viewer_token: str) -> None:
    signed_in(web, viewer_token)
    hosts = re.compile(r'<tr data-host="([^"]+)">')
    assert hosts.findall(web.get("/hosts").text) == [f"gpu-0{i}" for i in range(1, 7)]
    assert hosts.findall(web.get("/hosts", params={"q": "gpu-02,gpu-03,gpu-?6"}).text) == [
        "gpu-02",
        "gpu-03",
        "gpu-06",
    ]
    assert hosts.findall(
        web.get("/hosts", params={"q": "gpu-0*", "state": "available", "model": "H100"}).text
    ) == [f"gpu-0{i}" for i in range(1, 7)]
    none = web.get("/hosts", params={"model": "A100"})
    assert none.status_code == 200 and 'data-testid="host-none"' in none.text
    bad = web.get("/hosts", params={"state": "bogus"})
    assert bad.status_code == 422 and "bogus" in bad.text and "<html" in bad.text


def test_host_page_shows_its_timeline_and_gpus(web: TestClient, viewer_token: str) -> None:
    signed_in(web, viewer_token)
    r = web.get("/hosts/gpu-02")
    assert r.status_code == 200
    html = r.text
    assert 'data-testid="timeline"' in html
    marks = re.findall(r'<circle class="mark ln-([a-z]+)', html)
    assert "collection" in marks and "state" in marks and "change" in marks
    gpu_rows = r"<tr class=\"[^\"]*\" data-vendor=\"nvidia\"><td>\d+</td>"
    assert len(re.findall(gpu_rows, html)) == 8
    missing = web.get("/hosts/gpu-99")
    assert missing.status_code == 404 and "gpu-99" in missing.text


def test_other_pages_render(web: TestClient, viewer_token: str) -> None:
    signed_in(web, viewer_token)
    for path in ("/leases", "/leases?all=1", "/drift", "/alarms", "/alarms?all=1"):
        r = web.get(path)
        assert r.status_code == 200 and "<h1>" in r.text, path
    css = web.get("/static/gpufleet.css")
    assert css.status_code == 200 and ":focus-visible" in css.text
    assert web.get("/static/gpufleet.js").status_code == 200


def test_every_text_of_the_templates_is_in_the_catalog() -> None:
    used = set()
    for f in TEMPLATES.glob("*.html"):
        used |= set(re.findall(r"""t\(["']([a-z_]+\.[a-z_]+)["']""", f.read_text()))
    app_py = (TEMPLATES.parent / "app.py").read_text()
    used |= set(re.findall(r"""\bt\(["']([a-z_]+\.[a-z_]+)["']""", app_py))
    lanes = {f"lane.{x}" for x in LANES}  # the timeline's lane names: t("lane." + lane)
    assert used and not (used - set(i18n.EN)), used - set(i18n.EN)
    assert lanes <= set(i18n.EN)
    # a second catalog plugs in by language code, falling back to English per key
    i18n.CATALOGS["xx"] = {"nav.hosts": "xx-hosts"}
    try:
        assert i18n.t("nav.hosts", "xx") == "xx-hosts" and i18n.t("nav.leases", "xx") == "Leases"
        assert i18n.pick_language(None, "xx-YY,xx;q=0.9,en;q=0.8") == "xx"
    finally:
        del i18n.CATALOGS["xx"]
    assert i18n.pick_language(None, "fr-FR") == "en"
