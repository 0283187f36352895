"""``gpufleet serve`` as a real process on 127.0.0.1 (a free port), on SQLite and PostgreSQL:
the API answers over HTTP with the tokens file, /metrics too, and SIGTERM stops it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from gpufleet.service.core.fleet import Fleet
from tests.api.conftest import auth

GPUFLEET = str(Path(sys.executable).parent / "gpufleet")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_serving(proc: subprocess.Popen[str], health_url: str, timeout: float = 60) -> None:
    """Poll ``health_url`` until it answers 200; fail with the server's output if it exits."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(health_url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "gpufleet serve did not start"
        time.sleep(0.2)


def test_gpufleet_serve_answers_over_http(
    lab_fleet: Fleet, tokens_file: Path, tmp_path: Path
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env |= {
        "GPUFLEET_API_TOKENS_FILE": str(tokens_file),
        "GPUFLEET_HOME": str(tmp_path / "h"),
        "GPUFLEET_ACTOR": "pytest",
    }
    proc = subprocess.Popen(
        [GPUFLEET, "--db", lab_fleet.db.url, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(proc, f"{base}/api/v1/health")
        r = httpx.get(f"{base}/api/v1/hosts", params={"limit": 2}, headers=auth("viewer"))
        assert r.status_code == 200
        assert [h["name"] for h in r.json()["items"]] == ["gpu-01", "gpu-02"]
        r = httpx.get(f"{base}/api/v1/hosts/gpu-09", headers=auth("viewer"))
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        r = httpx.post(
            f"{base}/api/v1/leases",
            headers=auth("viewer"),
            json={"gpus": 8, "owner": "a", "purpose": "b", "for": "1h"},
        )
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        assert httpx.get(f"{base}/api/v1/hosts").status_code == 401
        m = httpx.get(f"{base}/metrics").text
        assert 'gpufleet_hosts{pool="train-h100",state="available"} 6.0' in m
        # issue 24: background failures of the serving process, every component present
        for component in ("claim-renewal", "webhook-outbox", "worker", "scheduler"):
            assert f'gpufleet_background_errors_total{{component="{component}"}} 0.0' in m
        assert "gpufleet_webhook_dead_letters 0.0" in m
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    # uvicorn shuts down gracefully, then re-raises the signal it caught (exit by SIGTERM)
    assert proc.returncode in (0, -signal.SIGTERM), err
    assert f"http://127.0.0.1:{port}/api/v1" in err and "Traceback" not in err


def test_serve_refuses_a_bad_tokens_file_before_listening(lab_fleet: Fleet, tmp_path: Path) -> None:
    bad = tmp_path / "tokens.yaml"
    bad.write_text("plain-token: admin\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env |= {"GPUFLEET_API_TOKENS_FILE": str(bad), "GPUFLEET_HOME": str(tmp_path / "h")}
    r = subprocess.run(
        [GPUFLEET, "--db", lab_fleet.db.url, "serve", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: GPUFLEET_API_TOKENS_FILE") and "plain-token" not in r.stderr
