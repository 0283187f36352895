"""The ``gpufleet`` program (``[project.scripts]``): the lean start, then Typer.

Issue 8, start-up: Typer, Click and the pydantic ``TypeAdapter`` Typer builds per parameter
cost more than a whole ``gpufleet labels HOST``. So the entry point looks at the command line
first: the plain shapes of the read commands, ``gpufleet [--home DIR] [--db URL] [--debug]
[--utc]``
then ``labels [SELECTOR] [--json]``, ``hosts show NAME [--json]``, ``hosts list [SELECTOR]
[--json]``, ``summary [SELECTOR] [--json]``, ``drift [SELECTOR] [--json]`` or ``leases show
ID [--json]`` (:data:`_LEAN`),
are answered by the commands' lean starts (``lean_*`` in :mod:`gpufleet.cli.labels`,
:mod:`~gpufleet.cli.hosts_show`, :mod:`~gpufleet.cli.hosts_list`,
:mod:`~gpufleet.cli.summary_view`, :mod:`~gpufleet.cli.drift`,
:mod:`~gpufleet.cli.leases_view`) without importing Typer when
they can answer exactly what the command would print; every other command line, and every
case the lean start declines (an error to report, a warning to print, remote mode), runs the
Typer application (:data:`gpufleet.cli.main.app`), which parses and reports as usual. Only
the shape of the command line is read here; what is printed is the commands' own code.

``hosts list``, ``leases show``, ``hosts show`` and ``labels NAME`` read through the fast
read layer
(:func:`fast_read`, :mod:`gpufleet.service.core.fastread`; issues 25 and 30 item 3): the
database opened by its driver, the settings read without pydantic
(:func:`gpufleet.config_lean.lean_store`), the same reads the Typer commands make.

The imports run with the cyclic garbage collector off (:func:`imports_done` turns it back on
before a command runs).
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from gpufleet.store.readmodel import Read

R = TypeVar("R")

#: The global options (``gpufleet.cli.main.main``) that take a value.
_VALUED = ("--home", "--db")

#: The command lines answered lean: their words before the argument, and whether the
#: argument (NAME or SELECTOR) must be given (else it is optional).
_LEAN: dict[tuple[str, ...], bool] = {
    ("labels",): False,
    ("hosts", "show"): True,
    ("hosts", "list"): False,
    ("summary",): False,
    ("drift",): False,
    ("leases", "show"): True,
}


@dataclass(frozen=True)
class Lean:
    """``gpufleet [GLOBAL OPTIONS] COMMAND [ARGUMENT] [--json]``, parsed (``command``: one
    of :data:`_LEAN`; ``argument``: its NAME or SELECTOR, None when not given)."""

    home: Path | None
    db_url: str | None
    debug: bool
    command: tuple[str, ...]
    argument: str | None
    as_json: bool
    utc: bool = False


def lean_argv(argv: Sequence[str]) -> Lean | None:
    """``argv`` (without the program) as one of the plain command lines of :data:`_LEAN`
    (global options, the command's words, at most one argument that does not start with
    ``-``, ``--json`` at most once anywhere after the command), or None for anything else
    (Typer parses it)."""
    given: dict[str, str] = {}
    debug = utc = False
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        word = argv[i]
        option, eq, value = word.partition("=")
        if word == "--debug":
            debug, i = True, i + 1
        elif word == "--utc":
            utc, i = True, i + 1
        elif option in _VALUED and eq:
            given[option], i = value, i + 1
        elif word in _VALUED and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            given[word], i = argv[i + 1], i + 2
        else:
            return None
    command = next((c for c in _LEAN if tuple(argv[i : i + len(c)]) == c), None)
    if command is None:
        return None
    words = list(argv[i + len(command) :])
    as_json = "--json" in words
    rest = [w for w in words if w != "--json"]
    if (
        len(rest) > 1
        or (_LEAN[command] and not rest)
        or any(w.startswith("-") for w in rest)
        or words.count("--json") > 1
    ):
        return None
    home = given.get("--home")
    return Lean(
        home=Path(home) if home is not None else None,
        db_url=given.get("--db"),
        debug=debug,
        command=command,
        argument=rest[0] if rest else None,
        as_json=as_json,
        utc=utc,
    )


def imports_done() -> None:
    """Start-up is over: turn the cyclic garbage collector back on (issue 8, start-up).

    :func:`main` imports with the collector off: a read command's imports create ~100,000
    objects the collector tracks, all kept to the end of the process, and its collections during
    the imports and the read walk them again and again for no garbage (~0.4 s of a ~1.5 s
    ``summary`` on a loaded 2-core machine, ``bench/notes/lab-notebook.md``). A command calls
    this once its modules are imported, before it reads (the lean starts; the Typer application
    once it has loaded the command: ``LazyGroup.get_command`` in :mod:`gpufleet.cli.main`): what
    exists now is frozen out of later collections, and the command's own work is collected as
    usual, with young collections less often (:func:`gpufleet.cli.process.tune_gc`: the
    process-wide tuning a pipeline run once made for itself). Nothing to do when the
    collector is on (any other caller)."""
    if not gc.isenabled():
        from gpufleet.cli.process import tune_gc

        tune_gc()
        gc.enable()


def fast_read(read: Callable[[Read], R | None], show: Callable[[R], object]) -> int | None:
    """Answer a quick read from the fast read layer (:mod:`gpufleet.service.core.fastread`)
    on the database opened by its driver (:func:`gpufleet.store.readmodel.open_read`), the
    settings read without pydantic (:func:`gpufleet.config_lean.lean_store`): ``read`` gives
    the view, ``show`` prints it; the exit code 0. None (nothing printed) whenever the
    ordinary path must run instead: ``--debug`` (its log lines), settings the lean reading
    cannot vouch for, a database it cannot open, a read that cannot answer, any failure."""
    from gpufleet.cli.common import OPTIONS

    if OPTIONS.debug:
        return None
    from gpufleet.config_lean import lean_store
    from gpufleet.store.readmodel import open_read

    imports_done()
    try:
        store = lean_store(OPTIONS.home, OPTIONS.db_url)
        if store is None:
            return None
        with open_read(store.db_url()) as got:
            view = None if got is None else read(got)
    except Exception:  # reported by the ordinary path, through the error boundary
        return None
    if view is None:
        return None
    show(view)
    return 0


def _lean(argv: Sequence[str]) -> int | None:
    """The exit code of the command line answered without Typer, or None (nothing printed)."""
    parsed = lean_argv(argv)
    if parsed is None:
        return None
    from gpufleet.cli.common import OPTIONS

    OPTIONS.home, OPTIONS.db_url, OPTIONS.debug = parsed.home, parsed.db_url, parsed.debug
    OPTIONS.utc = parsed.utc
    OPTIONS.settings = None
    arg, as_json = parsed.argument, parsed.as_json
    if parsed.command == ("labels",):
        from gpufleet.cli.labels import lean_labels

        done = lean_labels(arg, as_json=as_json)
    elif parsed.command == ("hosts", "show"):
        from gpufleet.cli.hosts_show import lean_hosts_show

        assert arg is not None  # required (lean_argv)
        done = lean_hosts_show(arg, as_json=as_json)
    elif parsed.command == ("hosts", "list"):
        from gpufleet.cli.hosts_list import lean_hosts_list

        done = lean_hosts_list(arg, as_json=as_json)
    elif parsed.command == ("leases", "show"):
        from gpufleet.cli.leases_view import lean_leases_show

        assert arg is not None  # required (lean_argv)
        done = lean_leases_show(arg, as_json=as_json)
    elif parsed.command == ("summary",):
        from gpufleet.cli.summary_view import lean_summary

        done = lean_summary(arg, as_json=as_json)
    else:
        from gpufleet.cli.drift import lean_drift

        done = lean_drift(arg, as_json=as_json)
    OPTIONS.settings = None  # if declined, the command loads (and reports) them again
    return done


def main() -> None:
    """Run ``gpufleet`` with ``sys.argv``."""
    # gpufleet uses no pydantic plugins: skip pydantic's scan of every installed package's
    # entry points for them (~10 ms of each start). Set PYDANTIC_DISABLE_PLUGINS to the empty
    # string to have pydantic load installed plugins anyway.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    gc.disable()  # until the imports are done (cli.common.imports_done)
    from gpufleet.cli.process import sigterm_exits

    sigterm_exits()  # a run in flight releases its claims on SIGTERM (serve, worker: their own)
    try:
        code = _lean(sys.argv[1:])
        if code is not None:
            sys.stdout.flush()
            if code:
                sys.exit(code)
            return
    except KeyboardInterrupt:
        sys.exit(130)  # as the Typer application exits on ^C
    except BrokenPipeError:  # the reader went away (| head): exit 1 quietly, as Typer does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    from gpufleet.cli.main import app  # it turns the collector on (imports_done)

    app()
