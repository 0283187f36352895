"""Remote mode (issue 12): with ``GPUFLEET_URL`` + ``GPUFLEET_TOKEN`` the CLI talks to a real
``gpufleet serve`` process (a free loopback port) instead of the database, on SQLite and
PostgreSQL: it prints what the local CLI prints against the same database, mutations are
recorded under the token's name, errors keep the one exit-code table, a command without a
remote implementation refuses, and the token never shows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.service.core.fleet import Fleet
from tests.api.conftest import TOKENS
from tests.api.test_serve import free_port, wait_until_serving
from tests.clitools import Cli

GPUFLEET = str(Path(sys.executable).parent / "gpufleet")


@pytest.fixture
def server(lab_fleet: Fleet, tokens_file: Path, tmp_path: Path) -> Iterator[str]:
    """``gpufleet serve --with-worker`` on the lab fleet; its base URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env |= {
        "GPUFLEET_API_TOKENS_FILE": str(tokens_file),
        "GPUFLEET_HOME": str(tmp_path / "server-home"),
        "GPUFLEET_ACTOR": "pytest",
    }
    if lab_fleet.db.url.startswith("postgresql"):  # the job queue's schema
        up = [GPUFLEET, "--db", lab_fleet.db.url, "db", "upgrade"]
        subprocess.run(up, env=env, check=True, capture_output=True)
    proc = subprocess.Popen(
        [GPUFLEET, "--db", lab_fleet.db.url, "serve", "--port", str(port), "--with-worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(proc, f"{base}/api/v1/health")
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def local_cli(fleet: Fleet, tmp_path: Path) -> Cli:
    """The CLI on the database itself."""
    env: dict[str, str | None] = {
        "GPUFLEET_ACTOR": "pytest",
        "GPUFLEET_DATABASE_URL": None,
        "GPUFLEET_HOME": None,
        "GPUFLEET_URL": None,
        "GPUFLEET_TOKEN": None,
    }
    return Cli(["--home", str(tmp_path / "local-home"), "--db", fleet.db.url], tmp_path, env)


def remote_cli(url: str, token: str | None, tmp_path: Path) -> Cli:
    """The CLI of someone without database access: only the server's URL and a token."""
    env: dict[str, str | None] = {
        "GPUFLEET_URL": url,
        "GPUFLEET_TOKEN": token,
        "GPUFLEET_ACTOR": "someone",
        "GPUFLEET_DATABASE_URL": None,
        "GPUFLEET_HOME": str(tmp_path / "remote-home-never-used"),
    }
    return Cli([], tmp_path, env)


def test_remote_reads_print_what_the_local_cli_prints(
    lab_fleet: Fleet, server: str, tmp_path: Path
) -> None:
    local = local_cli(lab_fleet, tmp_path)
    remote = remote_cli(server, TOKENS["viewer"], tmp_path)
    for argv in (
        ["hosts", "list"],
        ["hosts", "list", "gpu-01,gpu-05"],
        ["hosts", "list", "--state", "available", "--pool", "train-h100"],
        ["summary"],
        ["labels", "gpu-01"],
        ["capacity", "--at", "2030-01-01T00:00:00+00:00"],
        ["capacity", "check", "--gpus", "16"],
        ["leases", "list"],
        ["alarms", "list"],
        ["drift"],
        ["baseline", "list"],
        ["pool", "list"],
        ["events", "gpu-01", "--limit", "5"],
    ):
        want = local.json(*argv)
        got = remote.json(*argv)
        assert got == want, argv
        # the same text too (keys in the same order), and the human tables are the local
        # renderers'
        assert remote.run(*argv, "--json").stdout == local.run(*argv, "--json").stdout, argv
        assert remote.run(*argv).stdout == local.run(*argv).stdout, argv
    assert len(remote.json("hosts", "list")) == 6
    # not enough GPUs: the CI gate exits 1 remotely as well, with the same answer
    want = local.json("capacity", "check", "--gpus", "4096", code=1)
    assert remote.json("capacity", "check", "--gpus", "4096", code=1) == want
    assert not want["ok"]
    # an unknown host: exit 4, the server's error shape
    err = remote.json("hosts", "show", "gpu-99", code=4)["error"]
    assert err["code"] == "not_found" and "gpu-99" in err["message"]
    shown = remote.json("hosts", "show", "gpu-01")
    assert shown == local.json("hosts", "show", "gpu-01")
    show = ["hosts", "show", "gpu-01", "--json"]
    assert remote.run(*show).stdout == local.run(*show).stdout
    assert (
        remote.run("hosts", "show", "gpu-01").stdout == local.run("hosts", "show", "gpu-01").stdout
    )
    # a viewer's token reads; the database was never opened on this side
    assert not (tmp_path / "remote-home-never-used").exists()


def test_remote_allocation_round_trip_is_recorded_under_the_token(
    lab_fleet: Fleet, server: str, tmp_path: Path
) -> None:
    local = local_cli(lab_fleet, tmp_path)
    operator = remote_cli(server, TOKENS["operator"], tmp_path)
    got = operator.json(
        "allocate", "--gpus", "16", "--owner", "team-a", "--purpose", "remote test", "--for", "2h"
    )
    assert got["granted"] is True
    lease = got["lease"]
    assert lease["gpus"] == 16 and len(lease["hosts"]) == 2 and lease["owner"] == "team-a"
    assert lease["actor"] == "api:operator-bot"
    assert operator.json("leases", "list") == local.json("leases", "list")
    assert operator.json("leases", "show", str(lease["id"])) == local.json(
        "leases", "show", str(lease["id"])
    )
    for host in lease["hosts"]:
        assert local.state(host) == "allocated"
    renewed = operator.json("leases", "renew", str(lease["id"]), "--for", "3h")
    assert renewed["ends_at"] > lease["ends_at"]
    released = operator.json("leases", "release", str(lease["id"]), "--reason", "done")
    assert released["lease"]["state"] == "released"
    assert sorted(released["reclaiming"]) == sorted(lease["hosts"])
    # the audit log names the token, whichever side reads it
    events = local.json("events", lease["hosts"][0], "--limit", "20")
    actors = {e["actor"] for e in events if e["kind"] == "transition"}
    assert "api:operator-bot" in actors
    assert operator.json("events", lease["hosts"][0], "--limit", "20") == events
    # a refusal is exit 1 with the same shape as locally
    refused = operator.json(
        "allocate", "--gpus", "800", "--owner", "t", "--purpose", "p", "--for", "1h", code=1
    )
    assert refused["granted"] is False and refused["reason"]
    # human output of a grant
    r = operator.run("allocate", "--hosts", "1", "--owner", "t", "--purpose", "p", "--for", "1h")
    assert "granted to t" in r.stdout


def test_remote_errors_use_the_exit_code_table_and_never_show_the_token(
    lab_fleet: Fleet, server: str, tmp_path: Path
) -> None:
    viewer = remote_cli(server, TOKENS["viewer"], tmp_path)
    args = ["allocate", "--gpus", "8", "--owner", "a", "--purpose", "b", "--for", "1h"]
    err = viewer.json(*args, code=2)["error"]
    assert err["code"] == "forbidden" and "viewer-bot" in err["message"]
    r = viewer.run(*args, code=2)
    assert "may not" in r.stderr and "GPUFLEET_TOKEN" in r.stderr
    assert TOKENS["viewer"] not in r.stdout + r.stderr
    for token in (None, "gft_this-secret-must-never-be-printed"):
        cli = remote_cli(server, token, tmp_path)
        err = cli.json("hosts", "list", code=2)["error"]
        assert err["code"] == "unauthorized" and not err["retryable"]
        r = cli.run("--debug", "hosts", "list", code=2)
        assert "not authenticated" in r.stderr
        if token is not None:
            assert token not in r.stdout + r.stderr
            assert "must-never" not in r.stdout + r.stderr
    # a command without a remote implementation refuses, naming it; nothing opened locally
    operator = remote_cli(server, TOKENS["operator"], tmp_path)
    r = operator.run("hosts", "remove", "gpu-01", "--yes", code=2)
    assert "gpufleet hosts remove is not available over GPUFLEET_URL" in " ".join(r.stderr.split())
    err = operator.json("racks", "incidents", code=2)["error"]
    assert err["code"] == "config" and "gpufleet racks incidents" in err["message"]
    assert operator.json("campaign", "list") == []  # served since issue 29 item 7
    # token list is served (issue 29), to an admin only: the server refuses an operator
    assert operator.json("token", "list", code=2)["error"]["code"] == "forbidden"
    # an option the API does not offer is refused, not ignored
    r = operator.run("collect", "gpu-01", "--local", code=2)
    assert "--local is not available over GPUFLEET_URL" in " ".join(r.stderr.split())
    local = local_cli(lab_fleet, tmp_path)
    assert [h["name"] for h in local.json("hosts", "list")] == [f"gpu-0{i}" for i in range(1, 7)]
    assert not (tmp_path / "remote-home-never-used").exists()
    # alarms, failures through the API; a refused line names the file and line
    rec = operator.json(
        "failures",
        "record",
        "--job",
        "j1",
        "--host",
        "gpu-02",
        "--time",
        "2026-01-05T10:00:00+00:00",
        "--message",
        "CUDA error: uncorrectable ECC error encountered",
    )
    assert rec["host"] == "gpu-02" and rec["job"] == "j1" and rec["category"]
    f = tmp_path / "failures.jsonl"
    good = {"job": "j2", "host": "gpu-03", "time": "2026-01-05T11:00:00+00:00", "message": "x"}
    f.write_text(json.dumps(good) + "\n" + json.dumps({"job": "j3"}) + "\n")
    rep = operator.json("failures", "import", str(f), code=1)
    assert rep["recorded"] == 1 and rep["errors"][0].startswith(f"{f}:2:")
    assert operator.json("alarms", "list") == local.json("alarms", "list")


def test_remote_collect_and_validate_run_on_the_server(
    lab_fleet: Fleet, server: str, tmp_path: Path
) -> None:
    operator = remote_cli(server, TOKENS["operator"], tmp_path)
    run = operator.json("collect", "gpu-01,gpu-02")
    assert run["kind"] == "collect" and run["state"] == "succeeded"
    assert run["hosts"] == 2 and run["counts"] == {"ok": 2}
    assert run["actor"] == "api:operator-bot"
    run = operator.json("validate", "gpu-03")
    assert run["state"] == "succeeded" and run["verdicts"] == {"available": 1}
    r = operator.run("validate", "gpu-04")
    assert "available" in r.stdout and "succeeded" in r.stdout
    viewer = remote_cli(server, TOKENS["viewer"], tmp_path)
    assert viewer.json("collect", code=2)["error"]["code"] == "forbidden"
    # an inspection sweep is a run on the server's workers, followed to its end
    sweep = operator.json("inspect", "gpu-05,gpu-06")
    assert sweep["kind"] == "inspect" and sweep["state"] == "succeeded", sweep
    assert sweep["hosts"] == 2 and sweep["counts"] == {"ok": 2}
    out = operator.run("inspect", "gpu-05").stdout
    assert "gpu-05" in out and "succeeded" in out  # the run and each host by name
    out = operator.run("collect", "gpu-01").stdout
    assert "gpu-01" in out and "ok" in out
    # an active test too (POST /evidence queues it), each host's result named
    r = operator.run("evidence", "run", "gpu-05", "--kind", "dcgm")
    assert "gpu-05" in r.stdout and "passed" in r.stdout
    r = operator.run("inspect", "gpu-05", "--every", "1m", code=2)
    assert "--every is not available over GPUFLEET_URL" in " ".join(r.stderr.split())


def test_server_down_is_unavailable_and_retryable(tmp_path: Path) -> None:
    cli = remote_cli(f"http://127.0.0.1:{free_port()}", TOKENS["viewer"], tmp_path)
    err = cli.json("summary", code=2)["error"]
    assert err["code"] == "server_unavailable" and err["retryable"] is True
    r = cli.run("hosts", "list", code=2)
    assert "gpufleet server http://127.0.0.1:" in r.stderr
    assert TOKENS["viewer"] not in r.stdout + r.stderr


def test_a_bad_url_is_a_setting_error(tmp_path: Path) -> None:
    for url in ("ftp://fleet", "fleet:8080", "http://user:pw@fleet"):
        cli = remote_cli(url, TOKENS["viewer"], tmp_path)
        r = cli.run("hosts", "list", code=2)
        assert "GPUFLEET_URL" in r.stderr and "pw" not in r.stderr


def test_allocate_and_failures_import_print_what_the_local_cli_prints(
    lab_fleet: Fleet, server: str, tmp_path: Path
) -> None:
    """Issue 25 item 2: ``allocate`` (a POST row whose body is the command's arguments,
    times sent zoned) and ``failures import`` (a body built from a file) are rows of the
    table: over the API they print what the local CLI prints, grant, refusal and import."""
    local = local_cli(lab_fleet, tmp_path)
    operator = remote_cli(server, TOKENS["operator"], tmp_path)
    ask = ["allocate", "--hosts", "1", "--owner", "team-a", "--purpose", "remote test",
           "--start", "2030-01-01T00:00:00", "--until", "2030-01-02T00:00:00+00:00",
           "--user", "alice", "--user", "bob"]

    def same_lease(got: dict[str, Any], want: dict[str, Any]) -> None:
        # another lease of the same request: but its id, host, GPUs and who made it when
        mine = ("id", "hosts", "gpu_uuids", "actor", "created_at")
        assert got["granted"] is want["granted"] is True
        assert {k: v for k, v in got["lease"].items() if k not in mine} == {
            k: v for k, v in want["lease"].items() if k not in mine}
        assert got["lease"]["actor"] == "api:operator-bot" and got["warnings"] == want["warnings"]

    got, want = operator.json(*ask), local.json(*ask)
    same_lease(got, want)
    assert got["lease"]["users"] == ["alice", "bob"] and got["lease"]["state"] == "reserved"
    assert got["lease"]["starts_at"] == want["lease"]["starts_at"]  # local time, sent zoned
    r, w = operator.run(*ask), local.run(*ask)
    lines = [x.stdout for x in (r, w)]
    for x in (operator.json("leases", "list"), local.json("leases", "list")):
        for lease in x:
            for i, out in enumerate(lines):
                lines[i] = out.replace(f"lease {lease['id']} ", "lease N ").replace(
                    ", ".join(lease["hosts"]), "HOST")
    assert lines[0] == lines[1] and "lease N reserved to team-a: HOST (8 GPUs)" in lines[0]
    assert r.stderr == w.stderr
    # a refusal: exit 1, the same answer and the same words
    no = ["allocate", "--gpus", "800", "--owner", "t", "--purpose", "p", "--for", "1h"]
    assert operator.json(*no, code=1) == local.json(*no, code=1)
    r, w = operator.run(*no, code=1), local.run(*no, code=1)
    assert (r.stdout, r.stderr) == (w.stdout, w.stderr) and "refused" in r.stderr

    # failures import: good lines stored, a bad one named FILE:LINE in both modes
    for name, lines_ in (
        ("f.jsonl", [{"job": "JOB-1", "host": "gpu-03", "time": "2026-01-05T11:00:00+00:00",
                      "message": "Xid 79"}, {"job": "JOB-2"}]),
        ("f.ndjson", [{"job": "JOB-3", "host": "gpu-99", "time": "2026-01-05T11:00:00+00:00",
                       "message": "x"}]),
    ):
        for side in ("side-r", "side-l"):
            text = "\n".join(json.dumps(x) for x in lines_).replace("JOB", side) + "\nnot json\n"
            (tmp_path / side).mkdir(exist_ok=True)
            (tmp_path / side / name).write_text(text)
        f = str(tmp_path / "side-r" / name)
        g = str(tmp_path / "side-l" / name)
        got_i = operator.json("failures", "import", f, code=1)
        want_i = local.json("failures", "import", g, code=1)
        assert got_i["errors"] and [e.replace(f, "F") for e in got_i["errors"]] == [
            e.replace(g, "F") for e in want_i["errors"]], name
        assert got_i["recorded"] == want_i["recorded"]
        r = operator.run("failures", "import", f.replace(name, f"again-{name}"), code=2)
        assert f"again-{name}" in "".join(r.stderr.split())  # unreadable: named, not sent
    csv_text = "job,host,time,message\nc-1,gpu-04,2026-01-05T11:00:00+00:00,Xid 48\nc-2\n"
    for side in ("side-r", "side-l"):
        (tmp_path / side / "f.csv").write_text(csv_text.replace("c-", f"{side}-"))
    r = operator.run("failures", "import", str(tmp_path / "side-r" / "f.csv"), code=1)
    w = local.run("failures", "import", str(tmp_path / "side-l" / "f.csv"), code=1)
    assert r.stdout == w.stdout == "1 failures recorded\n"
    # the same words but the file's directory (a long path: the terminal wraps the line)
    assert "".join(r.stderr.split()).replace("side-r", "side-X") == "".join(
        w.stderr.split()).replace("side-l", "side-X")
    assert "f.csv:3:message:empty" in "".join(r.stderr.split())
    r = operator.run("failures", "import", code=2)
    assert "give a FILE or --slurm" in r.stderr


def test_a_server_refusal_reads_in_chinese_and_its_json_does_not(
    server: str, tmp_path: Path
) -> None:
    """Issue 29 item 8: the server's English refusal is shown in the operator's language;
    ``--json`` and the exit code are the English ones."""
    from gpufleet import i18n

    args = ["allocate", "--gpus", "8", "--owner", "a", "--purpose", "b", "--for", "1h"]
    viewer = remote_cli(server, TOKENS["viewer"], tmp_path)
    en, en_json = viewer.run(*args, code=2), viewer.json(*args, code=2)
    viewer.env["GPUFLEET_LANG"] = "zh_CN"
    i18n.reset("zh_CN")
    try:
        zh, zh_json = viewer.run(*args, code=2), viewer.json(*args, code=2)
    finally:
        i18n.reset()
    assert zh_json == en_json and en_json["error"]["code"] == "forbidden"
    assert "may not" in en.stderr and "may not" not in zh.stderr
    assert "无权执行" in zh.stderr and "请检查 GPUFLEET_TOKEN" in zh.stderr, zh.stderr
    assert TOKENS["viewer"] not in zh.stdout + zh.stderr
