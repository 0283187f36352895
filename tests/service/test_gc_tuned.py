"""service/pipeline.gc_tuned: the garbage collector is tuned while a collection runs and
restored after it, also when runs overlap or fail (issue 8: ~10% of a collection's CPU)."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest

from gpufleet.collect.transport import RawResult
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.pipeline import GC_YOUNG_THRESHOLD, gc_tuned
from gpufleet.service.hosts.collect import collect


def test_overlapping_runs_restore_the_collector_when_the_last_ends() -> None:
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    first, second = threading.Event(), threading.Event()
    seen: list[tuple[int, int]] = []

    def other_run() -> None:
        with gc_tuned():
            first.set()
            second.wait(5)
            seen.append((gc.get_threshold()[0], gc.get_freeze_count()))

    t = threading.Thread(target=other_run)
    with gc_tuned():
        t.start()
        assert first.wait(5)
        assert gc.get_threshold()[0] == max(GC_YOUNG_THRESHOLD, before[0])
        assert gc.get_freeze_count() > frozen
    # the other run still goes on: still tuned
    assert gc.get_threshold()[0] == max(GC_YOUNG_THRESHOLD, before[0])
    second.set()
    t.join(5)
    assert seen and seen[0][0] == max(GC_YOUNG_THRESHOLD, before[0])
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen
    assert gc.isenabled()


def test_a_failed_run_restores_the_collector() -> None:
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with pytest.raises(RuntimeError), gc_tuned():
        raise RuntimeError("boom")
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen


def test_a_collection_runs_tuned_and_stores_the_same(fleet: Fleet, tmp_path: Path) -> None:
    enroll_lab(fleet, tmp_path / "lab", 3, models=["a100-8x"], faults={})
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    during: list[tuple[int, int]] = []

    def on_result(_r: RawResult) -> None:
        during.append((gc.get_threshold()[0], gc.get_freeze_count()))

    rep = collect(fleet, on_result=on_result)
    assert rep.ok and [r.gpus for r in rep.results] == [8, 8, 8]
    assert during and all(t >= GC_YOUNG_THRESHOLD and n > frozen for t, n in during)
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen
