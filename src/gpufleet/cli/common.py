"""Shared CLI plumbing: the fleet from global options, JSON output, one error boundary."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gpufleet.errors import GpufleetError
from gpufleet.service.fleet import Fleet

console = Console()
err_console = Console(stderr=True)

P = ParamSpec("P")
R = TypeVar("R")


@dataclass
class GlobalOptions:
    """Options given before the command (``gpufleet --home DIR hosts list``)."""

    home: Path | None = None
    db_url: str | None = None
    debug: bool = False


OPTIONS = GlobalOptions()


_OPEN: dict[tuple[Path | None, str | None], Fleet] = {}


def open_fleet() -> Fleet:
    """The fleet selected by the global options / environment (one per process and target)."""
    key = (OPTIONS.home, OPTIONS.db_url)
    if key not in _OPEN:
        _OPEN[key] = Fleet.open(home=OPTIONS.home, url=OPTIONS.db_url)
    return _OPEN[key]


def close_fleets() -> None:
    """Release every database connection this process opened."""
    while _OPEN:
        _OPEN.popitem()[1].db.dispose()


def print_json(data: Any) -> None:
    """Machine-readable output on stdout (stable keys, ISO timestamps)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def boundary(fn: Callable[P, R]) -> Callable[P, R]:
    """The CLI's one error boundary: gpufleet errors print a message and exit with their code."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except GpufleetError as exc:
            if OPTIONS.debug:
                err_console.print_exception()
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}")
            raise typer.Exit(exc.exit_code) from None
        finally:
            close_fleets()

    return wrapper


@dataclass
class HostProgress:
    """Callbacks a collection reports through: total once, then one call per host."""

    on_start: Callable[[int], None]
    on_result: Callable[[Any], None]


@contextmanager
def host_progress(label: str, *, quiet: bool) -> Iterator[HostProgress]:
    """A progress bar over hosts (hidden with ``quiet``, e.g. under ``--json``)."""
    progress = Progress(
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=quiet,
    )
    with progress:
        task = progress.add_task(label, total=None, last="")
        yield HostProgress(
            on_start=lambda n: progress.update(task, total=n),
            on_result=lambda r: progress.update(
                task, advance=1, last=f"{r.host}: {r.outcome.value}"
            ),
        )
