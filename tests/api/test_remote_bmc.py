"""Issue 25 item 2 / issue 29 item 7: ``bmc status|power|sel-ack``, ``baseline create
--from-host`` and ``campaign run|resume`` are rows of remote mode's table
(``gpufleet.cli.remote_table.READS``). On a lab with real BMCs (``lab create --bmc``:
sushy-tools), on SQLite and PostgreSQL, each prints over the API (a real ``gpufleet serve
--with-worker``) what the local CLI prints on the database: the same JSON and tables, the
same exit codes and messages for an unknown host, baseline, pool or campaign; what a route
cannot take is refused (exit 2, naming the option), never ignored. A campaign run is a job
on the server's workers: remote mode follows it and prints the campaign as it ended."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.cli.main import app
from gpufleet.lab.bmc import stop_bmc
from gpufleet.service.core.fleet import Fleet
from tests.api.conftest import TOKENS
from tests.api.test_remote_cli import local_cli, remote_cli, server  # noqa: F401  (fixture)
from tests.clitools import flat


@pytest.fixture
def lab_fleet(fleet: Fleet, tmp_path: Path) -> Iterator[Fleet]:
    """Three validated A100 lab hosts, each with a BMC of one sushy-tools emulator (the
    ``server`` fixture serves this fleet)."""
    lab = tmp_path / "lab"
    local = local_cli(fleet, tmp_path)
    try:
        local.run("lab", "create", "--hosts", "3", "--model", "a100-8x", "--bmc",
                  "--no-default-faults", "--dir", str(lab))  # fmt: skip
        local.run("enroll", "-i", str(lab / "inventory.ini"))
        local.run("collect")
        local.run("validate")
        yield fleet
    finally:
        stop_bmc(lab)


def _same(got: str, want: str, *pairs: tuple[str, str]) -> None:
    """``got`` (remote) is ``want`` (local) with each local name replaced by the remote's."""
    for local, remote in pairs:
        want = want.replace(local, remote)
    assert flat(got) == flat(want)


def test_bmc_rows_print_what_the_local_cli_prints(
    lab_fleet: Fleet, server: str, tmp_path: Path  # noqa: F811
) -> None:
    local = local_cli(lab_fleet, tmp_path)
    viewer = remote_cli(server, TOKENS["viewer"], tmp_path)
    operator = remote_cli(server, TOKENS["operator"], tmp_path)
    admin = remote_cli(server, TOKENS["admin"], tmp_path)
    local.run("bmc", "status")  # the event logs' entries are new once: read them first

    for argv in (["bmc", "status"], ["bmc", "status", "gpu-02", "--deadline", "30"],
                 ["bmc", "status", "gpu-01,gpu-02", "--timeout", "5"]):
        want = local.json(*argv)
        assert viewer.json(*argv) == want, argv
        assert viewer.run(*argv).stdout == local.run(*argv).stdout, argv
    hosts = viewer.json("bmc", "status")["hosts"]
    assert {(h["host"], h["outcome"], h["power_state"]) for h in hosts} == {
        ("gpu-01", "ok", "On"), ("gpu-02", "ok", "On"), ("gpu-03", "ok", "On")}
    r = viewer.run("bmc", "status", "--forks", "2", code=2)
    assert "bmc status --forks is not available over GPUFLEET_URL" in flat(r.stderr)
    for cli in (local, viewer):  # a selector that names no host: the local answer
        cli.run("bmc", "status", "nope", code=4)
    assert flat(viewer.run("bmc", "status", "nope", code=4).stderr) == flat(
        local.run("bmc", "status", "nope", code=4).stderr)

    # power: the same line (and JSON) for the same action on a twin host
    for action in ("off", "on"):
        got = admin.run("bmc", "power", action, "gpu-03", "--yes")
        want = local.run("bmc", "power", action, "gpu-02", "--yes")
        _same(got.stdout, want.stdout, ("gpu-02", "gpu-03"))
        assert f"gpu-03: power {action} done, power {action.capitalize()}" in flat(got.stdout)
    got_j = admin.json("bmc", "power", "on", "gpu-03", "--yes")
    want_j = local.json("bmc", "power", "on", "gpu-02", "--yes")
    assert got_j == want_j | {"host": "gpu-03"} and got_j["ok"] is True
    assert viewer.json("bmc", "status", "gpu-03")["hosts"][0]["power_state"] == "On"
    # the local checks and question come first: nothing is sent without --yes or a "y"
    r = admin.runner.invoke(app, ["bmc", "power", "off", "gpu-03"], input="n\n",
                            env=admin.env)
    assert r.exit_code == 1 and "Power off gpu-03?" in r.stdout
    assert viewer.json("bmc", "status", "gpu-03")["hosts"][0]["power_state"] == "On"
    for cli in (local, admin):
        r = cli.run("bmc", "power", "on", "gpu-03", "--yes", "--reason", "x", code=2)
        assert "--reason is only for --override-identity" in flat(r.stderr)
    # an unknown host: exit 4 and the local message; a viewer may not power a host
    got_e = admin.json("bmc", "power", "on", "gpu-99", "--yes", code=4)["error"]
    assert got_e == local.json("bmc", "power", "on", "gpu-99", "--yes", code=4)["error"]
    assert "gpu-99" in got_e["message"]
    viewer.run("bmc", "power", "on", "gpu-03", "--yes", code=2)

    # sel-ack: the same line; an unknown host is exit 4 with the local message
    got = operator.run("bmc", "sel-ack", "gpu-03", "--reason", "DIMM reseated")
    want = local.run("bmc", "sel-ack", "gpu-02", "--reason", "DIMM reseated")
    _same(got.stdout, want.stdout, ("gpu-02", "gpu-03"))
    assert flat(got.stdout) == "gpu-03: 0 bmc-sel alarm(s) closed"
    r = operator.run("bmc", "sel-ack", "gpu-99", "--reason", "x", code=4)
    assert flat(r.stderr) == flat(local.run("bmc", "sel-ack", "gpu-99", "--reason", "x",
                                            code=4).stderr)


def test_baseline_create_and_campaign_runs_print_what_the_local_cli_prints(
    lab_fleet: Fleet, server: str, tmp_path: Path  # noqa: F811
) -> None:
    local = local_cli(lab_fleet, tmp_path)
    admin = remote_cli(server, TOKENS["admin"], tmp_path)
    operator = remote_cli(server, TOKENS["operator"], tmp_path)

    # baseline create --from-host (POST baselines): the same lines, JSON and baseline
    create = ["baseline", "create", "NAME", "--from-host", "gpu-01", "--purpose", "training"]
    got = admin.run(*_named(create, "b-remote"), "--pool", "train-a100")
    want = local.run(*_named(create, "b-local"), "--pool", "train-a100")
    _same(got.stdout, want.stdout, ("b-local", "b-remote"))
    assert flat(got.stdout) == ("baseline b-remote saved (candidate), pools: train-a100 as "
                                "gpu-01 has it (no pin given differs)")
    got_j = admin.json(*_named(create, "j-remote"), "--pool", "p-new", "--create")
    want_j = local.json(*_named(create, "j-local"), "--pool", "p-new2", "--create")
    assert got_j == want_j | {"baseline": "j-remote", "pools": ["p-new"]}
    shown = [c.json("baseline", "show", n) for c, n in ((admin, "b-remote"), (local, "b-local"))]
    assert shown[0] == shown[1] | {"name": "b-remote"}
    assert {"name": "p-new", "baseline": "j-remote", "hosts": 0} in admin.json("pool", "list")
    # what the route cannot take is refused, naming it; nothing is saved
    for extra, flag in ((["--driver", "550.1"], "--driver"),
                        (["--status", "validated"], "--status"),
                        (["--os-image-url", "http://x/os.iso"], "--os-image-url")):
        r = admin.run(*_named(create, "b-no"), *extra, code=2)
        assert f"baseline create {flag} is not available over GPUFLEET_URL" in flat(r.stderr)
    r = admin.run("baseline", "create", "b-no", "--driver", "550.1", code=2)
    assert "baseline create without --from-host is not available" in flat(r.stderr)
    # an unknown pool (without --create), host or an existing baseline: the local errors
    for argv, code in (([*_named(create, "b-no"), "--pool", "train-a10O"], 4),
                       (["baseline", "create", "b-no", "--from-host", "gpu-99"], 4),
                       (_named(create, "b-local"), 2)):
        got_e = admin.json(*argv, code=code)["error"]
        assert got_e == local.json(*argv, code=code)["error"], argv
    admin.run("baseline", "show", "b-no", code=4)
    admin.run(*_named(create, "b-remote"), "--replace")  # --replace is sent

    # campaign run: a job on the server's workers, followed to its end; the same plan
    for name, host in (("c-local", "gpu-01"), ("c-remote", "gpu-02"),
                       ("r-local", "gpu-03"), ("r-remote", "gpu-03")):
        local.run("campaign", "create", name, "--target-baseline", "b-local", "--selector",
                  host, "--command", "echo ok > campaign-ran", "--ticket", "T-25",
                  "--waves", "100%")  # fmt: skip
    got = operator.run("campaign", "run", "c-remote", "--drain-timeout", "10m")
    want = local.run("campaign", "run", "c-local", "--drain-timeout", "10m")
    _same(got.stdout, want.stdout, ("c-local", "c-remote"), ("gpu-01", "gpu-02"))
    said = flat(got.stderr)  # the job, then the campaign's status changes (stderr)
    assert "campaign c-remote: queued on the server's workers (job " in said, said
    assert said.endswith("campaign c-remote: completed (done 1)"), said
    status = [c.json("campaign", "status", n)
              for c, n in ((operator, "c-remote"), (local, "c-local"))]
    assert status[0]["status"] == status[1]["status"] == "completed"
    assert (tmp_path / "lab" / "hosts" / "gpu-02" / "campaign-ran").read_text() == "ok\n"
    # resume of a planned campaign runs it; --json prints the campaign as it ended
    want_j = local.json("campaign", "resume", "r-local")
    r = operator.run("campaign", "resume", "r-remote", "--json")
    assert r.stderr == ""
    got_j = json.loads(r.stdout)
    assert got_j["status"] == want_j["status"] == "completed"
    assert got_j == operator.json("campaign", "status", "r-remote")
    assert _unnamed(got_j) == _unnamed(want_j)
    # a finished campaign, an unknown one: the local exit code and message
    for argv, code in ((["campaign", "run", "NAME"], 5), (["campaign", "resume", "NAME"], 5),
                       (["campaign", "run", "nope"], 4)):
        got_e = operator.json(*_named(argv, "c-remote"), code=code)["error"]
        want_e = local.json(*_named(argv, "c-local"), code=code)["error"]
        assert got_e["message"] == want_e["message"].replace("c-local", "c-remote"), argv
    r = operator.run("campaign", "run", "c-remote", "--advance-baseline", code=2)
    assert "campaign run --advance-baseline is not available over GPUFLEET_URL" in flat(
        r.stderr)


def _named(argv: list[str], name: str) -> list[str]:
    return [name if a == "NAME" else a for a in argv]


def _unnamed(campaign: dict[str, object]) -> dict[str, object]:
    """A campaign's JSON without its name."""
    return {k: v for k, v in campaign.items() if k != "name"}


def test_a_bmc_read_round_trips_through_the_api_schema() -> None:
    """Every field ``bmc status --json`` prints survives ``GET bmc`` and the row's view (the
    lab's emulator has no event log: its ``sel_source`` is null there)."""
    from gpufleet.api.schemas_health import BmcStatusOut
    from gpufleet.cli.remote_table import READS, viewer
    from gpufleet.service.hosts.bmc import BmcStatus

    read = BmcStatus(
        host="gpu-01", outcome="ok", power_state="On", health="OK",
        identity={"serial": "S1", "uuid": "U1"}, gpus=[{"id": "GPU0"}],
        sel_new=[{"id": "7", "severity": "Critical", "message": "DIMM"}],
        sel_source="System:1:Log1", ssh="ok", diagnosis=None, alarms=["bmc-sel"],
    )
    row = READS["bmc.status_cmd"]
    sent = json.loads(BmcStatusOut.of(read).model_dump_json())
    assert viewer(row.view)(row.schema.model_validate(sent)).as_json() == read.as_json()
