"""The design, enforced. The import rules are import-linter contracts in pyproject.toml
(``[tool.importlinter]``; ``make test`` and ``make lint`` run ``lint-imports``). This file holds
what those contracts cannot show: that they pass here and do break on a violation, and that no
import at run time (entry points, lazy imports) pulls the lab into the product.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import typer

from gpufleet.collect.transport import TransportPlugin

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = str(Path(sys.executable).parent / "lint-imports")
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def _lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "300"}  # one contract per line
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )


def test_import_contracts_hold() -> None:
    r = _lint_imports(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"Contracts: {len(CONTRACTS['contracts'])} kept, 0 broken" in r.stdout


#: One deliberate violation per contract: (file under src/gpufleet, line appended, contract).
VIOLATIONS = [
    ("domain/spec.py", "import gpufleet.service.core.fleet", "Layers:"),
    ("collect/ib.py", "import gpufleet.lab.fleet", "The product never imports the lab"),
    ("domain/xid.py", "import subprocess", "The domain is pure"),
    ("vendors/nvidia.py", "import subprocess", "Vendor plugins are pure"),
    ("collect/pci.py", "import sqlalchemy", "Collection (transports, parsers)"),
    ("store/db.py", "import rich", "Only the CLI (and lab plugin)"),
    ("lab/captures.py", "import gpufleet.service.core.fleet", "The lab's simulator"),
    ("api/routes/hosts.py", "import sqlalchemy", "The API edge holds no logic"),
    ("service/hosts/labels.py", "import gpufleet.service.allocation.leases", "Service contexts:"),
]


def test_every_contract_breaks_on_a_violation(tmp_path: Path) -> None:
    assert len(VIOLATIONS) == len(CONTRACTS["contracts"])
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "gpufleet", src / "gpufleet", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for rel, line, _ in VIOLATIONS:
        with (src / "gpufleet" / rel).open("a") as f:
            f.write(f"\n{line}  # injected by test_architecture\n")
    r = _lint_imports(tmp_path, pythonpath=src)
    assert r.returncode != 0
    broken = [ln for ln in r.stdout.splitlines() if ln.endswith("BROKEN")]
    for _, _, contract in VIOLATIONS:
        assert any(ln.startswith(contract) for ln in broken), (contract, r.stdout)


PRODUCT = [
    "gpufleet.cli.main", "gpufleet.service.hosts.collect", "gpufleet.service.hosts.evidence",
    "gpufleet.collect.transport", "gpufleet.store.db", "gpufleet.domain.checks",
]


def test_importing_the_product_loads_no_lab_code() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in PRODUCT)
        + "from gpufleet.collect.transport import known_transports\n"
        "before = sorted(m for m in sys.modules if m.startswith(('gpufleet.lab', 'tests')))\n"
        "print(before)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_lab_plugs_in_only_through_its_entry_points() -> None:
    """What pyproject declares is what the installed metadata offers, and each one loads."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert declared["gpufleet.transports"] == {"sim": "gpufleet.lab.transport:SIM"}
    assert declared["gpufleet.cli"] == {"lab": "gpufleet.lab.cli:app"}
    for group, kind in (("gpufleet.transports", TransportPlugin), ("gpufleet.cli", typer.Typer)):
        installed = {ep.name: ep.value for ep in entry_points(group=group)}
        assert installed == declared[group], (
            f"installed entry points of {group} are stale: run `pip install -e .` (make env)"
        )
        for ep in entry_points(group=group):
            assert isinstance(ep.load(), kind)


def test_no_product_module_imports_the_lab_by_string() -> None:
    """``importlib.import_module("gpufleet.lab...")`` would slip past import-linter."""
    src = ROOT / "src" / "gpufleet"
    product = [p for p in sorted(src.rglob("*.py")) if p.relative_to(src).parts[0] != "lab"]
    assert len(product) > 50
    bad = [str(p.relative_to(src)) for p in product
           if "gpufleet.lab" in p.read_text() and "import_module" in p.read_text()]
    assert bad == []


#: The bounded contexts of service/ (issue 25), bottom first, as the layers contract orders them.
CONTEXTS = ["core", "hosts", "allocation", "health", "views", "exports", "campaigns", "background"]


def _service_graph() -> dict[str, set[str]]:
    import grimp

    graph = grimp.build_graph("gpufleet", cache_dir=None)
    mods = {m for m in graph.modules if m.startswith("gpufleet.service.")}
    return {m: graph.find_modules_directly_imported_by(m) & mods for m in mods}


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_inside_service() -> None:
    edges = _service_graph()
    assert _circles(edges) == []
    # the check finds one when there is one
    edges["gpufleet.service.core.fleet"] = {"gpufleet.service.core.lifecycle"}
    edges["gpufleet.service.core.lifecycle"] = {"gpufleet.service.core.fleet"}
    assert _circles(edges) == [["gpufleet.service.core.fleet", "gpufleet.service.core.lifecycle"]]


def test_every_service_module_lives_in_a_context() -> None:
    service = ROOT / "src" / "gpufleet" / "service"
    flat = sorted(p.name for p in service.glob("*.py") if p.name != "__init__.py")
    assert flat == [], f"service modules outside a context: {flat}"
    assert sorted(p.name for p in service.iterdir() if p.is_dir() and p.name != "__pycache__") == (
        sorted(CONTEXTS)
    )
    layers = next(c for c in CONTRACTS["contracts"] if c.get("containers") == ["gpufleet.service"])
    assert layers["layers"] == list(reversed(CONTEXTS))


def test_no_module_over_600_lines() -> None:
    """Issue 25: smaller pieces. A module that grows past 600 lines is split by concern."""
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "src" / "gpufleet").rglob("*.py")
        if "migrations" not in p.parts and (n := len(p.read_text().splitlines())) > 600
    }
    assert long == {}
