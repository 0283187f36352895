"""The dashboard: server-rendered pages at ``/`` over the same services as the CLI and API.

Pages: overview, hosts (the CLI's selectors), one host (timeline, accelerators of any
vendor, charts of its stored GPU samples, alarms, leases, history), leases and reservations,
drift, alarms, campaigns (waves, gates, approvals), inspection (latest sweep, findings, the
health rules in force); everything they load ships in this
package (``templates/``, ``static/``). Read only: no page changes the fleet.

Sign-in follows the API's rule (it fails closed): a browser signs in once with an API
token of any role (``gpufleet token create`` or one of ``GPUFLEET_API_TOKENS_FILE``); the
token is kept in an HttpOnly, SameSite=Strict cookie and checked on every page, so a revoked
or expired token is signed out at its next page. No token configured: the sign-in page says
how to create one.

This module only presents: it calls one service function per panel and lays the result out
(counts for a bar, positions on the timeline's axis).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, PackageLoader, select_autoescape

import gpufleet
from gpufleet.domain.states import HostState
from gpufleet.errors import GpufleetError, Unauthorized
from gpufleet.i18n import reason_text
from gpufleet.service.allocation import capacity, leases
from gpufleet.service.campaigns.campaign import list_campaigns
from gpufleet.service.core import alarms
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.tokens import Authenticator, Principal
from gpufleet.service.hosts import baselines
from gpufleet.service.views.accelerators import host_accelerators
from gpufleet.service.views.hosts import list_hosts, show_host
from gpufleet.service.views.operations import fleet_heatmap, gpu_series, inspection_view
from gpufleet.service.views.racks import list_racks, show_rack
from gpufleet.service.views.summary import fleet_summary
from gpufleet.service.views.timeline import LANES, TimelineItem, host_timeline
from gpufleet.web.charts import sample_charts
from gpufleet.web.i18n import pick_language, t, word

COOKIE = "gpufleet_token"
STATIC = Path(__file__).parent / "static"
#: Hosts one host-list page shows (the API pages through more).
HOST_PAGE = 500
STATES = [s.value for s in HostState]


def _when(dt: datetime | None) -> str:
    return "-" if dt is None else dt.strftime("%Y-%m-%d %H:%M UTC")


def _span(delta: timedelta) -> str:
    s = abs(int(delta.total_seconds()))
    if s < 90:
        return f"{s}s"
    if s < 90 * 60:
        return f"{round(s / 60)}m"
    if s < 36 * 3600:
        return f"{round(s / 3600)}h"
    return f"{round(s / 86400)}d"


@dataclass(frozen=True)
class Mark:
    """One item placed on the timeline (x in 0..1000 of the SVG's view box)."""

    x: float
    y: float
    item: TimelineItem


def timeline_layout(items: list[TimelineItem]) -> dict[str, Any]:
    """Positions of the items on a time axis, a lane per row, and five axis ticks."""
    if not items:
        return {"marks": [], "ticks": [], "lanes": LANES}
    first, last = min(i.at for i in items), max(i.at for i in items)
    span = (last - first) or timedelta(hours=1)
    left, width = 150.0, 830.0
    marks = [
        Mark(
            x=left + width * ((i.at - first) / span),
            y=20 + 26 * LANES.index(i.lane),
            item=i,
        )
        for i in reversed(items)
    ]
    fmt = (
        "%H:%M:%S"
        if span < timedelta(hours=2)
        else ("%m-%d %H:%M" if span < timedelta(days=3) else "%Y-%m-%d")
    )
    ticks = [(left + width * k / 4, (first + span * k / 4).strftime(fmt)) for k in range(5)]
    return {"marks": marks, "ticks": ticks, "lanes": LANES, "first": first, "last": last}


def _bar(counts: dict[str, int], order: list[str] | None = None) -> list[tuple[str, int, float]]:
    """(label, count, percent) for a horizontal stacked bar; zero counts dropped."""
    total = sum(counts.values()) or 1
    keys = [k for k in (order or sorted(counts, key=lambda k: (-counts[k], k))) if counts.get(k)]
    return [(k, counts[k], 100.0 * counts[k] / total) for k in keys]


class Dashboard:
    """The pages of one server."""

    def __init__(self, fleet: Fleet, auth: Authenticator) -> None:
        self.fleet = fleet
        self.auth = auth
        self.env = Environment(
            loader=PackageLoader("gpufleet.web", "templates"),
            autoescape=select_autoescape(["html"]),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["when"] = _when
        self.env.globals["version"] = gpufleet.__version__

    # --- plumbing ------------------------------------------------------------------------

    def who(self, request: Request) -> Principal | None:
        try:
            return self.auth.token(request.cookies.get(COOKIE, ""))
        except Unauthorized:
            return None

    def render(
        self, request: Request, template: str, status: int = 200, **values: Any
    ) -> HTMLResponse:
        lang = pick_language(
            request.query_params.get("lang"), request.headers.get("accept-language")
        )
        now = self.fleet.now()

        def ago(dt: datetime | None) -> str:
            if dt is None:
                return t("time.never", lang)
            key = "time.ago" if dt <= now else "time.in"
            return t(key, lang, d=_span(now - dt))

        html = self.env.get_template(template).render(
            request=request,
            path=request.url.path,
            lang=lang,
            t=lambda key, **kw: t(key, lang, **kw),
            word=lambda kind, value: word(kind, value, lang),
            reason=lambda text: reason_text(text, "zh_CN" if lang == "zh" else "en"),
            ago=ago,
            now=now,
            **values,
        )
        return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})

    def page(self, request: Request, template: str, data: Callable[[], dict[str, Any]]) -> Response:
        """Signed in: ``template`` over ``data()``; else the sign-in page. An error of the
        fleet (unknown host, bad selector) is shown as a page with its HTTP status."""
        who = self.who(request)
        if who is None:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?next={quote(target)}", status_code=303)
        try:
            values = data()
        except GpufleetError as exc:
            return self.render(
                request,
                "error.html",
                status=exc.http_status,
                who=who,
                status_code=exc.http_status,
                message=str(exc),
            )
        return self.render(request, template, who=who, **values)

    # --- pages ---------------------------------------------------------------------------

    def overview(self) -> dict[str, Any]:
        f = self.fleet
        sm = fleet_summary(f)
        hosts = list_hosts(f)
        cap = capacity.capacity(f)
        open_alarms = alarms.list_alarms(f)
        return {
            "sm": sm,
            "states": _bar(sm.per_state, [s for s in STATES if s in sm.per_state]),
            "models": _bar(dict(Counter((h.gpu_model or "unknown") for h in hosts))),
            "pools": _bar(dict(Counter((h.pool or "-") for h in hosts))),
            "gpu_use": _bar(cap.totals, list(capacity.COLUMNS)),
            "alarms": open_alarms,
            "severity": Counter(a.severity for a in open_alarms),
            "expiring": leases.expiring(f, timedelta(hours=24)),
            "back": cap.back,
            "drifted": len(sm.drift.by_host),
            "heatmap": fleet_heatmap(f),
        }

    def hosts(self, request: Request) -> dict[str, Any]:
        q = (request.query_params.get("q") or "").strip()
        state = request.query_params.get("state") or None
        model = (request.query_params.get("model") or "").strip() or None
        try:
            rows = list_hosts(self.fleet, q or None, state=state, model=model, limit=HOST_PAGE + 1)
        except GpufleetError as exc:
            if exc.http_status != 404:
                raise
            rows = []
        return {
            "q": q,
            "state": state or "",
            "model": model or "",
            "states": STATES,
            "hosts": rows[:HOST_PAGE],
            "more": len(rows) > HOST_PAGE,
        }

    def host(self, name: str) -> dict[str, Any]:
        detail = show_host(self.fleet, name, events=100)
        items = host_timeline(self.fleet, name)
        facts = detail.facts
        return {
            "d": detail,
            "h": detail.view,
            "facts": facts,
            "acc": host_accelerators(facts) if facts is not None else None,
            "charts": sample_charts(gpu_series(self.fleet, name)),
            "items": items,
            "tl": timeline_layout(items),
        }

    def campaigns(self) -> dict[str, Any]:
        return {"campaigns": list_campaigns(self.fleet)}  # newest first

    def inspection(self) -> dict[str, Any]:
        return {"view": inspection_view(self.fleet)}

    def leases(self, request: Request) -> dict[str, Any]:
        show_all = request.query_params.get("all") == "1"
        return {
            "leases": leases.list_leases(self.fleet, include_ended=show_all),
            "show_all": show_all,
        }

    def drift(self) -> dict[str, Any]:
        return {"drift": baselines.drift(self.fleet)}

    def alarms(self, request: Request) -> dict[str, Any]:
        show_all = request.query_params.get("all") == "1"
        return {
            "alarms": alarms.list_alarms(self.fleet, include_closed=show_all),
            "show_all": show_all,
        }

    def racks(self) -> dict[str, Any]:
        return {"racks": list_racks(self.fleet)}

    def rack(self, name: str) -> dict[str, Any]:
        return {"rack": show_rack(self.fleet, name)}

    def login_page(self, request: Request, error: str | None = None, status: int = 200) -> Response:
        configured = self.auth.configured()
        return self.render(
            request,
            "login.html",
            status=status,
            who=None,
            configured=configured,
            error=error,
            next=_safe_next(request.query_params.get("next")),
        )


def _safe_next(target: str | None) -> str:
    """Only a path of this site (never ``//other.host``) to go back to after sign-in."""
    if target and target.startswith("/") and not target.startswith("//"):
        return target
    return "/"


def cross_site(request: Request) -> str | None:
    """Why a state-changing request (sign-in, sign-out) came from another site, or None.

    Browsers name the page a POST comes from: ``Sec-Fetch-Site``, ``Origin`` (every current
    browser on a POST), else ``Referer``. Any of them naming another origin than this server
    refuses the request (login CSRF: signing the victim in with the attacker's token; forced
    sign-out). A client that sends none of them is not a browser acting for someone else."""
    site = request.headers.get("sec-fetch-site")
    if site and site.lower() not in ("same-origin", "none"):
        return f"Sec-Fetch-Site: {site}"
    own = f"{request.url.scheme}://{request.url.netloc}".lower()
    origin = request.headers.get("origin")
    if origin is not None:
        return None if origin.lower() == own else f"Origin: {origin}"
    referer = request.headers.get("referer")
    if referer is not None:
        parts = urlsplit(referer)
        came = f"{parts.scheme}://{parts.netloc}".lower()
        return None if came == own else f"Referer: {referer}"
    return None


def _refused(why: str) -> Response:
    return HTMLResponse(
        f"cross-site request refused ({escape(why)})",
        status_code=403,
        headers={"Cache-Control": "no-store"},
    )


def router(dash: Dashboard) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    @r.get("/", response_class=HTMLResponse)
    def overview(request: Request) -> Response:
        return dash.page(request, "overview.html", dash.overview)

    @r.get("/hosts", response_class=HTMLResponse)
    def hosts(request: Request) -> Response:
        return dash.page(request, "hosts.html", lambda: dash.hosts(request))

    @r.get("/hosts/{name}", response_class=HTMLResponse)
    def host(request: Request, name: str) -> Response:
        return dash.page(request, "host.html", lambda: dash.host(name))

    @r.get("/campaigns", response_class=HTMLResponse)
    def campaigns_page(request: Request) -> Response:
        return dash.page(request, "campaigns.html", dash.campaigns)

    @r.get("/inspection", response_class=HTMLResponse)
    def inspection_page(request: Request) -> Response:
        return dash.page(request, "inspection.html", dash.inspection)

    @r.get("/leases", response_class=HTMLResponse)
    def leases_page(request: Request) -> Response:
        return dash.page(request, "leases.html", lambda: dash.leases(request))

    @r.get("/drift", response_class=HTMLResponse)
    def drift(request: Request) -> Response:
        return dash.page(request, "drift.html", dash.drift)

    @r.get("/alarms", response_class=HTMLResponse)
    def alarms_page(request: Request) -> Response:
        return dash.page(request, "alarms.html", lambda: dash.alarms(request))

    @r.get("/racks", response_class=HTMLResponse)
    def racks_page(request: Request) -> Response:
        return dash.page(request, "racks.html", dash.racks)

    @r.get("/racks/{name}", response_class=HTMLResponse)
    def rack_page(request: Request, name: str) -> Response:
        return dash.page(request, "rack.html", lambda: dash.rack(name))

    @r.get("/login", response_class=HTMLResponse)
    def login(request: Request) -> Response:
        return dash.login_page(request)

    @r.post("/login", response_class=HTMLResponse)
    async def login_post(request: Request) -> Response:
        if (why := cross_site(request)) is not None:
            return _refused(why)
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0].strip()
        target = _safe_next((form.get("next") or ["/"])[0])
        try:
            dash.auth.token(token)
        except Unauthorized as exc:
            return dash.login_page(request, error=str(exc), status=401)
        resp = RedirectResponse(target, status_code=303)
        resp.set_cookie(
            COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            max_age=12 * 3600,
        )
        return resp

    @r.post("/logout")
    def logout(request: Request) -> Response:
        if (why := cross_site(request)) is not None:
            return _refused(why)
        resp = RedirectResponse("/login", status_code=303)
        resp.delete_cookie(COOKIE)
        return resp

    return r


def attach(app: FastAPI, fleet: Fleet, auth: Authenticator) -> None:
    """Serve the dashboard from ``app`` (the API's application): pages and ``/static``."""
    app.include_router(router(Dashboard(fleet, auth)))
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
