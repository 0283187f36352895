"""The API application: ``/api/v1`` (OpenAPI at ``/api/v1/openapi.json``) and ``/metrics``.

One error boundary: a :class:`~gpufleet.errors.GpufleetError` becomes its ``http_status``
with the one JSON shape ``{"error": {"code", "message", "retryable"}}``; FastAPI's own
refusals (an unknown route, a body or query that does not validate) get the same shape,
with the field named in the message.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

import gpufleet
from gpufleet.api.auth import Authenticator, Principal, TokenStore
from gpufleet.api.deps import ApiContext
from gpufleet.api.docs import attach_docs
from gpufleet.api.limits import BodyLimit
from gpufleet.api.metrics import JobQueueCollector, registry_for
from gpufleet.api.routes import ERRORS
from gpufleet.api.routes import alarms as alarm_routes
from gpufleet.api.routes import baselines as baseline_routes
from gpufleet.api.routes import campaigns as campaign_routes
from gpufleet.api.routes import health as health_routes
from gpufleet.api.routes import hosts as host_routes
from gpufleet.api.routes import leases as lease_routes
from gpufleet.api.routes import racks as rack_routes
from gpufleet.api.routes import runs as run_routes
from gpufleet.api.routes import tokens as token_routes
from gpufleet.api.schemas_ops import Health
from gpufleet.api.security import add_security_headers
from gpufleet.errors import ConfigError, GpufleetError, NotFound
from gpufleet.service.background.job_queue import JobQueue
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.tokens import record_api_call

log = logging.getLogger(__name__)

PREFIX = "/api/v1"
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _error(exc: GpufleetError, status: int | None = None) -> JSONResponse:
    status = status or exc.http_status
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(exc.as_json(), status_code=status, headers=headers)


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        where, rest = parts[0], parts[1:]
        return f"{where} field '{'.'.join(rest)}'" if rest else where
    return ".".join(parts) or "request"


def create_app(
    fleet: Fleet, tokens: TokenStore | None = None, jobs: JobQueue | None = None
) -> FastAPI:
    """The API over ``fleet``; ``tokens`` default to the fleet's ``GPUFLEET_API_TOKENS_FILE``;
    ``jobs``: the job queue runs are deferred on (``serve --with-worker`` passes the one its
    worker runs; default: the fleet's shared queue, built on first use)."""
    app = FastAPI(
        title="gpufleet",
        version=gpufleet.__version__,
        description="GPU fleet inventory, validation and allocation. Every error is "
        '`{"error": {"code", "message", "retryable"}}`.',
        openapi_url=f"{PREFIX}/openapi.json",
        docs_url=None,  # served offline from bundled assets (api/docs.py)
        redoc_url=None,
    )
    store = tokens if tokens is not None else TokenStore(fleet.settings.api_tokens_file)
    app.state.ctx = ApiContext(fleet=fleet, tokens=Authenticator(fleet, store))
    # the token, then the size, before any route reads a body (api/limits.py)
    app.add_middleware(
        BodyLimit, authenticate=app.state.ctx.tokens.authenticate, prefix=PREFIX,
        body_limit=fleet.settings.api_max_body_bytes,
        upload_limit=fleet.settings.api_max_upload_bytes,
    )

    add_security_headers(app, frozenset(attach_docs(app, PREFIX)))

    @app.middleware("http")
    async def audit(request: Request, call_next: Any) -> Any:
        """Every mutating call by a token is an ``api-call`` event under its name."""
        response = await call_next(request)
        who = getattr(request.state, "principal", None)
        if request.method in MUTATING and isinstance(who, Principal):
            try:
                call = (request.method, request.url.path, response.status_code)
                await run_in_threadpool(record_api_call, fleet, who, *call)
            except GpufleetError as exc:  # the call is done; say the audit failed, loudly
                log.error("audit of %s %s failed: %s", request.method, request.url.path, exc)
        return response

    @app.exception_handler(GpufleetError)
    async def gpufleet_error(request: Request, exc: GpufleetError) -> JSONResponse:
        # the server's own trouble (a database away: 503) is logged; a caller's mistake not
        level = logging.WARNING if exc.http_status >= 500 else logging.DEBUG
        log.log(level, "%s %s: %s (%s)", request.method, request.url.path, exc, exc.http_status)
        return _error(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{_field(e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in exc.errors()
        )
        return _error(ConfigError(f"invalid request: {problems}"))

    @app.exception_handler(OverflowError)
    async def out_of_range(request: Request, exc: OverflowError) -> JSONResponse:
        # a well-formed value past what a date or number can hold (year 9999, 1e300 s)
        return _error(ConfigError(f"{request.method} {request.url.path}: a value is out of "
                                  f"range ({exc})"))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # never a plain-text 500: the one JSON shape; the traceback goes to the server's log
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return _error(GpufleetError(f"{request.method} {request.url.path}: internal error "
                                    f"({type(exc).__name__})"))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return _error(NotFound(f"no such resource: {request.url.path}"))
        err = GpufleetError(f"{request.method} {request.url.path}: {exc.detail}")
        return _error(err, exc.status_code)

    v1 = APIRouter(prefix=PREFIX)

    @v1.get("/health", summary="Liveness (no token needed)", tags=["server"], responses=ERRORS)
    def health() -> Health:
        return Health(status="ok", version=app.version)

    v1.include_router(host_routes.router)
    v1.include_router(lease_routes.router)
    v1.include_router(run_routes.router)
    v1.include_router(baseline_routes.router)
    v1.include_router(alarm_routes.router)
    v1.include_router(token_routes.router)
    v1.include_router(campaign_routes.router)
    v1.include_router(health_routes.router)
    v1.include_router(rack_routes.router)
    app.include_router(v1)

    registry = registry_for(lambda: fleet)
    app.state.jobs = jobs
    registry.register(JobQueueCollector(lambda: run_routes.job_queue_of(app).depth()))

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
