"""Scale bench: the read and collect commands over a simulated fleet of N hosts (issue 8).

Builds a lab fleet (``gpufleet lab create``: 8-GPU models only, no faults, ``sim``
transport), enrolls it, then runs each command as its own ``gpufleet`` process and prints
its CPU seconds (user + system of the process and what it reaped, from ``wait4``), wall
seconds, per-host milliseconds and peak RSS, on SQLite and on PostgreSQL (a fresh scratch
database per run, dropped afterwards). The floor is measured in the same run: lxml parsing
one real 8-GPU ``nvidia-smi -q -x`` document (the lab's A100 host and the captured V100S
box); the collect rows print their ratio to it. Storage: bytes the history tables grew by
over one whole collection of the (unchanged) fleet, per host, times 288 (a 5-minute
interval) = bytes per host per day.

    .venv/bin/python bench/scale.py [--hosts 12500] [--db sqlite,pg] [--procs 1]
                                    [--pg ADMIN_URL] [--only collect,summary] [--json-out F]
                                    [--keep DIR] [--src OLD_TREE/src]

``--keep DIR`` keeps the built fleet (DIR/sqlite, or a named PostgreSQL database recorded in
DIR/pg/fleet.json) and a later run with the same ``--keep DIR`` reuses it, so the read
commands can be measured again at 12,500 hosts without collecting again (the reused
database is first brought to the running gpufleet's schema: ``gpufleet db upgrade``).

``--serve N`` also measures the reads as the API server pays them: a real ``gpufleet serve``
on loopback (a fresh process per read, a viewer token in a tokens file), one warm-up request
then N timed ones of ``GET /api/v1/summary``, the whole host list (``/api/v1/hosts``,
1,000 a page, every page), ``/api/v1/labels?selector=state:available`` and
``/api/v1/drift``: the server's CPU per request (``/proc/PID/stat``: imports done, the
process warm), its RSS before the first request and its peak (``VmHWM``) after the last,
and a digest of each answer (to compare two trees' answers); ``capacity`` and ``capacity
check --gpus 64`` too, as commands and as ``/api/v1/capacity[/check]``.

The commands run with bytecode caches (the bench compiles the tree's gpufleet package first
and drops ``PYTHONDONTWRITEBYTECODE``), as an installed gpufleet has them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPUFLEET = str(ROOT / ".venv" / "bin" / "gpufleet")
#: How each command is started: the installed entry point, or with ``--src`` the other
#: tree's (``gpufleet.cli.entry:main``, else ``gpufleet.cli.main:app`` in a tree without
#: that module) through this venv's python.
CLI: list[str] = [GPUFLEET]
LAUNCH = (
    "import sys\n"
    "try:\n    from gpufleet.cli.entry import main\n"
    "except ImportError:\n    from gpufleet.cli.main import app as main\n"
    "sys.argv[0] = 'gpufleet'\nsys.exit(main())"
)
DEFAULT_PG = os.environ.get("GPUFLEET_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
MODELS = ("a100-8x", "h100-8x", "v100s-8x")  # 8 GPUs each: 12,500 hosts = 100,000 GPUs

#: (label, argv after the global options); collect runs twice so the second one measures
#: the history an unchanged fleet writes. ``--only`` takes labels up to " (".
COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # the same process doing nothing: the read commands' figures include it
    ("start-up (--help)", ("--help",)),
    ("collect", ("collect", "--json")),
    ("collect (again)", ("collect", "--json")),
    ("validate", ("validate", "--json")),
    ("validate --no-collect", ("validate", "--no-collect", "--json")),
    ("summary", ("summary",)),
    ("hosts list --json", ("hosts", "list", "--json")),
    ("labels state:available --json", ("labels", "state:available", "--json")),
    ("drift", ("drift",)),
    ("capacity --json", ("capacity", "--json")),
    ("capacity check --gpus 64", ("capacity", "check", "--gpus", "64")),
)
#: The reads ``--serve`` sends to a warm ``gpufleet serve``: (label, path); the host list is
#: walked page by page (``next_cursor``), 1,000 hosts a page (the API's largest page).
API_READS: tuple[tuple[str, str], ...] = (
    ("summary", "/api/v1/summary"),
    ("hosts list (every page)", "/api/v1/hosts?limit=1000"),
    ("labels state:available", "/api/v1/labels?selector=state%3Aavailable"),
    ("drift", "/api/v1/drift"),
    ("capacity", "/api/v1/capacity"),
    ("capacity check --gpus 64", "/api/v1/capacity/check?gpus=64"),
)
#: The file a ``--keep`` run writes in the fleet's directory once the fleet is built.
KEPT = "fleet.json"
HISTORY_TABLES = (
    "fact_snapshots",
    "fact_label_sets",
    "gpus",
    "nics",
    "collection_results",
    "collection_runs",
)


@dataclass
class Row:
    db: str
    command: str
    hosts: int
    rc: int
    cpu_s: float
    wall_s: float
    per_host_ms: float
    rss_mb: float
    history_bytes: int | None = None


@dataclass
class ApiRow:
    db: str
    read: str
    hosts: int
    requests: int
    first_cpu_s: float  # the warm-up request (lazy imports of the route's modules)
    median_cpu_s: float  # server CPU per request, the timed ones
    min_cpu_s: float
    median_wall_s: float
    idle_rss_mb: float  # the server's RSS once it answers, before the first request
    peak_rss_mb: float  # its VmHWM after the last request
    answer_bytes: int
    digest: str  # SHA-256 of the answer (every page of the host list)


def lxml_floor_ms(repeat: int = 200) -> dict[str, float]:
    """Median ms lxml takes to parse one 8-GPU ``-q -x`` document (lab A100, captured V100S)."""
    from lxml import etree

    from gpufleet.lab.captures import captures_dir
    from gpufleet.lab.fleet import LabHost
    from gpufleet.lab.renderers import render_sections

    docs = {
        "a100-8x (lab)": render_sections(LabHost(name="f", model="a100-8x", serial_salt=1))[
            "nvidia-smi-xml"
        ].stdout.encode(),
        "v100s-8x (captured)": (
            captures_dir() / "nvidia-smi-xml/datakit_gtx-8card.xml"
        ).read_bytes(),
    }
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    out: dict[str, float] = {}
    for name, doc in docs.items():
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            etree.fromstring(doc, parser)
            times.append(time.perf_counter() - t)
        out[name] = statistics.median(times) * 1000
    return out


def sim_render_ms(repeat: int = 20) -> float:
    """Median ms the ``sim`` transport takes to render one host's collection output (the
    lab's a100/h100/v100s 8x in turn): the hosts' side of the work, which runs in the
    collect process with that transport (issue 30: reported beside the controller's CPU)."""
    from gpufleet.collect.script import remote_script
    from gpufleet.lab.fleet import LabHost
    from gpufleet.lab.renderers import render_output
    from gpufleet.lab.transport import _SEC_LINE

    asked = _SEC_LINE.findall(remote_script()) or None
    times = []
    for model in ("a100-8x", "h100-8x", "v100s-8x"):
        host = LabHost(name="r", model=model, serial_salt=1)
        for _ in range(repeat):
            t = time.process_time()
            render_output(host, asked)
            times.append(time.process_time() - t)
    return statistics.median(times) * 1000


def run(argv: Sequence[str], env: dict[str, str]) -> tuple[int, float, float, float, str]:
    """Run one gpufleet process; (rc, cpu s, wall s, peak RSS MB, stderr tail)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read().decode(errors="replace")[-600:]
    return p.returncode, ru.ru_utime + ru.ru_stime, wall, ru.ru_maxrss / 1024, tail


def run_parallel(
    argvs: Sequence[Sequence[str]], env: dict[str, str]
) -> tuple[int, float, float, float, str]:
    """Several gpufleet processes at once: summed CPU, wall until the last, max RSS."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(a, env=env, stdout=subprocess.DEVNULL) for a in argvs]
    cpu, rss, rc = 0.0, 0.0, 0
    for p in procs:
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        rc = rc or p.returncode
        cpu += ru.ru_utime + ru.ru_stime
        rss = max(rss, ru.ru_maxrss / 1024)
    return rc, cpu, time.perf_counter() - t0, rss, ""


def history_bytes(url: str) -> int:
    """Bytes the history tables take (PostgreSQL: total relation sizes; SQLite: used pages)."""
    from sqlalchemy import create_engine, text

    eng = create_engine(url)
    try:
        with eng.connect() as c:
            if url.startswith("sqlite"):
                page = int(c.execute(text("PRAGMA page_size")).scalar_one())
                used = int(c.execute(text("PRAGMA page_count")).scalar_one()) - int(
                    c.execute(text("PRAGMA freelist_count")).scalar_one()
                )
                return used * page
            return sum(
                int(
                    c.execute(  # 0: a table this schema does not have (a tree before 0017)
                        text(f"SELECT coalesce(pg_total_relation_size(to_regclass('{t}')), 0)")
                    ).scalar_one()
                )
                for t in HISTORY_TABLES
            )
    finally:
        eng.dispose()


def pg_scratch(admin: str, keep: bool = False) -> tuple[str, str]:
    """A new database on the server ``admin`` names: (its name, its URL); a kept one's name
    starts ``gpufleet_scale_kept_``."""
    from sqlalchemy import create_engine, text

    name = f"gpufleet_scale_{'kept_' if keep else ''}{uuid.uuid4().hex[:8]}"
    eng = create_engine(admin, isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    eng.dispose()
    return name, admin.rsplit("/", 1)[0] + "/" + name


def pg_drop(admin: str, name: str) -> None:
    from sqlalchemy import create_engine, text

    eng = create_engine(admin, isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    eng.dispose()


def build_fleet(db: str, hosts: int, env: dict[str, str], home: Path) -> None:
    """A lab fleet of ``hosts`` hosts in ``home``, enrolled in the database ``env`` names."""
    if db == "pg":
        subprocess.run([*CLI, "db", "upgrade"], env=env, check=True, stdout=subprocess.DEVNULL)
    lab = home / "lab"
    models = [a for m in MODELS for a in ("--model", m)]
    subprocess.run(
        [
            *CLI,
            "lab",
            "create",
            "-n",
            str(hosts),
            "--no-default-faults",
            "--json",
            *models,
            "--dir",
            str(lab),
        ],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    t = time.perf_counter()
    subprocess.run(
        [*CLI, "enroll", "-i", str(lab / "inventory.ini")],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    print(f"  [{db}] enrolled {hosts} hosts in {time.perf_counter() - t:.1f} s", flush=True)


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (every thread) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_kb(pid: int, key: str) -> int:
    """``key`` (``VmRSS``, ``VmHWM``) of ``/proc/PID/status``, in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get_all(base: str, path: str, token: str) -> bytes:
    """The answer to ``GET path``; for a paged list every page's, concatenated."""
    out, url = b"", path
    while True:
        req = urllib.request.Request(base + url, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                body = r.read()
        except urllib.error.HTTPError as exc:  # e.g. 404: nothing matches; its answer counts
            return out + f"{exc.code} ".encode() + exc.read()
        out += body
        if "/hosts?" not in path:
            return out
        cursor = json.loads(body)["next_cursor"]
        if cursor is None:
            return out
        url = f"{path}&cursor={cursor}"


def serve_reads(db: str, hosts: int, env: dict[str, str], home: Path, runs: int) -> list[ApiRow]:
    """Each of :data:`API_READS` sent to a fresh ``gpufleet serve`` (loopback, a viewer token
    in a tokens file): one warm-up request, then ``runs`` timed ones."""
    token = "gfb_" + uuid.uuid4().hex
    tokens = home / "bench-tokens.yaml"
    tokens.write_text(f"{hashlib.sha256(token.encode()).hexdigest()}: viewer\n")
    senv = dict(env, GPUFLEET_API_TOKENS_FILE=str(tokens))
    rows: list[ApiRow] = []
    for label, path in API_READS:
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        log = home / "bench-serve.log"
        with log.open("w") as err:
            server = subprocess.Popen(
                [*CLI, "serve", "--port", str(port)],
                env=senv,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    with urllib.request.urlopen(base + "/api/v1/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"gpufleet serve did not start: {log.read_text()[-2000:]}")
                time.sleep(0.2)
            idle = _proc_kb(server.pid, "VmRSS") / 1024
            cpus, walls, digests = [], [], set()
            size = 0
            for _ in range(runs + 1):
                c0, t0 = _proc_cpu_s(server.pid), time.perf_counter()
                body = _get_all(base, path, token)
                walls.append(time.perf_counter() - t0)
                cpus.append(_proc_cpu_s(server.pid) - c0)
                digests.add(hashlib.sha256(body).hexdigest())
                size = len(body)
            peak = _proc_kb(server.pid, "VmHWM") / 1024
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        timed = cpus[1:] or cpus
        row = ApiRow(
            db,
            label,
            hosts,
            len(timed),
            cpus[0],
            statistics.median(timed),
            min(timed),
            statistics.median(walls[1:] or walls),
            idle,
            peak,
            size,
            # every request answered the same (a summary's clock-free; else say so)
            sorted(digests)[0][:16] + ("" if len(digests) == 1 else f" (+{len(digests) - 1})"),
        )
        rows.append(row)
        print(
            f"  [{db}] api {label:26} cpu first={row.first_cpu_s:6.2f}s "
            f"median={row.median_cpu_s:6.2f}s min={row.min_cpu_s:6.2f}s "
            f"wall={row.median_wall_s:6.2f}s rss {idle:6.1f} -> peak {peak:6.1f} MB "
            f"{size:,} B sha256:{row.digest}",
            flush=True,
        )
    return rows


def kept_fleet(home: Path) -> dict[str, object] | None:
    """The fleet a ``--keep`` run left in ``home`` (``fleet.json``: hosts, database), if any."""
    marker = home / KEPT
    return json.loads(marker.read_text()) if marker.is_file() else None


def bench_db(
    db: str,
    hosts: int,
    pg_admin: str,
    procs: int,
    only: set[str] | None,
    home: Path,
    keep: bool = False,
    serve: int = 0,
    api_rows: list[ApiRow] | None = None,
) -> list[Row]:
    """Build the fleet in ``home`` (or, with ``keep``, reuse the one a ``--keep`` run left
    there, brought to this gpufleet's schema first) and run the commands on it; with
    ``serve``, then the API reads (:func:`serve_reads`, appended to ``api_rows``)."""
    env = dict(os.environ, GPUFLEET_HOME=str(home), GPUFLEET_ACTOR="bench")
    env.pop("GPUFLEET_DATABASE_URL", None)
    scratch: str | None = None
    url = f"sqlite:///{home / 'gpufleet.db'}"
    kept = kept_fleet(home) if keep else None
    if kept is not None:
        hosts, url = int(str(kept["hosts"])), str(kept["url"])
        print(f"  [{db}] reusing the {hosts}-host fleet kept in {home} ({kept.get('name', url)})")
        if db == "pg":
            env["GPUFLEET_DATABASE_URL"] = url
        # a fleet kept by an older gpufleet: its reads need this one's schema (e.g. indexes)
        subprocess.run([*CLI, "db", "upgrade"], env=env, check=True, stdout=subprocess.DEVNULL)
    elif db == "pg":
        scratch, url = pg_scratch(pg_admin, keep)
        env["GPUFLEET_DATABASE_URL"] = url
    rows: list[Row] = []
    try:
        if kept is None:
            build_fleet(db, hosts, env, home)
        if keep and kept is None:  # kept from now on, even if a command below fails
            (home / KEPT).write_text(
                json.dumps({"hosts": hosts, "url": url, "name": scratch or str(home)})
            )
            scratch = None
        for label, args in COMMANDS:
            if only is not None and label.split(" (")[0] not in only and label not in only:
                continue
            before = history_bytes(url) if label.startswith("collect") else None
            if procs > 1 and label.startswith("collect"):
                rc, cpu, wall, rss, tail = run_parallel([[*CLI, *args]] * procs, env)
            else:
                rc, cpu, wall, rss, tail = run([*CLI, *args], env)
            grew = history_bytes(url) - before if before is not None else None
            row = Row(db, label, hosts, rc, cpu, wall, cpu / hosts * 1000, rss, grew)
            rows.append(row)
            print(
                f"  [{db}] {label:32} rc={rc} cpu={cpu:7.2f}s wall={wall:7.2f}s "
                f"{row.per_host_ms:6.2f} ms/host rss={rss:7.1f}MB"
                + (f" history +{grew / hosts:,.0f} B/host" if grew is not None else ""),
                flush=True,
            )
            if rc not in (0, 1, 5) and tail:  # 1/5: some hosts not ok/available is fine
                print("    " + tail.replace("\n", "\n    "), flush=True)
        if serve and api_rows is not None:
            api_rows += serve_reads(db, hosts, env, home, serve)
    finally:
        if scratch is not None:
            pg_drop(pg_admin, scratch)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=12_500)
    ap.add_argument("--db", default="sqlite,pg", help="sqlite, pg or both (comma separated)")
    ap.add_argument("--pg", default=DEFAULT_PG, help="PostgreSQL admin URL (scratch DB per run)")
    ap.add_argument("--procs", type=int, default=1, help="collector processes at once (pg)")
    ap.add_argument("--only", default="", help="comma-separated command labels to run")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep the fleet in DIR/<db> (SQLite file; PostgreSQL: a database named "
        "gpufleet_scale_kept_*, not dropped) and reuse it when DIR/<db> holds one: no lab "
        "create or enroll, only the commands --only names (e.g. the reads after one collect "
        "and validate)",
    )
    ap.add_argument(
        "--serve",
        type=int,
        default=0,
        metavar="N",
        help="also send the reads to a warm `gpufleet serve` (loopback): a warm-up and N "
        "timed requests each; the server's CPU per request and RSS",
    )
    ap.add_argument(
        "--src",
        type=Path,
        help="run the gpufleet of this source tree (e.g. a worktree of an "
        "older commit, for 'before' figures): put first on PYTHONPATH",
    )
    a = ap.parse_args(argv)
    if a.src is not None:
        os.environ["PYTHONPATH"] = str(a.src.resolve())
        CLI[:] = [str(ROOT / ".venv" / "bin" / "python"), "-c", LAUNCH]
    # The commands run with bytecode caches, as an installed gpufleet has them (pip compiles
    # what it installs): without, every command compiles gpufleet's modules again (~0.2 s of
    # a read command's CPU on the 2-core machine), e.g. where PYTHONDONTWRITEBYTECODE is set.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    package = (a.src.resolve() if a.src is not None else ROOT / "src") / "gpufleet"
    subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", "compileall", "-q", str(package)],
        check=True,
    )
    floor = lxml_floor_ms()
    ref = floor["a100-8x (lab)"]
    render = sim_render_ms()
    print(f"nproc={os.cpu_count()} hosts={a.hosts} procs={a.procs}")
    for k, v in floor.items():
        print(f"floor: lxml parse of one 8-GPU -q -x, {k}: {v:.3f} ms")
    print(f"sim transport: rendering one host's output {render:.3f} ms (the hosts' side)")
    only = {x.strip() for x in a.only.split(",") if x.strip()} or None
    rows: list[Row] = []
    api_rows: list[ApiRow] = []
    for db in [d.strip() for d in a.db.split(",") if d.strip()]:
        if a.keep is not None:
            home = a.keep.resolve() / db
            home.mkdir(parents=True, exist_ok=True)
            rows += bench_db(db, a.hosts, a.pg, a.procs, only, home, True, a.serve, api_rows)
            continue
        with tempfile.TemporaryDirectory(prefix="gpufleet-scale-") as tmp:
            rows += bench_db(db, a.hosts, a.pg, a.procs, only, Path(tmp), False, a.serve, api_rows)
    end_floor = lxml_floor_ms()["a100-8x (lab)"]
    end_render = sim_render_ms()
    print(f"at the end: lxml floor {end_floor:.3f} ms, sim rendering {end_render:.3f} ms")
    render = (render + end_render) / 2
    print()
    print(
        "| db | command | hosts | CPU s | wall s | CPU ms/host | x lxml floor | peak RSS MB "
        "| history B/host/day (5 min) | CPU s less sim rendering |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        timed = r.command.startswith(("collect", "validate"))
        ratio = f"{r.per_host_ms / ((ref + end_floor) / 2):.1f}" if timed else ""
        day = f"{r.history_bytes / r.hosts * 288:,.0f}" if r.history_bytes is not None else ""
        less = f"{r.cpu_s - render * r.hosts / 1000:.2f}" if r.command.startswith("collect") else ""
        print(
            f"| {r.db} | {r.command} | {r.hosts} | {r.cpu_s:.2f} | {r.wall_s:.2f} "
            f"| {r.per_host_ms:.2f} | {ratio} | {r.rss_mb:.0f} | {day} | {less} |"
        )
    if api_rows:
        print()
        print(
            "| db | API read (warm server) | hosts | CPU s first | CPU s median | CPU s min "
            "| wall s median | RSS idle MB | peak RSS MB | answer bytes | sha256 |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in api_rows:
            print(
                f"| {r.db} | {r.read} | {r.hosts} | {r.first_cpu_s:.2f} | {r.median_cpu_s:.2f} "
                f"| {r.min_cpu_s:.2f} | {r.median_wall_s:.2f} | {r.idle_rss_mb:.0f} "
                f"| {r.peak_rss_mb:.0f} | {r.answer_bytes:,} | {r.digest} |"
            )
    if a.json_out:
        a.json_out.write_text(
            json.dumps(
                {
                    "floor_ms": floor,
                    "end_floor_ms": end_floor,
                    "sim_render_ms": render,
                    "rows": [asdict(r) for r in rows],
                    "api": [asdict(r) for r in api_rows],
                }
            )
        )
    return 0 if all(r.rc in (0, 1, 5) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
