"""The interactive API docs, offline (issue 29 item 6): Swagger UI at ``/api/v1/docs`` and
ReDoc at ``/api/v1/redoc`` (and ``/redoc``), from bundled assets, never a CDN.

The Swagger UI and ReDoc builds are those the ``fastapi-offline`` package ships (MIT; its
``static/``: ``swagger-ui-bundle.js``, ``swagger-ui.css``, ``redoc.standalone.js``), served
under ``/api/v1/docs/assets``; each page's start-up script is this package's own file
(``api/static/``), so the pages run under a policy of this site's scripts only
(:data:`gpufleet.api.security.DOCS_CSP`: no inline script, no other origin).
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

#: This package's start-up scripts of the two pages.
OWN = Path(__file__).parent / "static"


def bundle() -> Path:
    """The folder of the Swagger UI and ReDoc builds (the ``fastapi-offline`` package's)."""
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


def _page(title: str, head: str, body: str) -> HTMLResponse:
    html = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title>{head}</head><body>{body}</body></html>"
    )
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


def attach_docs(app: FastAPI, prefix: str) -> list[str]:
    """Serve the two docs pages and their assets from ``app``; the pages' paths (for their
    security policy)."""
    assets = f"{prefix}/docs/assets"
    spec = app.openapi_url or f"{prefix}/openapi.json"
    title = f"{app.title} {app.version}"
    app.mount(assets, StaticFiles(directory=bundle()), name="docs-assets")
    app.mount(f"{prefix}/docs/own", StaticFiles(directory=OWN), name="docs-own")

    @app.get(f"{prefix}/docs", include_in_schema=False)
    def swagger() -> HTMLResponse:
        return _page(
            f"{title} - Swagger UI",
            f'<link rel="stylesheet" href="{assets}/swagger-ui.css">'
            f'<link rel="icon" href="{assets}/favicon.png">',
            f'<div id="swagger-ui" data-spec="{escape(spec)}"></div>'
            f'<script src="{assets}/swagger-ui-bundle.js"></script>'
            f'<script src="{prefix}/docs/own/swagger-init.js"></script>',
        )

    @app.get(f"{prefix}/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return _page(
            f"{title} - ReDoc",
            f'<link rel="icon" href="{assets}/favicon.png">',
            f'<redoc spec-url="{escape(spec)}"></redoc>'
            f'<script src="{assets}/redoc.standalone.js"></script>',
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc_short() -> RedirectResponse:
        return RedirectResponse(f"{prefix}/redoc", status_code=307)

    return [f"{prefix}/docs", f"{prefix}/redoc"]
