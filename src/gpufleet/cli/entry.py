"""The ``gpufleet`` program (``[project.scripts]``): the lean start, then Typer.

Issue 8, start-up: Typer, Click and the pydantic ``TypeAdapter`` Typer builds per parameter
cost more than a whole ``gpufleet labels HOST``. So the entry point looks at the command line
first: ``gpufleet [--home DIR] [--db URL] [--debug] labels NAME [--json]`` and ``... hosts show
NAME [--json]`` are answered by :func:`gpufleet.cli.labels.lean_labels` and
:func:`gpufleet.cli.hosts_show.lean_hosts_show` without importing Typer when they can answer
exactly what the command would print; every other command line, and every case the lean
start declines (an error to report, a warning to print, a selector that is not one plain
name), runs the Typer application (:data:`gpufleet.cli.main.app`), which parses and reports
as usual. Only the shape of the command line is read here; what is printed is the commands'
own code.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: The global options (``gpufleet.cli.main.main``) that take a value.
_VALUED = ("--home", "--db")

#: The command lines answered lean: their words before NAME.
_LEAN = (("labels",), ("hosts", "show"))


@dataclass(frozen=True)
class Lean:
    """``gpufleet [GLOBAL OPTIONS] COMMAND NAME [--json]``, parsed (``command``: one of
    :data:`_LEAN`)."""

    home: Path | None
    db_url: str | None
    debug: bool
    command: tuple[str, ...]
    name: str
    as_json: bool


def lean_argv(argv: Sequence[str]) -> Lean | None:
    """``argv`` (without the program) as a plain ``labels NAME [--json]`` or ``hosts show
    NAME [--json]`` command line, or None for anything else (Typer parses it)."""
    given: dict[str, str] = {}
    debug = False
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        word = argv[i]
        option, eq, value = word.partition("=")
        if word == "--debug":
            debug, i = True, i + 1
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
    if len(rest) != 1 or rest[0].startswith("-") or words.count("--json") > 1:
        return None
    home = given.get("--home")
    return Lean(
        home=Path(home) if home is not None else None,
        db_url=given.get("--db"),
        debug=debug,
        command=command,
        name=rest[0],
        as_json=as_json,
    )


def _lean(argv: Sequence[str]) -> bool:
    """True when the command line was answered without Typer."""
    parsed = lean_argv(argv)
    if parsed is None:
        return False
    from gpufleet.cli.common import OPTIONS

    OPTIONS.home, OPTIONS.db_url, OPTIONS.debug = parsed.home, parsed.db_url, parsed.debug
    OPTIONS.settings = None
    if parsed.command == ("labels",):
        from gpufleet.cli.labels import lean_labels

        done = lean_labels(parsed.name, as_json=parsed.as_json)
    else:
        from gpufleet.cli.hosts_show import lean_hosts_show

        done = lean_hosts_show(parsed.name, as_json=parsed.as_json)
    OPTIONS.settings = None  # if declined, the command loads (and reports) them again
    return done


def main() -> None:
    """Run ``gpufleet`` with ``sys.argv``."""
    # gpufleet uses no pydantic plugins: skip pydantic's scan of every installed package's
    # entry points for them (~10 ms of each start). Set PYDANTIC_DISABLE_PLUGINS to the empty
    # string to have pydantic load installed plugins anyway.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    try:
        if _lean(sys.argv[1:]):
            sys.stdout.flush()
            return
    except KeyboardInterrupt:
        sys.exit(130)  # as the Typer application exits on ^C
    except BrokenPipeError:  # the reader went away (| head): exit 1 quietly, as Typer does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    from gpufleet.cli.main import app

    app()
