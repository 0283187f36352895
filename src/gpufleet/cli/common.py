"""Shared CLI plumbing: the fleet from global options, JSON output, one error boundary."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

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


def open_fleet() -> Fleet:
    """The fleet selected by the global options / environment."""
    return Fleet.open(home=OPTIONS.home, url=OPTIONS.db_url)


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

    return wrapper
