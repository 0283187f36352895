"""Real Redfish emulators from ``sushy-tools`` on loopback, for the BMC tests and the bench.

* :func:`start_static` runs ``sushy-static`` over a mockup tree (the DMTF public-tower copy in
  ``tests/fixtures/redfish``): GETs answer the mockup, POST/PATCH change nothing.
* :func:`start_dynamic` runs ``sushy-emulator --fake`` (through ``launch_emulator.py``, with a
  one-second power delay) with N fake systems, HTTP basic auth from an htpasswd (bcrypt) file
  and the ``full`` feature set (virtual media, boot override, power actions change state).
* :func:`serve_files` serves a directory over HTTP (the OS image the virtual media fetches).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import bcrypt

HERE = Path(__file__).resolve().parent
TOWER = HERE.parent / "fixtures" / "redfish" / "dmtf_public-tower"
BIN = Path(sys.executable).parent


#: Every port :func:`free_port` handed out in this process: never handed out twice.
_ISSUED: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on now, never one this process handed out before.

    The kernel may give the same free port to two ``bind(0)`` calls in a row once the first
    socket is closed, and the tests use these ports both for emulators and for SSH ports where
    nothing listens (an inventory with two hosts on one address and port is refused at enroll
    as two names for one machine), so each port is handed out once per process."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _ISSUED:
            _ISSUED.add(port)
            return port


@dataclass
class Emulator:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _wait(url: str, proc: subprocess.Popen[bytes], log: Path, auth: tuple[str, str] | None,
          timeout_s: float = 60.0, cafile: Path | None = None) -> None:
    import ssl

    ctx = ssl.create_default_context(cafile=str(cafile)) if cafile else None
    deadline = time.monotonic() + timeout_s
    req = urllib.request.Request(url + "/redfish/v1/")
    if auth:
        import base64

        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req.add_header("Authorization", "Basic " + token)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"emulator exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(req, timeout=2, context=ctx) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.1)
    raise RuntimeError(f"emulator at {url} not ready: {log.read_text()[-2000:]}")


def start_static(mockup: Path, workdir: Path, tls: tuple[Path, Path] | None = None) -> Emulator:
    """``tls``: (certificate, key) to serve HTTPS with (``--ssl-certificate/--ssl-key``)."""
    port = free_port()
    log = workdir / f"static-{port}.log"
    extra = ["-c", str(tls[0]), "-k", str(tls[1])] if tls else []
    proc = subprocess.Popen(
        [str(BIN / "sushy-static"), "-i", "127.0.0.1", "-p", str(port), "-m", str(mockup),
         *extra],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )
    em = Emulator(f"{'https' if tls else 'http'}://127.0.0.1:{port}", proc, log)
    _wait(em.url, proc, log, None, cafile=tls[0] if tls else None)
    return em


def system_uuid(i: int) -> str:
    return f"00000000-0000-0000-0000-{i:012d}"


def start_dynamic(workdir: Path, systems: int, username: str, password: str) -> Emulator:
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    htpasswd = workdir / "htpasswd"
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    htpasswd.write_text(f"{username}:{digest}\n")
    fake = [
        {"uuid": system_uuid(i), "name": f"gpu-sys-{i:03d}", "power_state": "On",
         "external_notifier": False,
         "nics": [{"mac": f"02:00:00:00:{i // 256:02x}:{i % 256:02x}", "ip": "127.0.0.1"}]}
        for i in range(1, systems + 1)
    ]
    conf = workdir / "emulator.conf"
    conf.write_text(
        f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
        f"SUSHY_EMULATOR_LISTEN_PORT = {port}\n"
        f"SUSHY_EMULATOR_FAKE_DRIVER = True\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(workdir / 'state')!r}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}\n"
        f"SUSHY_EMULATOR_FEATURE_SET = 'full'\n"
        f"SUSHY_EMULATOR_FAKE_SYSTEMS = {fake!r}\n"
    )
    log = workdir / "emulator.log"
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "launch_emulator.py"), str(conf)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env={**os.environ},
    )
    em = Emulator(f"http://127.0.0.1:{port}", proc, log)
    _wait(em.url, proc, log, (username, password))
    return em


def get_json(url: str, auth: tuple[str, str]) -> dict[str, object]:
    """GET a Redfish resource straight from the emulator (to check its state changed)."""
    import base64

    req = urllib.request.Request(url)
    token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    req.add_header("Authorization", "Basic " + token)
    with urllib.request.urlopen(req, timeout=10) as r:
        data = json.loads(r.read())
    assert isinstance(data, dict)
    return data


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve_files(directory: Path) -> Iterator[str]:
    """An HTTP server on loopback serving ``directory``; yields its base URL."""
    handler = functools.partial(_Quiet, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextmanager
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a hung BMC)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    try:
        yield int(s.getsockname()[1])
    finally:
        s.close()
