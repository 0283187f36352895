"""Faithful output (issue 7 item 10) through the ``gpufleet`` CLI, on SQLite and PostgreSQL:
selectors on every command that takes hosts, exit 4 for a selection matching nothing, unknown
states refused, ``%``/``_`` literal, ``pool baseline`` refusing unknown pools, the validate
exit rule for hosts in maintenance, ``lab change --add-fault xid:N`` at the lab's "now",
identifiers never cut in ``hosts show`` at 80 and 60 columns (hidden columns said),
``--help`` readable at 80 columns, tables without Python reprs, one timestamp format.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.clitools import Cli, cli_for_backend, flat
from typer.main import get_command
from typer.testing import CliRunner

from gpufleet.cli.main import COMMANDS, app

ACTOR = "cli-output-test"
POOL = "train-h100"
DCGM = Path(__file__).resolve().parents[2] / "examples" / "dcgm.json"
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?[+-]\d\d:\d\d$")


class Gf(Cli):
    @property
    def lab(self) -> Path:
        return self.tmp / "lab"

    def build_lab(self, hosts: int = 4) -> None:
        """lab create (no faults) -> enroll -> collect -> baseline from gpu-01 for the pool."""
        self.run("lab", "create", "--hosts", str(hosts), "--model", "h100-8x",
                 "--dir", str(self.lab))
        self.run("enroll", "-i", str(self.lab / "inventory.ini"))
        self.run("collect")
        self.run("baseline", "create", "h100-lab", "--from-host", "gpu-01", "--pool", POOL)


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Gf]:
    c = cli_for_backend(request, tmp_path, ACTOR)
    g = Gf(c.global_args, c.tmp, c.env)
    g.build_lab()
    yield g


def test_selectors_on_every_command_and_exit_4(gf: Gf) -> None:
    # A selection that matches nothing exits 4 on every command that takes hosts.
    nothing = "gpu-9*"
    for argv in (
        ("hosts", "list", nothing),
        ("summary", nothing),
        ("labels", nothing),
        ("drift", nothing),
        ("collect", nothing),
        ("validate", nothing),
        ("maintenance", "on", nothing, "--reason", "x"),
        ("maintenance", "off", nothing),
        ("retire", nothing),
        ("unquarantine", nothing, "--reason", "x"),
        ("change", "record", nothing, "--kind", "driver-upgrade"),
        ("evidence", "add", nothing, str(DCGM), "--kind", "dcgm"),
        ("evidence", "run", nothing, "--kind", "dcgm"),
        ("hosts", "list", "rack:r99"),
        ("hosts", "list", "--state", "quarantined"),
    ):
        r = gf.run(*argv, code=4)
        assert "match" in flat(r.stderr) or "no host" in flat(r.stderr), (argv, r.stderr)

    # Unknown state names: exit 2, the valid states listed.
    for argv in (("hosts", "list", "state:bogus"), ("hosts", "list", "--state", "bogus"),
                 ("maintenance", "on", "state:bogus", "--reason", "x")):
        err = flat(gf.run(*argv, code=2).stderr)
        assert "bogus" in err and "available" in err and "maintenance" in err, (argv, err)

    # rack:R is a selector (the lab puts gpu-01..04 in rack r01).
    assert [h["name"] for h in gf.json("hosts", "list", "rack:r01")] == [
        "gpu-01", "gpu-02", "gpu-03", "gpu-04"]

    # % and _ are literal, not SQL wildcards.
    assert len(gf.json("hosts", "list", "model:H100 80GB")) == 4
    gf.run("hosts", "list", "model:H100_80GB", code=4)
    gf.run("hosts", "list", "--model", "%", code=4)
    gf.run("hosts", "list", "group:gpu%", code=4)
    assert len(gf.json("hosts", "list", "group:gpu_h100")) == 4
    gf.run("hosts", "list", "--group", "gpu_h10_", code=4)

    # maintenance on/off, retire, change record take selectors; one line per host.
    out = gf.run("maintenance", "on", "gpu-01,gpu-02", "--reason", "PDU work").stdout
    assert flat(out) == "gpu-01: maintenance gpu-02: maintenance"
    out = gf.run("maintenance", "off", "state:maintenance").stdout
    assert flat(out) == "gpu-01: validating gpu-02: validating"
    out = gf.run("change", "record", "gpu-03,gpu-04", "--kind", "reimage",
                 "--ticket", "T-1").stdout
    assert "gpu-03: enrolled" in out and "gpu-04: enrolled" in out  # never validated yet
    assert "gpufleet hosts rekey" in flat(out)  # the reimage says how to accept the new key
    gf.run("evidence", "add", "rack:r01", str(DCGM), "--kind", "dcgm")
    kinds = [e["kind"] for e in gf.json("events", "gpu-04", "--kind", "evidence")]
    assert kinds == ["evidence"]
    # A refusal on one host does not stop the others; the exit code is the refusal's.
    gf.run("maintenance", "on", "gpu-01", "--reason", "x")
    # (the whole 4-host fleet: more than GPUFLEET_CONFIRM_SHARE, confirmed with --all)
    r = gf.run("unquarantine", "gpu-0*", "--reason", "fixed", "--all", code=5)
    assert "gpu-01" in flat(r.stderr)
    gf.run("retire", "gpu-03,gpu-04", "--reason", "eol")
    assert gf.state("gpu-03") == gf.state("gpu-04") == "retired"

    # pool baseline: an unknown pool is refused unless --create.
    err = flat(gf.run("pool", "baseline", "trian-h100", "h100-lab", code=4).stderr)
    assert "trian-h100" in err and POOL in err and "--create" in err
    gf.run("pool", "baseline", POOL, "h100-lab")
    gf.run("pool", "baseline", "new-pool", "h100-lab", "--create")
    assert {p["name"] for p in gf.json("pool", "list")} >= {POOL, "new-pool"}


def test_validate_exit_rule_and_lab_xid_now(gf: Gf) -> None:
    assert gf.run("validate").exit_code == 0
    gf.run("maintenance", "on", "gpu-02", "--reason", "PSU swap")
    verdicts = {v["host"]: v for v in gf.json("validate", code=0)}  # maintenance alone: 0
    assert verdicts["gpu-02"]["skipped"] and verdicts["gpu-02"]["state"] == "maintenance"
    assert "maintenance" in flat(gf.run("validate", "--help").stdout)  # the rule is documented

    # lab change --add-fault xid:79 injects the Xid now: the next validation acts on it.
    gf.run("lab", "change", "gpu-03", "--add-fault", "xid:79", "--dir", str(gf.lab))
    gf.run("validate", code=1)
    rows = {h["name"]: h for h in gf.json("hosts", "list")}
    assert rows["gpu-03"]["state"] == "quarantined", rows["gpu-03"]
    assert rows["gpu-01"]["state"] == "available"


def test_tables_and_timestamps(gf: Gf) -> None:
    # JSON: ISO 8601 with zone.
    rows = gf.json("hosts", "list")
    assert all(ISO.match(r["last_collected_at"]) for r in rows), rows[0]["last_collected_at"]
    events = gf.json("events", "--limit", "5")
    assert events and all(ISO.match(e["at"]) for e in events)
    # Tables: values, never reprs or None.
    for argv in (("baseline", "show", "h100-lab"), ("baseline", "list"), ("hosts", "list"),
                 ("hosts", "show", "gpu-01"), ("events",), ("pool", "list")):
        out = gf.run(*argv).stdout
        assert "None" not in out and "['" not in out and "{'" not in out, (argv, out)
    shown = flat(gf.run("baseline", "show", "h100-lab").stdout)
    vbios = gf.json("baseline", "show", "h100-lab")["vbios"]
    assert ", ".join(vbios) in shown


@pytest.mark.parametrize("columns", [80, 60])
def test_hosts_show_never_cuts_an_identifier(tmp_path: Path, columns: int) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "GPUFLEET_HOME": str(home), "COLUMNS": str(columns),
           "GPUFLEET_ACTOR": ACTOR}
    env.pop("GPUFLEET_DATABASE_URL", None)
    gf = [sys.executable, "-m", "gpufleet.cli.main"]

    def run(*argv: str) -> str:
        return subprocess.run([*gf, *argv], env=env, check=True, capture_output=True,
                              text=True).stdout

    def setup(*argv: str) -> None:
        """The same commands in this process: only the home they leave matters here (the
        width under test is that of ``hosts show`` in a process of its own, below)."""
        r = CliRunner().invoke(app, list(argv), env={
            "GPUFLEET_DATABASE_URL": None, "GPUFLEET_HOME": str(home), "GPUFLEET_ACTOR": ACTOR})
        assert r.exit_code == 0 and r.exception is None, (argv, r.output, r.exception)

    setup("lab", "create", "--hosts", "1", "--model", "h100-8x", "--dir", str(tmp_path / "lab"))
    setup("enroll", "-i", str(tmp_path / "lab" / "inventory.ini"))
    setup("collect")
    import json

    gpus = json.loads(run("hosts", "show", "gpu-01", "--json"))["facts"]["nvidia_smi"]["gpus"]
    out = run("hosts", "show", "gpu-01")
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= columns
    # every identifier shown is whole on one line (never folded); a column that does not
    # fit is hidden, and one line says so
    notes = re.findall(r"\d columns? hidden \(([^)]*)\): --wide shows them", " ".join(out.split()))
    hidden = {h for note in notes for h in note.split(", ")}
    assert len(gpus) == 8
    for key, col in (("uuid", "UUID"), ("serial", "serial"), ("pci_bus_id", "bus"),
                     ("vbios_version", "VBIOS")):
        for g in gpus:
            assert col in hidden or any(g[key] in ln for ln in lines), (col, g[key], out)
    assert "UUID" not in hidden
    if columns == 60:
        assert {"serial", "bus", "VBIOS"} <= hidden, out
    wide = run("hosts", "show", "gpu-01", "--wide").splitlines()
    for g in gpus:
        for key in ("uuid", "serial", "pci_bus_id", "vbios_version"):
            assert any(g[key] in ln for ln in wide), (key, g[key])


def test_help_is_readable_at_80_columns() -> None:
    runner = CliRunner()

    def walk(cmd: Any, path: list[str]) -> Iterator[list[str]]:
        yield path
        if hasattr(cmd, "list_commands"):  # a group (the top one loads its modules lazily)
            ctx = cmd.context_class(cmd, info_name="gpufleet")
            for name in cmd.list_commands(ctx):
                yield from walk(cmd.get_command(ctx, name), [*path, name])

    paths = list(walk(get_command(app), []))
    assert len(paths) > 25
    for path in paths:
        r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
        assert r.exit_code == 0, path
        for line in r.output.splitlines():
            assert len(line) <= 80, (path, line)
            assert "…" not in line, (path, line)  # a flag or value cut short
            assert "--no-no" not in line, (path, line)


def test_the_lazy_command_table_matches_the_commands() -> None:
    """``gpufleet --help`` lists COMMANDS without importing the command modules: each entry's
    one-line help is the start of the loaded command's own help, and every command is listed."""
    root: Any = get_command(app)
    ctx = root.context_class(root, info_name="gpufleet")
    for name, (_, one_line) in COMMANDS.items():
        cmd = root.get_command(ctx, name)
        assert cmd is not None and cmd.name == name, name
        own = " ".join((cmd.short_help or cmd.help or "").split())
        assert own.startswith(" ".join(one_line.split())), (name, one_line, own)
    r = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"}, terminal_width=80)
    listed = {line.split()[0] for line in r.output.split("Commands:")[1].splitlines() if
              line.startswith("  ") and not line.startswith("    ")}
    assert listed == {*COMMANDS, "lab"}


def test_help_imports_no_command_module_nor_the_store() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['gpufleet', '--help']\n"
        "from gpufleet.cli.main import app\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "print('LOADED', *sorted(m for m in sys.modules if m.startswith(('sqlalchemy', 'rich', "
        "'pydantic', 'gpufleet.cli.', 'gpufleet.service', 'gpufleet.store', 'gpufleet.lab'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "hosts" in out.stdout  # the help was printed
    loaded = out.stdout.rsplit("LOADED", 1)[1].split()
    # help_i18n: the help's language (it imports gpufleet.i18n only)
    assert loaded == [
        "gpufleet.cli.entry", "gpufleet.cli.help_i18n", "gpufleet.cli.main", "gpufleet.cli.plugins"
    ], loaded
