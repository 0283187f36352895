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
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import typer
from sqlalchemy import select

from gpufleet.api.app import PREFIX, create_app
from gpufleet.api.schemas import Schema
from gpufleet.cli.main import _REGISTER
from gpufleet.cli.remote_table import NOT_REMOTE, READS, Read
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
    info = app.registered_callback  # a group's own command (``capacity``)
    if info is not None and info.callback is not None:
        fn = inspect.unwrap(info.callback)
        out[f"{fn.__module__}.{fn.__qualname__}".removeprefix("gpufleet.cli.")] = fn
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
    wanted |= {p.partition("=")[2] or p for p in read.body} | set(read.times)
    wanted |= {r.partition("=")[2] for r in read.refuse} | set(read.view_args)
    out += [f"{key}: the command has no argument {a}" for a in sorted(wanted - args)]
    if not (isinstance(read.schema, type) and issubclass(read.schema, Schema)):
        out.append(f"{key}: {read.schema} is not an API schema")
    for hook in (read.prepare, read.follow, read.build):
        if hook is not None:
            m, _, f = hook.partition(":")
            if getattr(importlib.import_module(m), f, None) is None:
                out.append(f"{key}: no function {hook}")
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
    hooked = Read("campaigns/{name}/resume", Schema, "gpufleet.cli.campaign:show_finished",
                  method="POST", follow="gpufleet.cli.campaign:nope")
    assert _problems("campaign.resume_cmd", hooked, commands, routes) == [
        "campaign.resume_cmd: no function gpufleet.cli.campaign:nope"]


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


def _route_of(read: Read) -> str:
    return f"{read.method} {read.path}"


def test_every_api_route_is_served_in_remote_mode_or_named(fleet: Fleet) -> None:
    """Issue 29 item 7: every route the API publishes is a row of the table, a route of a
    route a row's ``follow`` calls, or named in NOT_REMOTE with why; none is two of those."""
    served = [_route_of(r) for r in READS.values()]
    served += [r for read in READS.values() for r in read.follows]
    published = {f"{m} {p}" for m, p in _routes(fleet)}

    def known(route: str, among: Iterable[str]) -> bool:
        method, _, path = route.partition(" ")
        return any(m == method and _same(p, path) for m, _, p in
                   (x.partition(" ") for x in among))

    missing = sorted(r for r in published if not known(r, served) and not known(r, NOT_REMOTE))
    assert missing == []
    stale = sorted(r for r in NOT_REMOTE if not known(r, published))
    assert stale == []
    both = sorted(r for r in NOT_REMOTE if known(r, served))
    assert both == []
    # every route has remote mode but the ones no command is (health, jobs, runs, failures)
    # and the token secret shown once where it is made
    assert sorted(NOT_REMOTE) == ["GET failures", "GET health", "GET jobs", "GET runs",
                                  "POST tokens"]
    assert len(published) - len(NOT_REMOTE) >= 54


def test_changes_and_campaigns_print_what_the_local_cli_prints(
    lab_fleet: Fleet, server: str, tmp_path: Path  # noqa: F811
) -> None:
    """The rows with a body (maintenance on/off, retire, unquarantine, alarms ack/resolve,
    failures record, token revoke) and the campaign rows print over the API what the local
    CLI prints: the same change on a twin host, the same reads on the same campaign."""
    from tests.api.test_api_campaigns import _campaign

    fleet, tmp = lab_fleet, tmp_path
    local = local_cli(fleet, tmp)
    admin = remote_cli(server, TOKENS["admin"], tmp)

    def same_change(*argv: str, code: int = 0) -> None:
        # the remote change on gpu-01 prints what the local one prints on gpu-04
        got = admin.run(*[a.replace("HOST", "gpu-01") for a in argv], code=code)
        want = local.run(*[a.replace("HOST", "gpu-04") for a in argv], code=code)
        assert got.stdout == want.stdout.replace("gpu-04", "gpu-01"), argv
        assert " ".join(got.stderr.split()) == " ".join(
            want.stderr.replace("gpu-04", "gpu-01").split()), argv

    same_change("maintenance", "on", "HOST", "--reason", "fan swap",
                "--until", "2030-01-01T00:00:00+00:00")
    same_change("maintenance", "on", "HOST", "--reason", "again", code=5)  # refused: no change
    same_change("maintenance", "off", "HOST")
    same_change("retire", "HOST", "--reason", "end of life")
    same_change("unquarantine", "HOST", "--reason", "fixed", code=5)  # retired: refused
    assert admin.json("hosts", "show", "gpu-01")["host"]["state"] == "retired"

    with fleet.db.session() as s:
        for name in ("gpu-02", "gpu-03"):
            host = s.scalar(select(Host).where(Host.name == name))
            assert host is not None
            raise_alarm(s, fleet, host, AlarmKind.DUPLICATE_HOST, AlarmSeverity.CRITICAL, "x")
    a, b = sorted(x.id for x in list_alarms(fleet))
    got = admin.run("alarms", "ack", str(a), "--reason", "looking")
    want = local.run("alarms", "ack", str(b), "--reason", "looking")
    # the same line but for the alarm and who acted (the token's name over the API)
    assert got.stdout.replace(str(a), "N").replace("api:admin-bot", "pytest") == (
        want.stdout.replace(str(b), "N"))
    got = admin.json("alarms", "resolve", str(a), "--reason", "done")
    want = local.json("alarms", "resolve", str(b), "--reason", "done")
    assert set(got) == set(want) and got["closed_at"] and want["closed_at"]
    assert got["reason"].replace("api:admin-bot", "pytest") == want["reason"]

    # a job failure, recorded and classified ("--time" local unless zoned: sent zoned)
    rec = ["failures", "record", "--host", "gpu-02", "--gpu", "3", "--time",
           "2026-01-01T00:00:00", "--message", "Xid 79: GPU has fallen off the bus"]
    got = admin.run(*rec, "--job", "j-remote")
    want = local.run(*rec, "--job", "j-local")
    assert got.stdout.replace("j-remote", "J") == want.stdout.replace("j-local", "J")
    got_j = admin.json(*rec, "--job", "j-remote-2")
    want_j = local.json(*rec, "--job", "j-local-2")
    assert got_j | {"job": "J"} == want_j | {"job": "J"}
    # where they concentrate: the same report (but the window's ends, each call's now)
    got_r, want_r = (cli.json("failures", "report", "--since", "3650d") for cli in (admin, local))
    assert got_r["hosts"] and {**got_r, "since": 0, "until": 0} == {**want_r, "since": 0,
                                                                   "until": 0}
    got = admin.run("failures", "report", "--since", "3650d")
    assert got.stdout == local.run("failures", "report", "--since", "3650d").stdout
    r = admin.run("failures", "report", "--quarantine", code=2)
    assert "failures report --quarantine is not available" in " ".join(r.stderr.split())

    _campaign(fleet, "c1")
    for argv in (["campaign", "list"], ["campaign", "status", "c1"],
                 ["campaign", "report", "c1"]):
        assert admin.json(*argv) == local.json(*argv), argv
        assert admin.run(*argv).stdout == local.run(*argv).stdout, argv
    assert admin.json("campaign", "status", "nope", code=4)["error"]["code"] == "not_found"
    assert admin.run("campaign", "pause", "c1").stdout == "campaign c1: paused\n"
    assert admin.json("campaign", "abort", "c1") == local.json("campaign", "status", "c1")

    create_token(fleet, "ci-1", Role.parse("viewer", "--role"), timedelta(days=30))
    create_token(fleet, "ci-2", Role.parse("viewer", "--role"), timedelta(days=30))
    got = admin.run("token", "revoke", "ci-1")
    assert got.stdout == local.run("token", "revoke", "ci-2").stdout.replace("ci-2", "ci-1")


def test_rack_and_part_reads_print_what_the_local_cli_prints(
    lab_fleet: Fleet, server: str, tmp_path: Path  # noqa: F811
) -> None:
    """Issue 29 item 7: ``racks list|show``, ``parts list|show`` and ``baseline show``
    (and the change ``pool baseline``) are rows of the table:
    over the API they print the local presenter's JSON and tables."""
    from gpufleet.inventory import load_inventory
    from gpufleet.lab.fleet import write_inventory
    from gpufleet.lab.racks import create_racks
    from gpufleet.service.hosts.baselines import baseline_from_host, save_baseline
    from gpufleet.service.hosts.collect import collect
    from gpufleet.service.hosts.enroll import enroll

    fleet, tmp = lab_fleet, tmp_path
    lab = tmp / "racks"
    racks_lab = create_racks("gb200-nvl72", 1, faults={"nvl01-t09": ["tray-missing"]})
    racks_lab.save(lab)
    write_inventory(racks_lab, lab / "inventory.ini", transport="sim", lab_dir=lab)
    enroll(fleet, load_inventory(lab / "inventory.ini"))
    collect(fleet, "nvl01*")
    save_baseline(fleet, baseline_from_host(fleet, "nvl01-t06", "gb200-base", "training"))
    local = local_cli(fleet, tmp)
    viewer = remote_cli(server, TOKENS["viewer"], tmp)
    racks = local.json("racks", "list")
    parts = local.json("parts", "list")
    baselines = local.json("baseline", "list")
    assert racks and parts and baselines
    for argv in (["baseline", "show", baselines[0]["name"]],
                 ["racks", "list"], ["racks", "show", racks[0]["rack"]],
                 ["parts", "list"], ["parts", "list", "--with-history"],
                 ["parts", "show", parts[0]["serial"]]):
        assert viewer.json(*argv) == local.json(*argv), argv
        assert viewer.run(*argv).stdout == local.run(*argv).stdout, argv
    assert viewer.json("racks", "show", "nope", code=4)["error"]["code"] == "not_found"
    assert viewer.json("parts", "show", "nope", code=4)["error"]["code"] == "not_found"
    assert viewer.json("baseline", "show", "nope", code=4)["error"]["code"] == "not_found"
    # what the inspections saw (the tables' title is each call's window start: not compared)
    local.run("inspect")
    for argv in (["inspect", "report", "--format", "csv"], ["inspect", "report", "--since", "1h"]):
        got, want = viewer.run(*argv).stdout, local.run(*argv).stdout
        assert got.split("\n", 2)[2:] == want.split("\n", 2)[2:] and "GB200" in got, argv
    viewer.run("inspect", "report", "--format", "pdf", code=2)
    # a pool pointed at the baseline over the API (PUT pools/{name}) prints the local line
    admin = remote_cli(server, TOKENS["admin"], tmp)
    got = admin.run("pool", "baseline", "p-remote", "gb200-base", "--create")
    want = local.run("pool", "baseline", "p-local", "gb200-base", "--create")
    assert got.stdout == want.stdout.replace("p-local", "p-remote")
    assert {"name": "p-remote", "baseline": "gb200-base", "hosts": 0} in admin.json("pool", "list")
    for cli in (admin, local):  # an unknown baseline: exit 4 in both modes
        cli.run("pool", "baseline", "p-remote", "nope", code=4)
