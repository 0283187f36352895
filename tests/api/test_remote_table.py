"""Issue 25 item 2: remote mode's reads are one table (``gpufleet.cli.remote_table.READS``:
command -> method, path, parameters, schema, paging, presenter) served by one handler. Each
row names a real command, a route the API serves with that method, only the command's own
arguments, and a presenter that takes them; and the rows added with the table (``leases
expiring`` on its new route ``GET /leases/expiring``, ``token list``, ``leases show``,
``alarms show``, ``alarms dead-letters``) print over the API exactly what the local CLI
prints (``leases list``, ``hosts list``, ``events``, ``alarms list``, ``pool list`` and
``capacity check`` are compared in ``test_remote_cli``)."""

from __future__ import annotations

import importlib
import inspect
import string
from datetime import UTC, datetime, timedelta
from pathlib import Path

import typer
from sqlalchemy import select

from gpufleet.api.app import PREFIX, create_app
from gpufleet.api.schemas import Schema
from gpufleet.cli.main import _REGISTER
from gpufleet.cli.remote_table import READS, Read
from gpufleet.domain.events import AlarmKind, AlarmSeverity
from gpufleet.domain.placement import Request
from gpufleet.service.allocation.allocation import allocate
from gpufleet.service.core.alarms import list_alarms, raise_alarm
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.tokens import Role, create_token
from gpufleet.store.tables import Host
from tests.api.conftest import TOKENS
from tests.api.test_remote_cli import local_cli, remote_cli, server  # noqa: F401  (fixture)


def _cli() -> typer.Typer:
    """The CLI with every command module loaded (``gpufleet`` loads one per command)."""
    app = typer.Typer()
    for register in _REGISTER.values():
        register(app)
    return app


def _commands(app: typer.Typer) -> dict[str, object]:
    """Every command function of the CLI, by ``module.function`` under ``gpufleet.cli``."""
    out: dict[str, object] = {}
    for cmd in app.registered_commands:
        fn = cmd.callback
        if fn is not None:
            fn = inspect.unwrap(fn)
            out[f"{fn.__module__}.{fn.__qualname__}".removeprefix("gpufleet.cli.")] = fn
    for group in app.registered_groups:
        if group.typer_instance is not None:
            out |= _commands(group.typer_instance)
    return out


def _routes(fleet: Fleet) -> set[tuple[str, str]]:
    """(METHOD, path under /api/v1) of every route the API publishes (its OpenAPI)."""
    paths = create_app(fleet).openapi()["paths"]
    return {
        (method.upper(), path.removeprefix(f"{PREFIX}/"))
        for path, ops in paths.items()
        for method in ops
    }


def _problems(key: str, read: Read, commands: dict[str, object], routes: set[tuple[str, str]]
              ) -> list[str]:
    fn = commands.get(key)
    if fn is None:
        return [f"{key}: no such command"]
    args = set(inspect.signature(fn).parameters)  # type: ignore[arg-type]
    out = []
    fields = {f for _, f, _, _ in string.Formatter().parse(read.path) if f}
    route = string.Formatter().vformat(read.path, (), {f: f"{{{f}}}" for f in fields})
    served = {(m, p) for m, p in routes}
    if not any(m == read.method and _same(p, route) for m, p in served):
        out.append(f"{key}: the API has no {read.method} {read.path}")
    wanted = fields | {p.partition("=")[2] or p for p in read.params} | set(read.args)
    wanted |= {r.partition("=")[2] for r in read.refuse}
    out += [f"{key}: the command has no argument {a}" for a in sorted(wanted - args)]
    if not (isinstance(read.schema, type) and issubclass(read.schema, Schema)):
        out.append(f"{key}: {read.schema} is not an API schema")
    module, _, name = read.present.partition(":")
    present = getattr(importlib.import_module(module), name, None)
    if present is None:
        return [*out, f"{key}: no presenter {read.present}"]
    takes = list(inspect.signature(present).parameters)
    out += [f"{key}: {read.present} takes no {a}" for a in read.args if a not in takes[1:]]
    return out


def _same(served: str, path: str) -> bool:
    """The same route, whatever the path parameters are called."""
    a, b = served.split("/"), path.split("/")
    return len(a) == len(b) and all(
        x == y or (x.startswith("{") and y.startswith("{")) for x, y in zip(a, b, strict=True)
    )


def test_every_row_is_a_command_a_route_and_a_presenter(fleet: Fleet) -> None:
    commands, routes = _commands(_cli()), _routes(fleet)
    assert len(READS) >= 11
    problems = [p for key, read in READS.items() for p in _problems(key, read, commands, routes)]
    assert problems == []
    # and the check does fail on a wrong row
    bad = Read("leases/{lease}", Schema, "gpufleet.cli.alloc:show_lease", params=("owner",),
               args=("as_json", "title"))
    assert _problems("alloc.leases_show_cmd", bad, commands, routes) == [
        "alloc.leases_show_cmd: the command has no argument lease",
        "alloc.leases_show_cmd: the command has no argument owner",
        "alloc.leases_show_cmd: the command has no argument title",
        "alloc.leases_show_cmd: gpufleet.cli.alloc:show_lease takes no title",
    ]
    assert _problems("alloc.nope_cmd", bad, commands, routes) == ["alloc.nope_cmd: no such command"]
    assert _problems("hosts.list_cmd", Read("hostz", Schema, "gpufleet.cli.hosts:print_events"),
                     commands, routes) == ["hosts.list_cmd: the API has no GET hostz"]


def test_table_reads_print_what_the_local_cli_prints(
    lab_fleet: Fleet, server: str, tmp_path: Path  # noqa: F811
) -> None:
    fleet, tmp = lab_fleet, tmp_path
    # the server and the local CLI read the real clock (the server's worker expires leases)
    now = datetime.now(UTC)
    got = allocate(fleet, Request(gpus=8), owner="team-a", purpose="llm",
                   until=now + timedelta(hours=20), users=["alice"])
    assert got.lease is not None
    allocate(fleet, Request(gpus=8), owner="team-b", purpose="eval", until=now + timedelta(days=2))
    with fleet.db.session() as s:
        host = s.scalar(select(Host).where(Host.name == "gpu-02"))
        assert host is not None
        raise_alarm(s, fleet, host, AlarmKind.DUPLICATE_HOST, AlarmSeverity.CRITICAL, "same UUIDs")
    create_token(fleet, "ci-bot", Role.parse("viewer", "--role"), timedelta(days=30))
    alarm = list_alarms(fleet)[0]

    local = local_cli(fleet, tmp)
    viewer = remote_cli(server, TOKENS["viewer"], tmp)
    admin = remote_cli(server, TOKENS["admin"], tmp)
    for cli, argv in (
        (viewer, ["leases", "expiring"]),
        (viewer, ["leases", "expiring", "--within", "3d"]),
        (viewer, ["leases", "expiring", got.lease.hosts[0], "--within", "3d"]),
        (viewer, ["leases", "show", str(got.lease.id)]),
        (viewer, ["alarms", "show", str(alarm.id)]),
        (viewer, ["alarms", "dead-letters", "--limit", "5"]),
        (admin, ["token", "list"]),
    ):
        want = local.json(*argv)
        assert cli.json(*argv) == want, argv
        assert cli.run(*argv).stdout == local.run(*argv).stdout, argv
    assert [x["id"] for x in viewer.json("leases", "expiring")] == [got.lease.id]
    assert len(viewer.json("leases", "expiring", "--within", "3d")) == 2
    one = viewer.json("leases", "expiring", got.lease.hosts[0], "--within", "3d")
    assert [x["id"] for x in one] == [got.lease.id]
    assert [t["name"] for t in admin.json("token", "list")] == ["ci-bot"]
    # the token list is the admin's: a viewer's token is refused by the server (exit 2)
    err = viewer.json("token", "list", code=2)["error"]
    assert err["code"] == "forbidden"
    # an option the API does not offer is refused, naming it, not ignored
    r = viewer.run("capacity", "check", "--gpus", "8", "--slurm", code=2)
    assert "capacity check --slurm is not available over GPUFLEET_URL" in " ".join(r.stderr.split())
    r = viewer.run("capacity", "--slurm", code=2)
    assert "capacity --slurm is not available over GPUFLEET_URL" in " ".join(r.stderr.split())
    # errors keep the one table: an unknown lease is exit 4, as locally
    assert viewer.json("leases", "show", "999", code=4)["error"]["code"] == "not_found"
