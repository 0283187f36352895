"""Probes of issue 24 item 11 (faults it survives, inputs it refuses), on the probe harness:
a BMC that trickles its answer or sends 300 MB, a ``collect`` killed with SIGKILL, a collect
that skips a held host, the API's body limit, out-of-range values and a 5,000-term selector.
Each asserts the message, the exit code or HTTP status, and that nothing is lost
(:func:`tests.probe.harness.check_invariants` / :func:`check_store`, no host left claimed).

Fail on main 84be469: every probe here (main has no ``--deadline``, and its read of the
trickling BMC lasts as long as the BMC trickles; the killed collect's claims hold the hosts
and the next collect skips them; a skip exits 0; the API reads a body before the token and
answers plain-text 500s and a 503 ``store`` error)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet

from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.bmc import bmc_history, set_bmc
from tests.api.conftest import TOKENS, write_tokens
from tests.api.test_api_limits import _post, _send
from tests.api.test_serve import free_port, wait_until_serving
from tests.bmc.conftest import BMC_PASSWORD, BMC_USER
from tests.bmc.redfishlab import TOWER, Emulator, start_static
from tests.bmc.slowbmc import misbehaving_bmc
from tests.probe.harness import (
    Ctx,
    Probe,
    World,
    base_env,
    check_invariants,
    check_store,
    claimed,
    gpufleet_cmd,
    run_probe,
    store_image,
)
from tests.probe.test_probe_catalogue import claim_elsewhere, release, ssh_hosts, world

__all__ = ["ssh_hosts", "world"]  # the catalogue's fixtures, used here too

ITEM = "24.11"


def _ctx(world: World, tmp_path: Path, ssh: object) -> Ctx:
    return Ctx(world, tmp_path, base_env(world.root / "os-home"), list(world.global_args),
               sshlab=ssh)


def _fleet(world: World) -> Fleet:
    return Fleet.open(home=world.home, url=world.url, actor="probe-setup")


# ------------------------------------------------------------------------------------- BMC


@pytest.fixture(scope="module")
def tower(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    em = start_static(TOWER, tmp_path_factory.mktemp("probe-tower"))
    yield em
    em.stop()


@pytest.mark.parametrize("world", ["sqlite"], indirect=True)
def test_probe_bmc_trickle_and_huge_body(
    world: World, ssh_hosts: object, tower: Emulator, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx = _ctx(world, tmp_path, ssh_hosts)
    key = Fernet.generate_key().decode()
    ctx.env["GPUFLEET_SECRET_KEY"] = key
    monkeypatch.setenv("GPUFLEET_SECRET_KEY", key)
    probe = Probe(
        "bmc-trickle", ITEM, "faults it survives",
        ("bmc", "status", "gpu-01,gpu-02,gpu-03", "--timeout", "2", "--deadline", "3"),
        1, r"gpu-02 │ timeout .*no complete answer within 3 s.*gpu-03 │ bad response",
    )
    with misbehaving_bmc("trickle") as slow, misbehaving_bmc("huge") as huge:
        fleet = _fleet(world)
        try:
            for host, url in (("gpu-01", tower.url), ("gpu-02", slow), ("gpu-03", huge)):
                set_bmc(fleet, host, address=url, username=BMC_USER, password=BMC_PASSWORD)
        finally:
            fleet.db.dispose()
        before = store_image(world)
        t0 = time.monotonic()
        r = run_probe(probe, ctx)
        took = time.monotonic() - t0
    check_invariants(probe, ctx, r, before)
    assert took < 3 + 15, f"bmc status took {took:.1f} s"  # CLI start-up on a loaded machine
    assert "gpu-01 │ ok │ On" in " ".join(r.stdout.split())
    assert "over the cap of 16777216 bytes" in " ".join(r.stdout.split())
    fleet = _fleet(world)
    try:
        kept = {h: bmc_history(fleet, h)[0]["outcome"] for h in ("gpu-01", "gpu-02", "gpu-03")}
    finally:
        fleet.db.dispose()
    assert kept == {"gpu-01": "ok", "gpu-02": "timeout", "gpu-03": "bad response"}
    assert BMC_PASSWORD not in r.output


# ---------------------------------------------------------------------------------- claims


@pytest.mark.parametrize("world", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
def test_probe_collect_killed_with_sigkill_is_taken_over(
    world: World, ssh_hosts: object, tmp_path: Path
) -> None:
    ctx = _ctx(world, tmp_path, ssh_hosts)
    hosts = "ssh-hang-1,ssh-hang-2"
    first = subprocess.Popen(
        gpufleet_cmd(ctx.global_args, ["collect", hosts, "--timeout", "120"]),
        env=ctx.env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while len(claimed(world)) < 2:
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first collect never claimed the hosts"
            time.sleep(0.1)
        time.sleep(0.5)
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert set(claimed(world)) == {"ssh-hang-1", "ssh-hang-2"}  # SIGKILL cleans nothing
    probe = Probe("collect-after-kill-9", ITEM, "faults it survives",
                  ("collect", hosts, "--timeout", "3"), 1, r"ssh-hang-1 .*timeout")
    before = store_image(world)
    t0 = time.monotonic()
    r = run_probe(probe, ctx)
    assert time.monotonic() - t0 < 60
    check_invariants(probe, ctx, r, before)  # no host left claimed
    assert "skipped" not in r.output


@pytest.mark.parametrize("world", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
def test_probe_collect_that_skips_a_held_host_exits_1(
    world: World, ssh_hosts: object, tmp_path: Path
) -> None:
    ctx = _ctx(world, tmp_path, ssh_hosts)
    probe = Probe("collect-skips-held", ITEM, "inputs it refuses", ("collect", "gpu-04,gpu-05"),
                  1, r"1 hosts skipped: being collected by another worker: gpu-05")
    try:
        claim_elsewhere("gpu-05")(ctx)
        before = store_image(world)
        r = run_probe(probe, ctx)
        check_invariants(probe, ctx, r, before)
    finally:
        release(ctx)


# ------------------------------------------------------------------------------------- API


@pytest.fixture
def server(world: World, tmp_path: Path) -> Iterator[tuple[str, int]]:
    port = free_port()
    env = base_env(world.root / "os-home")
    env["GPUFLEET_API_TOKENS_FILE"] = str(write_tokens(tmp_path / "tokens.yaml"))
    proc = subprocess.Popen(gpufleet_cmd(world.global_args, ["serve", "--port", str(port)]),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_serving(proc, f"http://127.0.0.1:{port}/api/v1/health")
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _json_error(r: httpx.Response, status: int, says: str) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json"), r.text
    err = r.json()["error"]
    assert set(err) == {"code", "message", "retryable"}
    assert says in err["message"], err


@pytest.mark.parametrize("world", ["sqlite"], indirect=True)
def test_probe_api_body_limits_and_out_of_range_values(
    world: World, server: tuple[str, int]
) -> None:
    base, pid = server
    port = int(base.rsplit(":", 1)[1])
    before = store_image(world)
    rss = _rss_mib(pid)
    for _ in range(4):  # 4 x 200 MB without a token
        status, answer, took = _send(port, _post("/api/v1/leases", 200_000_000, None), 32 << 20)
        assert status == 401 and answer["error"]["code"] == "unauthorized"  # type: ignore[index]
        assert took < 8
    assert _rss_mib(pid) - rss < 60
    status, answer, _ = _send(port, _post("/api/v1/retire", 200_000_000, TOKENS["admin"]),
                              8 << 20)
    assert status == 413 and "over the limit of 1048576 bytes" in json.dumps(answer)
    admin = {"Authorization": f"Bearer {TOKENS['admin']}"}
    lease = {"gpus": 8, "owner": "probe", "purpose": "probe"}
    _json_error(httpx.post(f"{base}/api/v1/leases", headers=admin,
                           json={**lease, "for": "99999999999d"}), 422, "too long")
    _json_error(httpx.get(f"{base}/api/v1/capacity", headers=admin,
                          params={"at": "9999-12-31T23:59:59"}), 422, "out of range")
    r = httpx.get(f"{base}/api/v1/events", headers=admin, params={"since": "9999-12-31"})
    assert r.status_code == 200 and r.json() == []
    sel = ",".join(f"gpu-{i:05d}" for i in range(5000))
    _json_error(httpx.get(f"{base}/api/v1/hosts", headers=admin, params={"selector": sel}),
                422, "selector has 5000 terms, at most 500")
    _json_error(httpx.post(f"{base}/api/v1/retire", headers=admin,
                           json={"selector": sel, "reason": "probe"}),
                422, "selector has 5000 terms, at most 500")
    check_store(world, before, set())
    assert claimed(world) == {}
    states = {h["name"]: h["state"] for h in httpx.get(
        f"{base}/api/v1/hosts", headers=admin, params={"selector": "gpu-*"}).json()["items"]}
    assert set(states.values()) == {"available"}  # nothing retired, nothing leased
