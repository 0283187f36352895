"""Security headers on every response of the server (API, dashboard, static files, metrics).

* ``Content-Security-Policy``: only this site's scripts, styles and images (the dashboard
  ships everything it loads: ``src/gpufleet/web/``); no framing, no ``<base>``, forms post
  only here. The interactive API docs (``/api/v1/docs``, ``/api/v1/redoc``) load their
  bundled builds from this site too (:mod:`gpufleet.api.docs`); ReDoc runs a web worker from
  a ``blob:`` URL and Swagger UI draws its icons from ``data:`` fonts, so those pages get a
  policy allowing exactly that, and nothing from another origin.
* ``X-Frame-Options: DENY`` (clickjacking, for browsers without ``frame-ancestors``),
  ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: same-origin``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from fastapi import FastAPI, Request

#: The policy of every page but the interactive API docs.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'; object-src 'none'"
)
#: The API docs pages: this site's scripts only, ReDoc's blob: worker, data: fonts/images.
DOCS_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
)
HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def add_security_headers(app: FastAPI, docs_paths: Collection[str] = ()) -> None:
    """Set the headers above on every response ``app`` sends (errors included)."""

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Any) -> Any:
        response = await call_next(request)
        csp = DOCS_CSP if request.url.path in docs_paths else CSP
        response.headers.setdefault("Content-Security-Policy", csp)
        for key, value in HEADERS.items():
            response.headers.setdefault(key, value)
        return response
