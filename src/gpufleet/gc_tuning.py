"""The cyclic garbage collector tuned while collections run (issue 8; moved out of
:mod:`gpufleet.service.core.pipeline`, which re-exports it)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: Allocations between two young collections of the cyclic garbage collector while a run
#: goes on (CPython's default is 700).
GC_YOUNG_THRESHOLD = 10_000
_gc_lock = threading.Lock()
_gc_runs = 0
_gc_saved: tuple[int, int, int] = (700, 10, 10)


@contextmanager
def gc_tuned() -> Iterator[None]:
    """The cyclic garbage collector tuned while runs go on (issue 8: ~10% of a collection's
    CPU went to it): what is alive when the first run starts (modules, ORM mappings,
    settings) is frozen out of its scans (``gc.freeze``), and young collections come every
    :data:`GC_YOUNG_THRESHOLD` allocations. Parsing and storing a host allocates many
    short-lived objects that reference counting frees; the collector only has to find
    cycles. Both are undone when the last run of the process ends (runs may overlap in
    threads); nothing else changes (the collector stays on, garbage is still collected)."""
    global _gc_runs, _gc_saved
    with _gc_lock:
        if _gc_runs == 0:
            _gc_saved = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(max(GC_YOUNG_THRESHOLD, _gc_saved[0]), *_gc_saved[1:])
        _gc_runs += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_runs -= 1
            if _gc_runs == 0:
                gc.set_threshold(*_gc_saved)
                gc.unfreeze()
