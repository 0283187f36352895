"""Process-wide settings belong to the entry points (issue 25, item 3): a ``gpufleet``
process tunes the garbage collector once its imports are done and turns SIGTERM into
``SystemExit(143)``; ``serve`` and ``worker`` leave SIGTERM to their servers; a pipeline run
changes neither (it used to tune the collector and swap the SIGTERM handler for itself, also
inside the worker and the server)."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
from pathlib import Path

from gpufleet.cli.process import GC_YOUNG_THRESHOLD
from gpufleet.collect.transport import RawResult
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect

_PROBE = """
import gc, signal
from gpufleet.cli import process
from gpufleet.cli.entry import imports_done
gc.disable()
frozen = gc.get_freeze_count()
imports_done()
print(gc.isenabled(), gc.get_threshold()[0], gc.get_freeze_count() > frozen)
process.sigterm_exits()
try:
    signal.raise_signal(signal.SIGTERM)
except SystemExit as exc:
    print("exit", exc.code)
process.sigterm_default()
print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
"""


def test_the_entry_point_tunes_the_collector_and_sigterm_exits() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", str(GC_YOUNG_THRESHOLD), "True", "exit", "143",
                                   "True"]


def test_a_collection_changes_no_process_setting(fleet: Fleet, tmp_path: Path) -> None:
    enroll_lab(fleet, tmp_path / "lab", 3, models=["a100-8x"], faults={})
    before = (gc.get_threshold(), gc.get_freeze_count(), signal.getsignal(signal.SIGTERM))
    during: list[object] = []

    def on_result(_r: RawResult) -> None:
        during.append((gc.get_threshold(), gc.get_freeze_count(),
                       signal.getsignal(signal.SIGTERM)))

    rep = collect(fleet, on_result=on_result)
    assert rep.ok and [r.gpus for r in rep.results] == [8, 8, 8]
    assert during and all(d == before for d in during)
    assert (gc.get_threshold(), gc.get_freeze_count(),
            signal.getsignal(signal.SIGTERM)) == before
