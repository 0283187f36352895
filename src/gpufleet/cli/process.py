"""Process-wide settings, made by the entry points and nowhere else (issue 25, item 3).

The cyclic garbage collector and the SIGTERM handler belong to the whole process, so the
program's entry points set them (:func:`gpufleet.cli.entry.main` and ``imports_done``,
``gpufleet serve``, ``gpufleet worker``), never a service that happens to run in it: a
pipeline run inside the worker or the server must not change them under the process's own
handlers.
"""

from __future__ import annotations

import gc
import signal
import threading
from types import FrameType

#: Allocations between two young collections of the cyclic garbage collector in a gpufleet
#: process (CPython's default is 700). Parsing and storing a host allocates many short-lived
#: objects that reference counting frees; the collector only has to find cycles (issue 8:
#: ~10% of a collection's CPU went to it with the default).
GC_YOUNG_THRESHOLD = 10_000


def tune_gc() -> None:
    """The collector tuned for the rest of the process: what is alive now (modules, ORM
    mappings, settings) is frozen out of its scans (``gc.freeze``), and young collections
    come every :data:`GC_YOUNG_THRESHOLD` allocations. The collector stays on; garbage is
    still collected. Calling it again freezes what was made since."""
    gc.freeze()
    young, *older = gc.get_threshold()
    gc.set_threshold(max(GC_YOUNG_THRESHOLD, young), *older)


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def sigterm_exits() -> None:
    """SIGTERM raises ``SystemExit(143)`` in the main thread, as Ctrl-C raises
    ``KeyboardInterrupt``: a command's ``finally`` blocks run, so a run in flight releases
    its claims (:mod:`gpufleet.service.core.pipeline`). Only from the main thread, where
    signals are delivered; elsewhere nothing changes."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)


def sigterm_default() -> None:
    """SIGTERM back to the system's default, for an entry point whose server installs its
    own handlers (uvicorn, procrastinate) and re-raises the signal it handled."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
