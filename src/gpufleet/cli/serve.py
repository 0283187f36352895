"""``gpufleet serve``: the REST API (``/api/v1``) and ``/metrics`` on uvicorn."""

from __future__ import annotations

import gc
import logging
import socket

import typer

from gpufleet.cli.common import OPTIONS, boundary, current_settings, err_console, lit, open_fleet
from gpufleet.errors import ConfigError
from gpufleet.i18n import _
from gpufleet.logs import configure


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (0: any free port), as uvicorn would bind it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.set_inheritable(True)
    return sock


def _url_host(host: str) -> str:
    """How a browser reaches ``host``: this machine's name for a wildcard address."""
    if host in ("0.0.0.0", "::", ""):
        return socket.getfqdn()
    return f"[{host}]" if ":" in host else host


@boundary
def serve_cmd(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="TCP port (0: any free)."),
    with_worker: bool = typer.Option(
        False,
        "--with-worker",
        help="Also run background jobs in this process (runs, sweeps, schedules): what the "
        "embedded SQLite database needs; on PostgreSQL run `gpufleet worker`s instead or too.",
    ),
) -> None:
    """Serve the REST API (/api/v1, OpenAPI at /api/v1/openapi.json) and Prometheus
    metrics (/metrics) over the fleet database. Callers send 'Authorization: Bearer
    TOKEN' with a token listed (as its SHA-256) in GPUFLEET_API_TOKENS_FILE; without
    that file every API call is refused (401). Stops on Ctrl-C / SIGTERM. Runs started
    through POST /api/v1/runs are run by `gpufleet worker`s (PostgreSQL) or, with
    --with-worker, in this process."""
    import uvicorn

    from gpufleet.api.app import create_app
    from gpufleet.cli.process import sigterm_default

    sigterm_default()  # uvicorn handles SIGTERM (running requests finish) and re-raises it
    configure(current_settings(), debug=OPTIONS.debug, default=logging.INFO)
    fleet = open_fleet()
    from gpufleet.service.core.webhooks import resume

    resume(fleet, always=True)  # this process sends the outbox as long as it runs
    jobs = None
    if with_worker:
        from gpufleet.service.background.job_queue import JobQueue

        jobs = JobQueue(fleet)
        if jobs.shared:
            jobs.check_ready()  # the queue's schema is installed (`gpufleet db upgrade`)
    app = create_app(fleet, jobs=jobs)  # a bad tokens file stops here (exit 2), before listening
    from gpufleet.web.app import attach

    attach(app, fleet, app.state.ctx.tokens)  # the dashboard at / (same sign-in rule)
    if not app.state.ctx.tokens.configured():
        err_console.print(
            "[yellow]" + _("warning:") + "[/] "
            + _("no API token (gpufleet token create) and no GPUFLEET_API_TOKENS_FILE: every "
                "API call is refused (401); /metrics and /api/v1/health still answer"),
            soft_wrap=True,
        )
    sock = _listen(host, port)  # bound now: port 0 is told as the port it got
    base = f"http://{_url_host(host)}:{sock.getsockname()[1]}"
    err_console.print(
        _("gpufleet API on {base}/api/v1 (database {db})").format(
            base=lit(base), db=lit(fleet.db.safe_url)),
        soft_wrap=True,
    )
    err_console.print(
        _("dashboard: {base}/   API docs: {base}/api/v1/docs and {base}/redoc").format(
            base=lit(base)),
        soft_wrap=True,
    )
    if jobs is not None:
        jobs.start_in_process()
        err_console.print(_("background jobs run in this process (--with-worker)"))
    # Everything built so far (modules, the app, its routes and schemas) lives as long as the
    # server: freeze it out of the cyclic collector, whose full collections would otherwise
    # walk it again during every large read (0.1-0.3 s of a 12,500-host request, issue 8).
    gc.collect()
    gc.freeze()
    try:
        config = uvicorn.Config(app, log_level="warning", access_log=False)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        if jobs is not None:
            jobs.stop_in_process()  # running jobs finish first
