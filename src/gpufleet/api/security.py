"""Security headers on every response of the server (API, dashboard, static files, metrics).

* ``Content-Security-Policy``: only this site's scripts, styles and images (the dashboard
  ships everything it loads: ``src/gpufleet/web/``); no framing, no ``<base>``, forms post
  only here. The interactive API docs (``/api/v1/docs``) load Swagger UI from its CDN with an
  inline bootstrap script, so that one page gets a policy allowing exactly that.
* ``X-Frame-Options: DENY`` (clickjacking, for browsers without ``frame-ancestors``),
  ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: same-origin``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request

#: The policy of every page but the interactive API docs.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'; object-src 'none'"
)
#: Swagger UI (``/api/v1/docs``): its CDN and its inline bootstrap script.
DOCS_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; "
    "style-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; "
    "img-src 'self' data: https://fastapi.tiangolo.com; frame-ancestors 'none'; "
    "base-uri 'none'; object-src 'none'"
)
HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def add_security_headers(app: FastAPI, docs_path: str | None) -> None:
    """Set the headers above on every response ``app`` sends (errors included)."""

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Any) -> Any:
        response = await call_next(request)
        csp = DOCS_CSP if docs_path and request.url.path == docs_path else CSP
        response.headers.setdefault("Content-Security-Policy", csp)
        for key, value in HEADERS.items():
            response.headers.setdefault(key, value)
        return response
