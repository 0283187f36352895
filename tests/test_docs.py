"""The documentation is complete and names only things that exist.

* ``docs/reference.md`` documents every CLI command (the Click tree of the ``gpufleet`` app,
  plugin groups such as ``lab`` included), every ``GPUFLEET_*`` setting, every host state,
  every audit-log event kind, every exit code an error class uses and every JSON error code
  (and the lifecycle events, health, faults, collection outcomes, evidence and alarm kinds).
* No doc (README, docs, bench README) and no comment or docstring in ``src``, ``tests`` or
  ``bench`` names a repository file or a ``gpufleet.*`` module (or attribute) that does not
  exist, and every backticked ``gpufleet ...`` command line in them resolves to a real
  command with real options.

Each failure names the missing item, or the file:line of the dangling reference.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import io
import re
import shlex
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer

from gpufleet import errors
from gpufleet.cli.main import app
from gpufleet.config import NOT_SETTINGS
from gpufleet.config_doc import settings_doc
from gpufleet.domain.events import (
    AlarmKind,
    AlarmSeverity,
    CollectionOutcome,
    EventKind,
    EvidenceKind,
)
from gpufleet.domain.health import Fault, Health
from gpufleet.domain.states import Event, HostState

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "gpufleet"
REFERENCE = ROOT / "docs" / "reference.md"

#: Options of the top-level ``gpufleet`` callback that take a value.
GLOBAL_VALUE_OPTIONS = frozenset({"--home", "--db"})


def doc_files() -> list[Path]:
    """The prose documentation: README, every docs/*.md, the bench README."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]


def python_files() -> list[Path]:
    """Every Python file of the product, the tests and the benchmarks."""
    out: list[Path] = []
    for top in ("src", "tests", "bench"):
        out.extend(
            p
            for p in sorted((ROOT / top).rglob("*.py"))
            if ".venv" not in p.parts and "__pycache__" not in p.parts
        )
    return out


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# -- the command tree -------------------------------------------------------------------------


def root_command() -> Any:
    return typer.main.get_command(app)


def _is_group(cmd: Any) -> bool:
    return hasattr(cmd, "list_commands")


def _subcommand(group: Any, name: str) -> Any:
    ctx = group.context_class(group, info_name="gpufleet")
    return group.get_command(ctx, name)


def command_tree() -> dict[tuple[str, ...], Any]:
    """Every command path (groups included) -> its Click command, plugin groups loaded."""
    out: dict[tuple[str, ...], Any] = {}

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        if path:
            out[path] = cmd
        if _is_group(cmd):
            ctx = cmd.context_class(cmd, info_name=path[-1] if path else "gpufleet")
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, f"gpufleet {' '.join((*path, name))}: listed, not loadable"
                if not getattr(sub, "hidden", False):
                    walk(sub, (*path, name))

    walk(root_command(), ())
    return out


def _option_names(cmd: Any) -> set[str]:
    names: set[str] = {"--help"}
    for param in cmd.params:
        names.update(getattr(param, "opts", ()))
        names.update(getattr(param, "secondary_opts", ()))
    return names


def resolve_command(words: list[str]) -> tuple[tuple[str, ...], str | None]:
    """The command path a ``gpufleet WORDS...`` line names, and why it does not resolve.

    Global options come first; then names descend the Click tree; options after a command must
    be options of that command. Placeholders (``...``, ``COMMAND``, ``<x>``) end the check.
    """
    cmd = root_command()
    path: tuple[str, ...] = ()
    global_opts = _option_names(cmd)
    i = 0
    while i < len(words) and words[i].startswith("-"):
        flag = words[i].split("=", 1)[0]
        if flag not in global_opts:
            return path, f"unknown global option {flag}"
        i += 2 if flag in GLOBAL_VALUE_OPTIONS and "=" not in words[i] else 1
    while i < len(words):
        word = words[i]
        if _is_placeholder(word):
            return path, None
        if word.startswith("-"):
            break
        if not _is_group(cmd):
            break  # an argument of the command
        if "/" in word and all(_subcommand(cmd, alt) for alt in word.split("/")):
            return (*path, word.split("/")[0]), None  # `evidence add/run`: each one exists
        sub = _subcommand(cmd, word)
        if sub is None:
            where = f"gpufleet {' '.join(path)}".strip()
            return path, f"'{word}' is not a command of `{where}`"
        cmd, path = sub, (*path, word)
        i += 1
    if not path:
        return path, None
    own = _option_names(cmd)
    for word in words[i:]:
        if _is_placeholder(word):
            break
        if word.startswith("--"):
            flag = word.split("=", 1)[0]
            if flag not in own:
                return path, f"`gpufleet {' '.join(path)}` has no option {flag}"
    return path, None


def _is_placeholder(word: str) -> bool:
    return (
        word.startswith(("...", "<", "[", "{"))
        or word.endswith("...")
        or (word.isupper() and word.isalpha())
    )


# -- spans that name commands and files -------------------------------------------------------


@dataclass(frozen=True)
class Ref:
    """A piece of text at file:line."""

    file: str
    line: int
    text: str

    def where(self) -> str:
        return f"{self.file}:{self.line}"


_BACKTICKED = re.compile(r"``?([^`\n]+?)``?")
_FENCE = re.compile(r"^\s*```")


def doc_texts() -> Iterator[Ref]:
    """Every line of the prose docs."""
    for path in doc_files():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            yield Ref(rel(path), n, line)


def comment_and_docstring_texts() -> Iterator[Ref]:
    """Every line of every comment and docstring in the Python files, at its own line."""
    for path in python_files():
        source = path.read_text(encoding="utf-8")
        docstrings: set[tuple[int, int]] = set()
        # a string statement: module, class and function docstrings and attribute docstrings
        for node in ast.walk(ast.parse(source)):
            if (
                isinstance(node, ast.Expr)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                docstrings.add((node.value.lineno, node.value.col_offset))
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT or (
                tok.type == tokenize.STRING and tok.start in docstrings
            ):
                for k, line in enumerate(tok.string.splitlines()):
                    yield Ref(rel(path), tok.start[0] + k, line)


def command_lines(ref: Ref, in_code_block: bool) -> Iterator[str]:
    """The ``gpufleet ...`` command lines in one line of text."""
    spans = [m.group(1) for m in _BACKTICKED.finditer(ref.text)]
    if in_code_block:
        spans.append(ref.text.split("  #", 1)[0])
    for span in spans:
        for part in re.split(r";|&&|\|\||\|", span):
            part = part.strip().removeprefix("$ ").strip()
            if part.startswith("gpufleet ") or part == "gpufleet":
                yield part


def command_refs() -> Iterator[tuple[Ref, str]]:
    """(where, command line) for every backticked or code-block ``gpufleet`` command."""
    fenced = False
    last_file = ""
    for ref in doc_texts():
        if ref.file != last_file:
            fenced, last_file = False, ref.file
        if _FENCE.match(ref.text):
            fenced = not fenced
            continue
        for line in command_lines(ref, fenced):
            yield ref, line
    for ref in comment_and_docstring_texts():
        for line in command_lines(ref, False):
            yield ref, line


#: Things that look like a file of this repository. Package-relative paths
#: (``service/hosts/collect.py``) are resolved under the package directory.
_PACKAGE_DIRS = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__")
_REPO_PATH = re.compile(
    r"(?<![\w./~-])"
    r"((?:src|tests|docs|bench)/[\w./-]*\w"
    r"|(?:gpufleet|" + "|".join(_PACKAGE_DIRS) + r")/[\w/.-]*\.(?:py|md|yaml|yml|toml|json|ini))"
    r"(?![\w*<])"
)


def path_refs() -> Iterator[tuple[Ref, str]]:
    for ref in (*doc_texts(), *comment_and_docstring_texts()):
        for m in _REPO_PATH.finditer(ref.text):
            yield ref, m.group(1).rstrip(".")


#: Folders the tests or tools write and git ignores (``.gitignore`` lines naming a folder,
#: like the browser tests' screenshots): naming them is not a dangling reference.
_GENERATED_DIRS = tuple(
    line.strip().strip("/")
    for line in (ROOT / ".gitignore").read_text().splitlines()
    if line.strip().endswith("/") and not line.startswith("#") and "*" not in line
)


def path_exists(name: str) -> bool:
    if any(name == d or name.startswith(d + "/") for d in _GENERATED_DIRS):
        return True
    first = name.split("/", 1)[0]
    if first in ("src", "tests", "docs", "bench"):
        return (ROOT / name).exists()
    if first == "gpufleet":
        return (ROOT / "src" / name).exists()
    return (PACKAGE / name).exists()


#: Dotted ``gpufleet`` names that are not modules: what they are.
NOT_MODULES = {
    "gpufleet.io": "the Kubernetes label prefix (gpufleet.io/...)",
    "gpufleet.transports": "an entry point group",
}
_DOTTED = re.compile(r"(?<![\w./-])(gpufleet(?:\.[A-Za-z_]\w*)+)")


def dotted_refs() -> Iterator[tuple[Ref, str]]:
    """Every dotted ``gpufleet`` module (or module attribute) named in docs and comments."""
    for ref in (*doc_texts(), *comment_and_docstring_texts()):
        for m in _DOTTED.finditer(ref.text):
            if m.group(1) not in NOT_MODULES:
                yield ref, m.group(1)


def why_not_importable(name: str) -> str | None:
    """None when ``name`` is a module, or a module's attribute (path); else what is missing."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        module = ".".join(parts[:k])
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if found:
            obj: object = importlib.import_module(module)
            for i, attr in enumerate(parts[k:], k):
                if not hasattr(obj, attr):
                    return f"{'.'.join(parts[:i])} has no {attr}"
                obj = getattr(obj, attr)
            return None
    return "no such module"


# -- the reference ----------------------------------------------------------------------------


def reference_text() -> str:
    assert REFERENCE.is_file(), f"{rel(REFERENCE)} is missing"
    return REFERENCE.read_text(encoding="utf-8")


def reference_commands() -> set[tuple[str, ...]]:
    """The command paths docs/reference.md names in backticks."""
    out: set[tuple[str, ...]] = set()
    for n, line in enumerate(reference_text().splitlines(), 1):
        for cmdline in command_lines(Ref(rel(REFERENCE), n, line), False):
            path, _ = resolve_command(shlex.split(cmdline, posix=True)[1:])
            out.add(path)
    return out


def every_error_class() -> list[type[errors.GpufleetError]]:
    found: list[type[errors.GpufleetError]] = []
    todo: list[type[errors.GpufleetError]] = [errors.GpufleetError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_the_command_tree_includes_the_plugin_groups() -> None:
    tree = command_tree()
    # the lab is a plugin (entry point); walking the tree must load it, or (a) proves nothing
    assert ("lab", "demo") in tree
    assert ("hosts", "list") in tree and ("db", "upgrade") in tree


def test_every_command_is_in_the_reference() -> None:
    documented = reference_commands()
    missing = [f"`gpufleet {' '.join(path)}`" for path in command_tree() if path not in documented]
    assert not missing, f"{rel(REFERENCE)} does not document: " + ", ".join(missing)


def test_every_setting_state_event_kind_and_exit_code_is_in_the_reference() -> None:
    text = reference_text()
    missing: list[str] = []
    for s in settings_doc():
        if not re.search(rf"`{s.env}`", text):
            missing.append(f"setting {s.env}")
    for state in HostState:
        if f"`{state.value}`" not in text:
            missing.append(f"host state {state.value}")
    for kind in EventKind:
        if f"`{kind.value}`" not in text:
            missing.append(f"event kind {kind.value}")
    # the rest of what an operator reads in tables and JSON
    for enum in (Event, Health, Fault, CollectionOutcome, EvidenceKind, AlarmKind, AlarmSeverity):
        for member in enum:
            if f"`{member.value}`" not in text:
                missing.append(f"{enum.__name__} value {member.value}")
    classes = every_error_class()
    for code in sorted({0, 1} | {cls.exit_code for cls in classes}):
        if not re.search(rf"^\| {code} \|", text, re.MULTILINE):
            missing.append(f"exit code {code} (a table row '| {code} | ...')")
    for cls in classes:
        if f"`{cls.code}`" not in text:
            missing.append(f"JSON error code {cls.code} ({cls.__name__})")
    assert not missing, f"{rel(REFERENCE)} does not document: " + "; ".join(missing)


def test_the_reference_names_no_unknown_setting() -> None:
    known = {s.env for s in settings_doc()} | set(NOT_SETTINGS)
    bad = [
        f"{rel(REFERENCE)}:{n}: {name}"
        for n, line in enumerate(reference_text().splitlines(), 1)
        for name in re.findall(r"\bGPUFLEET_[A-Z0-9_]*[A-Z0-9]\b", line)
        if name not in known
    ]
    assert not bad, "not a setting: " + "; ".join(bad)


#: Landed migrations are never edited (tests/store/test_migrations_frozen.py): their comments
#: name files as they were when each migration landed, so they are history, not references.
_MIGRATIONS = "src/gpufleet/store/migrations/versions/"


def test_no_doc_or_comment_names_a_missing_file() -> None:
    dangling = [
        f"{ref.where()}: {name}"
        for ref, name in path_refs()
        if not path_exists(name) and not ref.where().startswith(_MIGRATIONS)
    ]
    assert not dangling, "names a file that does not exist:\n" + "\n".join(dangling)


def test_no_doc_or_comment_names_a_missing_command() -> None:
    dangling: list[str] = []
    for ref, line in command_refs():
        try:
            words = shlex.split(line, posix=True)[1:]
        except ValueError:
            words = line.split()[1:]
        _, why = resolve_command(words)
        if why is not None:
            dangling.append(f"{ref.where()}: `{line}`: {why}")
    assert not dangling, "names a command that does not exist:\n" + "\n".join(dangling)


def test_no_doc_or_comment_names_a_missing_module() -> None:
    dangling = [
        f"{ref.where()}: {name}: {why}"
        for ref, name in dotted_refs()
        if (why := why_not_importable(name)) is not None
    ]
    assert not dangling, "names a module or attribute that does not exist:\n" + "\n".join(dangling)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("gpufleet.service.core.lifecycle.transition", None),
        ("gpufleet.lab", None),
        ("gpufleet.service.nosuch", "gpufleet.service has no nosuch"),
        ("gpufleet.errors.NotFound.nosuch", "gpufleet.errors.NotFound has no nosuch"),
    ],
)
def test_the_module_check_can_fail(name: str, why: str | None) -> None:
    assert why_not_importable(name) == why


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("gpufleet hosts show gpu-01", None),
        ("gpufleet --home /tmp/x lab demo --hosts 4", None),
        ("gpufleet hosts events gpu-01", "'events' is not a command of `gpufleet hosts`"),
        ("gpufleet nosuch", "'nosuch' is not a command of `gpufleet`"),
        ("gpufleet collect --nosuch", "`gpufleet collect` has no option --nosuch"),
        ("gpufleet --nosuch collect", "unknown global option --nosuch"),
        ("gpufleet evidence add/run KIND", None),
        ("gpufleet evidence add/nosuch", "'add/nosuch' is not a command of `gpufleet evidence`"),
    ],
)
def test_the_command_check_can_fail(line: str, why: str | None) -> None:
    assert resolve_command(shlex.split(line)[1:])[1] == why


@pytest.mark.parametrize(
    ("text", "found"),
    [
        (
            "see `src/gpufleet/nosuch.py` and docs/nosuch.md",
            ["src/gpufleet/nosuch.py", "docs/nosuch.md"],
        ),
        ("the table in service/nosuch.py.", ["service/nosuch.py"]),
        ("/work/shared/docs/x.md and ~/.local/share/gpufleet/lab/inventory.ini", []),
    ],
)
def test_the_path_check_sees_paths(text: str, found: list[str]) -> None:
    names = [m.group(1).rstrip(".") for m in _REPO_PATH.finditer(text)]
    assert names == found
    assert not any(path_exists(n) for n in names)
