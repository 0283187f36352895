"""The layering of DEVELOPERS.md, enforced: domain is pure, parsers never touch the database,
and nothing below an edge imports the edges."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "gpufleet"

#: package -> gpufleet packages (and third-party roots) it must not import
FORBIDDEN = {
    "domain": {"gpufleet.collect", "gpufleet.store", "gpufleet.service", "gpufleet.cli",
               "gpufleet.api", "gpufleet.web", "gpufleet.export", "gpufleet.lab",
               "sqlalchemy", "asyncssh", "typer", "rich", "fastapi", "subprocess", "socket"},
    "collect": {"gpufleet.store", "gpufleet.service", "gpufleet.cli", "gpufleet.api",
                "gpufleet.web", "gpufleet.export", "sqlalchemy", "typer", "rich"},
    "store": {"gpufleet.service", "gpufleet.cli", "gpufleet.api", "gpufleet.web",
              "gpufleet.collect", "asyncssh", "typer", "rich"},
    "service": {"gpufleet.cli", "gpufleet.api", "gpufleet.web", "typer", "rich"},
    "lab": {"gpufleet.store", "gpufleet.service", "gpufleet.cli", "sqlalchemy"},
}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_layering(package: str) -> None:
    files = sorted((SRC / package).rglob("*.py"))
    assert files, package
    bad = []
    for f in files:
        if "migrations" in f.parts:
            continue
        for name in imports(f):
            if any(name == x or name.startswith(x + ".") for x in FORBIDDEN[package]):
                bad.append(f"{f.relative_to(SRC)} imports {name}")
    assert bad == []
