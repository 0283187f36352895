"""Terminal tables never cut an identifier (issue 29 item 2), on SQLite and PostgreSQL.

Every table command is rendered against the demo's lab fleet (32 hosts of six vendors and
models, faults, drift, a lease, alarms, a campaign, a token) at 60, 80 and 120 columns
(``COLUMNS``, which Rich reads), and with ``--wide``. Identifiers (host names, models,
UUIDs, serials, states, pools, baselines, fingerprints, all taken from the commands' JSON)
must never be split across lines: every word of the narrow output must either be a word of
the ``--wide`` output at 400 columns (nothing wraps there) or no piece of an identifier.
When columns are hidden, one line says which and ``--wide`` shows them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.clitools import Cli, cli_for_backend
from typer.testing import CliRunner, Result

from gpufleet.cli.main import app

ACTOR = "tables-test"
WIDTHS = (60, 80, 120)
#: Box-drawing characters (Rich's table borders) separate words as spaces do.
_BOX = re.compile("[\u2500-\u257f]")
_NOTE = re.compile(r"(\d+) columns? hidden \(([^)]*)\): --wide shows them")


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    """The demo's fleet, and a lease, a sweep's alarms, a campaign and a token on it."""
    c = cli_for_backend(request, tmp_path, ACTOR)
    c.run("lab", "demo", "--hosts", "32")
    c.run("allocate", "--gpus", "8", "--model", "A100", "--owner", "alice", "--for", "2h",
          "--purpose", "llama fine-tune, second try")
    c.run("inspect", "run")  # the lab's faults: findings and alarms
    c.run("baseline", "create", "b-next", "--driver", "570.86.15")
    (c.tmp / "up.yml").write_text("- hosts: all\n  gather_facts: false\n  tasks: []\n")
    c.run("campaign", "create", "driver-570", "--target-baseline", "b-next", "--selector",
          "pool:train-a100", "--playbook", str(c.tmp / "up.yml"), "--ticket", "CHG-2041")
    c.run("token", "create", "--name", "ci-capacity-gate", "--role", "viewer")
    yield c


def _words(text: str) -> list[str]:
    return _BOX.sub(" ", text).split()


def _identifiers(gf: Cli) -> set[str]:
    """Every identifier the fleet's JSON holds, as the tables show them (whole words)."""
    found: set[str] = set()

    def add(*values: Any) -> None:
        for v in values:
            if isinstance(v, str) and v:
                found.update(v.split())  # "H100 80GB HBM3": each word is kept whole

    hosts = gf.json("hosts", "list")
    for h in hosts:
        add(h["name"], h["state"], h["pool"], h["gpu_model"], h["fault"], h["driver"])
        d = gf.json("hosts", "show", h["name"])
        smi = (d["facts"] or {}).get("nvidia_smi") or {}
        for g in smi.get("gpus") or []:
            add(g["uuid"], g["serial"], g["pci_bus_id"], g["product_name"])
        for e in d["events"]:
            add((e.get("data") or {}).get("fingerprint"))
    for b in gf.json("baseline", "list"):
        add(b["name"], b["driver"], b["cuda"])
    for p in gf.json("parts", "list"):
        add(p["serial"])
    for a in gf.json("alarms", "list"):
        add(a["kind"], a["severity"])
    add("available", "allocated", "validating", "enrolled", "quarantined", "maintenance")
    return {w for w in found if len(w) >= 4}


def _commands(gf: Cli) -> list[tuple[str, ...]]:
    """Every command that prints a table, with arguments that give it rows."""
    serial = gf.json("parts", "list")[0]["serial"]
    return [
        ("hosts", "list"),
        ("hosts", "show", "gpu-01"),  # GPU identifiers (UUIDs), events (fingerprints)
        ("hosts", "show", "gpu-04"),
        ("hosts", "show", "gpu-31"),  # an Ascend host
        ("events", "--limit", "60"),
        ("summary",),
        ("labels", "gpu-0*"),
        ("drift",),
        ("validate", "gpu-1*"),
        ("collect", "gpu-2*"),
        ("capacity",),
        ("leases", "list"),
        ("leases", "show", "1"),
        ("leases", "expiring", "--within", "24h"),
        ("alarms", "list"),
        ("alarms", "dead-letters"),
        ("baseline", "list"),
        ("baseline", "show", "train-a100-ref"),
        ("baseline", "diff", "train-a100-ref", "train-h100-ref"),
        ("drift",),
        ("pool", "list"),
        ("parts", "list"),
        ("parts", "show", serial),
        ("token", "list"),
        ("campaign", "list"),
        ("inspect", "report"),
        ("inspect", "run", "gpu-0*"),
        ("bmc", "status", "gpu-0*"),
        ("reclaim", "gpu-30"),
    ]


def _render(gf: Cli, argv: tuple[str, ...], columns: int, *, wide: bool = False) -> Result:
    r = CliRunner().invoke(
        app,
        [*gf.global_args, *argv, *(["--wide"] if wide else [])],
        env={**gf.env, "COLUMNS": str(columns)},
    )
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    assert r.exit_code in (0, 1), (argv, r.exit_code, r.stdout, r.stderr)
    return r


def test_every_table_keeps_identifiers_whole_at_60_80_120_columns(gf: Cli) -> None:
    idents = _identifiers(gf)
    assert {"gpu-01", "quarantined", "A100-SXM4-80GB"} <= idents
    assert any(w.startswith("SHA256:") for w in idents)  # fingerprints
    assert any(w.startswith("GPU-") for w in idents)  # UUIDs
    hidden_somewhere = set()
    for argv in _commands(gf):
        wide = _render(gf, argv, 400, wide=True).stdout
        assert not _NOTE.search(wide), (argv, wide)
        whole = set(_words(wide))
        for columns in WIDTHS:
            out = _render(gf, argv, columns).stdout
            assert "\u2026" not in out, (argv, columns, out)  # nothing cropped
            # (a split leaves a piece of 3 or more characters on one side at least)
            for word in _words(_NOTE.sub("", " ".join(out.split()))):
                if word in whole or len(word) < 3 or re.fullmatch(r"[\d:.+-]{,5}", word):
                    continue  # too short to tell (a time's "00:00" is in a PCI address)
                cut = [i for i in idents if word in i and word != i]
                assert not cut, f"{' '.join(argv)} at {columns}: {word!r} cuts {cut[:3]}\n{out}"
            notes = _NOTE.findall(" ".join(out.split()))  # one per table that hid columns
            if not notes:
                continue
            # --wide at the same width shows them (headers as words of its header row)
            shown = " ".join(_render(gf, argv, columns, wide=True).stdout.split())
            for count, names in notes:
                hidden = names.split(", ")
                assert len(hidden) == int(count)
                for head in hidden:  # a header may take two lines ("training-" over "single")
                    for piece in re.split(r"(?<=-)|\s", head):
                        assert piece in shown, (argv, columns, head)
            hidden_somewhere.add(argv[:2])
    # narrow terminals did hide columns, in the tables the issue names
    assert {("hosts", "list"), ("hosts", "show"), ("baseline", "list")} <= hidden_somewhere


def test_hosts_list_at_80_columns_fits_and_says_what_it_hid(gf: Cli) -> None:
    out = _render(gf, ("hosts", "list"), 80).stdout
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= 80
    rows = [ln for ln in lines if re.match(r"\s+gpu-\d\d\s", ln)]
    assert len(rows) == 32  # one line per host (a fault may add one under its state)
    assert len(lines) < 32 * 2 + 10, out  # not 124 lines for 32 hosts
    for host in gf.json("hosts", "list"):
        assert re.search(rf"\b{host['name']}\s+{host['state']}\b", out), host
    narrow = " ".join(_render(gf, ("hosts", "list"), 60).stdout.split())
    assert "hidden (" in narrow and "--wide shows them" in narrow
    assert "train-a100" not in narrow  # the pool is hidden at 60 ...
    assert "train-a100" in _render(gf, ("hosts", "list"), 60, wide=True).stdout  # ... not here


def test_json_is_the_same_at_every_width(gf: Cli) -> None:
    for argv in (("hosts", "list"), ("hosts", "show", "gpu-01"), ("leases", "list")):
        outs = {_render(gf, (*argv, "--json"), w).stdout for w in (60, 400)}
        assert len(outs) == 1, argv
