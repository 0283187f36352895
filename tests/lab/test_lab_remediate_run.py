"""Remediation is a run (issue 25 item 2), through the CLI on SQLite and PostgreSQL, on the lab
with ``--bmc`` (a real sushy-tools Redfish emulator): ``gpufleet remediate`` (remote) posts
to ``gpufleet serve --with-worker``, follows the run and prints what the local command
prints (a host whose sshd is down: the in-band reboot fails, the BMC power-cycles it, it
answers again); a remediation whose fallback is refused (the BMC's identity alarm is open)
is a failed run with the reason, exit 1 as locally; a request that cannot run is refused at
once with the local exit code and queues nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.api.conftest import TOKENS, auth, write_tokens
from tests.api.test_remote_cli import remote_cli
from tests.api.test_serve import free_port, wait_until_serving
from tests.clitools import Cli, cli_for_backend, flat

from gpufleet.lab.bmc import stop_bmc

GPUFLEET = str(Path(sys.executable).parent / "gpufleet")


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, "alice")
    try:
        yield c
    finally:
        stop_bmc(tmp_path / "lab")


def _serve(gf: Cli) -> subprocess.Popen[str]:
    """``gpufleet serve --with-worker`` on the test's database; its base URL in ``.args``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env |= {"GPUFLEET_API_TOKENS_FILE": str(write_tokens(gf.tmp / "tokens.yaml")),
            "GPUFLEET_ACTOR": "pytest", "TZ": "UTC"}
    if "--db" in gf.global_args:  # the job queue's schema
        subprocess.run([GPUFLEET, *gf.global_args, "db", "upgrade"], env=env, check=True,
                       capture_output=True)
    port = free_port()
    proc = subprocess.Popen(
        [GPUFLEET, *gf.global_args, "serve", "--port", str(port), "--with-worker"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    proc.base = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    wait_until_serving(proc, f"{proc.base}/api/v1/health")  # type: ignore[attr-defined]
    return proc


def _runs(base: str) -> list[dict[str, object]]:
    r = httpx.get(f"{base}/api/v1/runs", headers=auth("viewer"), timeout=30)
    assert r.status_code == 200, r.text
    out: list[dict[str, object]] = r.json()
    return out


def test_remote_remediate_is_a_run_that_prints_what_local_prints(gf: Cli) -> None:
    lab = gf.tmp / "lab"
    gf.run("lab", "create", "--hosts", "3", "--model", "a100-8x", "--bmc",
           "--no-default-faults", "--dir", str(lab))  # fmt: skip
    gf.run("enroll", "-i", str(lab / "inventory.ini"))
    gf.run("collect")
    gf.run("validate")
    for host in ("gpu-02", "gpu-03"):  # sshd down: only the BMC brings them back
        gf.run("lab", "change", host, "--add-fault", "sshd-down", "--dir", str(lab))
    server = _serve(gf)
    base: str = server.base  # type: ignore[attr-defined]
    try:
        admin = remote_cli(base, TOKENS["admin"], gf.tmp)
        # the same remediation, locally on gpu-03 and through a run on gpu-02
        want = gf.run("remediate", "gpu-03", "--action", "reboot")
        got = admin.run("remediate", "gpu-02", "--action", "reboot")
        assert got.stdout.replace("gpu-02", "gpu-03") == want.stdout
        text = flat(got.stdout)
        assert "gpu-02: reboot failed: unreachable" in text, text
        assert "power-cycle ok" in text and "gpu-02 is now validating" in text, text
        [run] = _runs(base)
        assert (run["kind"], run["state"], run["actor"]) == (
            "remediate", "succeeded", "api:admin-bot"), run
        assert f"run {run['id']}: remediation of gpu-02 queued" in flat(got.stderr)
        assert gf.state("gpu-02") == "validating"
        events = gf.json("events", "gpu-02", "--kind", "remediation")
        assert {e["actor"] for e in events} == {"api:admin-bot"}, events
        assert [e["data"]["action"] for e in events] == ["power-cycle", "reboot"], events

        # --json is the local report too (the remediation record ids differ)
        gf.run("collect", "gpu-02,gpu-03")
        local = gf.json("remediate", "gpu-03", "--action", "restart-service",
                        "--service", "kubelet")
        remote = admin.json("remediate", "gpu-02", "--action", "restart-service",
                            "--service", "kubelet")
        for rep in (local, remote):
            rep.pop("record_ids")
        assert json.dumps(remote).replace("gpu-02", "gpu-03") == json.dumps(local)

        # refused at once, as locally, and nothing queued
        queued = len(_runs(base))
        r = admin.json("remediate", "gpu-99", "--action", "reboot", code=4)
        assert r["error"]["code"] == "not_found"
        gf.run("remediate", "gpu-01", "--action", "restart-service", code=2)
        admin.run("remediate", "gpu-01", "--action", "restart-service", code=2)
        admin.run("remediate", "gpu-01", "--action", "reboot", "--timeout", "5", code=2)
        gf.run("bmc", "set", "gpu-02", "--uuid", "11111111-2222-3333-4444-555555555555")
        gf.run("bmc", "status", "gpu-02")  # the identity alarm opens
        r = admin.run("remediate", "gpu-02", "--action", "power-cycle", code=5)
        assert "bmc-identity" in flat(r.stdout + r.stderr)
        assert len(_runs(base)) == queued

        # a remediation that fails: the fallback is refused; a failed run with the reason
        gf.run("lab", "change", "gpu-02", "--add-fault", "sshd-down", "--dir", str(lab))
        r = admin.run("remediate", "gpu-02", "--action", "reboot", "--reboot-wait", "900",
                      code=1)
        text = flat(r.stdout)
        assert "gpu-02: reboot failed: unreachable" in text, text
        assert "gpu-02: power-cycle refused" in text and "bmc-identity" in text, text
        run = _runs(base)[0]
        assert run["state"] == "failed", run
        assert "gpu-02: power-cycle refused" in str(run["error"]), run
        hosts = httpx.get(f"{base}/api/v1/runs/{run['id']}/hosts", headers=auth("viewer"),
                          timeout=30).json()
        assert [(h["host"], h["outcome"]) for h in hosts] == [("gpu-02", "refused")], hosts
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=60)
