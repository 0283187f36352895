"""Profile of the collect hot path (issue 8): parse microbench and an in-process collection.

``parse``: per 8-GPU lab model (a100-8x, h100-8x, v100s-8x), the best CPU ms (of
``--repeat``) of each step one host's result goes through in the controller:
``split_bundle``, ``assemble_facts`` (and
inside it each section parser alone), ``model_dump`` + content hash, the derived columns and
labels; against lxml parsing the same ``-q -x`` document (the floor the issue names). With
``--hosts N``: split + assemble per host over a lab fleet of N different hosts.

``collect``: builds a lab fleet of N hosts on SQLite or PostgreSQL (a scratch database,
dropped afterwards), enrolls it and runs ``collect`` in this process; prints the CPU time of
the apply thread per host (parse + store, without the sim transport's rendering, which runs
in the other thread) and, with ``--profile``, the top entries of a cProfile of that thread.

    .venv/bin/python bench/profile_collect.py parse [--repeat 50]
    .venv/bin/python bench/profile_collect.py parse --hosts 300 [--repeat 5]
    .venv/bin/python bench/profile_collect.py collect [--hosts 150] [--db sqlite|pg]
        [--profile] [--top 30] [--again]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import io
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scale import pg_drop, pg_scratch  # bench/scale.py: the scratch database of every bench

if TYPE_CHECKING:
    from gpufleet.service.core.fleet import Fleet

DEFAULT_PG = os.environ.get("GPUFLEET_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
MODELS = ("a100-8x", "h100-8x", "v100s-8x")


def _best_ms(fn: Callable[[], object], repeat: int) -> float:
    """The best of ``repeat`` CPU times of ``fn`` in ms (the least disturbed by other load)."""
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times) * 1000


def parse_bench(repeat: int, profile: bool, top: int) -> None:
    from lxml import etree

    from gpufleet.collect.assemble import assemble_facts
    from gpufleet.collect.bundle import render_bundle, split_bundle
    from gpufleet.collect.sections import REGISTRY, Read
    from gpufleet.domain.labels import fact_labels
    from gpufleet.domain.snapshot_columns import derived_columns
    from gpufleet.errors import ParseError
    from gpufleet.lab.fleet import LabHost
    from gpufleet.lab.renderers import render_sections
    from gpufleet.service.hosts.collect import facts_digest

    now = datetime.now(UTC)
    for model in MODELS:
        secs = render_sections(LabHost(name="p", model=model, serial_salt=1))
        bundle = render_bundle(list(secs.values()))
        xml = secs["nvidia-smi-xml"].stdout.encode()
        split = split_bundle(bundle)
        facts = assemble_facts(split, now, "p")
        doc = facts.model_dump(mode="json")
        steps: list[tuple[str, Callable[[], object]]] = [
            ("split_bundle", functools.partial(split_bundle, bundle)),
            ("assemble_facts", functools.partial(assemble_facts, split, now, "p")),
            ("model_dump(json)", functools.partial(facts.model_dump, mode="json")),
            ("facts_digest", functools.partial(facts_digest, doc)),
            ("derived_columns", functools.partial(derived_columns, facts)),
            ("fact_labels", functools.partial(fact_labels, facts)),
        ]
        if xml.strip():
            steps.insert(0, ("lxml floor (-q -x)", functools.partial(etree.fromstring, xml)))
        rows = [(label, _best_ms(fn, repeat)) for label, fn in steps]
        for spec in REGISTRY:
            if spec.parse is None or spec.read_with is not None:
                continue
            sec = split.get(spec.name)
            if sec is None:
                continue
            parse = spec.parse
            data: dict[str, Any] = {"nvidia_smi": facts.nvidia_smi}

            def one(
                parse: Any = parse, sec: Any = sec, data: Any = data, split: Any = split
            ) -> None:
                with contextlib.suppress(ParseError):  # a tool that did not answer
                    parse(Read(sec.stdout, "p", "p", [], split, data))

            rows.append((f"  section {spec.name}", _best_ms(one, repeat)))
        print(f"{model}: bundle {len(bundle) / 1000:.0f} kB, {len(facts.gpus)} GPUs")
        for label, ms in rows:
            print(f"  {label:34} {ms:7.3f} ms")
        if profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(repeat):
                facts = assemble_facts(split_bundle(bundle), now, "p")
                facts_digest(facts.model_dump(mode="json"))
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
            print(out.getvalue())


def parse_fleet_bench(hosts: int, repeat: int) -> None:
    """CPU ms per host of ``split_bundle`` + ``assemble_facts`` over a lab fleet of ``hosts``
    different hosts (round robin over :data:`MODELS`, distinct serials and UUIDs), each parsed
    once per round: the first round on cold caches, then the best of ``repeat`` rounds (the
    value and line memos see each host's unique lines once per round, as a collection does)."""
    from gpufleet.collect.assemble import assemble_facts
    from gpufleet.collect.bundle import render_bundle, split_bundle
    from gpufleet.lab.fleet import create_fleet
    from gpufleet.lab.renderers import render_sections

    now = datetime.now(UTC)
    fl = create_fleet(hosts, models=list(MODELS), faults={})
    bundles = [(h.name, render_bundle(list(render_sections(h).values()))) for h in fl.hosts]

    def one_round() -> float:
        t = time.process_time()
        for name, bundle in bundles:
            assemble_facts(split_bundle(bundle), now, name)
        return (time.process_time() - t) / len(bundles) * 1000

    cold = one_round()
    best = min(one_round() for _ in range(repeat))
    print(
        f"parse fleet of {hosts} hosts ({', '.join(MODELS)}): split_bundle + assemble_facts "
        f"{cold:.2f} ms/host cold, {best:.2f} ms/host best of {repeat} rounds"
    )


def lxml_floor_ms(outputs: Sequence[str]) -> float:
    """The issue's floor for these collection outputs, measured now: the CPU ms per host of
    lxml parsing each host's ``nvidia-smi -q -x`` section (hosts whose GPU report is the
    ``-q`` text have no such document; the floor is the mean
    over the hosts that have one: the floor of one XML host), best of 5 rounds."""
    from lxml import etree

    from gpufleet.collect.bundle import split_bundle

    docs = []
    for out in outputs:
        sec = split_bundle(out).get("nvidia-smi-xml")
        if sec is not None and sec.stdout.strip():
            docs.append(sec.stdout.encode())

    def parse_all() -> None:
        for d in docs:
            etree.fromstring(d)

    return _best_ms(parse_all, 5) / max(len(docs), 1)


def _backend_cpu(fleet: Fleet) -> dict[int, float]:
    """CPU seconds so far of each server process serving the fleet's database (a local
    server: read from /proc), by pid."""
    from sqlalchemy import text

    with fleet.db.engine.connect() as conn:
        pids = conn.execute(
            text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        ).scalars()
        out: dict[int, float] = {}
        tick = os.sysconf("SC_CLK_TCK")
        for pid in pids:
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                out[pid] = (int(fields[11]) + int(fields[12])) / tick
    return out


@contextlib.contextmanager
def lab_fleet(hosts: int, db: str, pg_admin: str, actor: str) -> Iterator[Fleet]:
    """A fleet of ``hosts`` enrolled lab hosts (:data:`MODELS` in turn, no faults) in a new
    temporary directory, on SQLite there or (``db`` "pg") on a scratch PostgreSQL database of
    the server ``pg_admin`` names, dropped on the way out; ``actor`` is the fleet's actor."""
    from gpufleet.lab.demo import enroll_lab
    from gpufleet.service.core.fleet import Fleet
    from gpufleet.store.db import Database

    tmp = Path(tempfile.mkdtemp(prefix=f"gpufleet-{actor}-"))
    scratch = None
    url = f"sqlite:///{tmp / 'fleet.db'}"
    if db == "pg":
        scratch, url = pg_scratch(pg_admin)
    try:
        if db == "pg":
            scratch_db = Database(url)
            scratch_db.migrate()
            scratch_db.dispose()
        fleet = Fleet.open(home=tmp / "home", url=url, actor=actor)
        enroll_lab(fleet, tmp / "lab", hosts, models=list(MODELS), faults={})
        yield fleet
    finally:
        if scratch is not None:
            pg_drop(pg_admin, scratch)


def collect_bench(
    hosts: int, db: str, profile: bool, top: int, again: bool, pg_admin: str, dump: str
) -> None:
    import gpufleet.service.hosts.collect as svc

    with lab_fleet(hosts, db, pg_admin, "prof") as fleet:
        # the group commit (issue 30) stores through apply_results; an older tree per host
        name = "apply_results" if hasattr(svc, "apply_results") else "apply_result"
        real = getattr(svc, name)
        spent = [0.0]
        prof = cProfile.Profile()

        outputs: list[str] = []

        def timed(*a: Any, **k: Any) -> Any:
            raws = [r for _h, r, _t in a[2]] if name == "apply_results" else [a[3]]
            for raw in raws:
                if raw.output is not None and len(outputs) < hosts:
                    outputs.append(raw.output)
            t = time.thread_time()
            if profile:
                prof.enable()
            try:
                return real(*a, **k)
            finally:
                if profile:
                    prof.disable()
                spent[0] += time.thread_time() - t

        setattr(svc, name, timed)
        real_parse = svc.parse_result
        parsing = [0.0]

        def timed_parse(*a: Any, **k: Any) -> Any:
            t = time.thread_time()
            try:
                return real_parse(*a, **k)
            finally:
                parsing[0] += time.thread_time() - t

        svc.parse_result = timed_parse
        rounds = ("collect", "collect (again)") if again else ("collect",)
        for label in rounds:  # the profile is of the last round
            spent[0] = parsing[0] = 0.0
            prof = cProfile.Profile()
            server0 = _backend_cpu(fleet) if db == "pg" else {}
            t_all = time.process_time()
            rep = svc.collect(fleet)
            total = time.process_time() - t_all
            floor = lxml_floor_ms(outputs)
            per_host = spent[0] / hosts * 1000
            print(
                f"[{db}] {label}: {len(rep.results)} hosts {rep.counts}; apply thread "
                f"(parse + store) {per_host:.2f} ms/host = {per_host / floor:.1f}x the lxml "
                f"floor {floor:.3f} ms/host (parse {parsing[0] / hosts * 1000:.2f}, store "
                f"{(spent[0] - parsing[0]) / hosts * 1000:.2f}); whole process "
                f"{total / hosts * 1000:.2f} ms/host"
            )
            if db == "pg":
                server1 = _backend_cpu(fleet)
                server = sum(v - server0.get(pid, 0.0) for pid, v in server1.items())
                print(
                    f"[{db}] {label}: server backends {server / hosts * 1000:.2f} ms/host "
                    "(/proc of this database's PostgreSQL processes, 10 ms ticks)"
                )
        setattr(svc, name, real)
        svc.parse_result = real_parse
        fleet.db.dispose()
        if profile:
            if dump:
                prof.dump_stats(dump)
            out = io.StringIO()
            st = pstats.Stats(prof, stream=out)
            st.sort_stats("tottime").print_stats(top)
            st.sort_stats("cumulative").print_stats(top)
            print(out.getvalue())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("parse")
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--top", type=int, default=25)
    p.add_argument(
        "--hosts", type=int, default=0, help="parse a lab fleet of N hosts instead (per host)"
    )
    c = sub.add_parser("collect")
    c.add_argument("--hosts", type=int, default=150)
    c.add_argument("--db", choices=("sqlite", "pg"), default="sqlite")
    c.add_argument("--profile", action="store_true")
    c.add_argument("--again", action="store_true", help="collect twice (unchanged fleet)")
    c.add_argument("--top", type=int, default=30)
    c.add_argument("--pg", default=DEFAULT_PG)
    c.add_argument("--dump", default="", help="write the profile (pstats) to this file")
    a = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    if a.what == "parse" and a.hosts:
        parse_fleet_bench(a.hosts, a.repeat)
    elif a.what == "parse":
        parse_bench(a.repeat, a.profile, a.top)
    else:
        collect_bench(a.hosts, a.db, a.profile, a.top, a.again, a.pg, a.dump)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
