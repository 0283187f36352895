"""``gpufleet campaign`` through the CLI on both databases (simulated lab hosts): the plan is
shown before anything runs (waves, skipped hosts and why), refusals name what is wrong, and
approve/pause/abort are recorded with who did them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat

from gpufleet.domain.campaign import progress_bar

ACTOR = "cli-campaign-test"
POOL = "train-h100"


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, ACTOR)
    lab = c.tmp / "lab"
    c.run("lab", "create", "--hosts", "8", "--model", "h100-8x", "--dir", str(lab))
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    c.run("validate")
    c.run("baseline", "create", "b-old", "--from-host", "gpu-01", "--pool", POOL)
    c.run("baseline", "create", "b-new", "--driver", "570.86.15")
    (c.tmp / "up.yml").write_text("- hosts: all\n  gather_facts: false\n  tasks: []\n")
    yield c


def test_create_shows_the_plan_and_skipped_hosts_before_anything_runs(gf: Cli) -> None:
    gf.run("maintenance", "on", "gpu-03", "--reason", "RMA 42")
    up = str(gf.tmp / "up.yml")
    args = ["campaign", "create", "c1", "--target-baseline", "b-new", "--selector", "gpu-*",
            "--playbook", up, "--ticket", "BUILD-7", "--waves", "50%,100%"]
    out = flat(gf.run(*args, "--dry-run").stdout)
    assert "canary" in out and "dry run: nothing stored" in out
    assert "gpu-03 in maintenance by someone else: RMA 42: skipped, not taken over" in out
    assert gf.json("campaign", "list") == []

    plan = gf.json(*args)
    assert plan["status"] == "planned" and plan["ticket"] == "BUILD-7"
    waves = [[h["host"] for h in w["hosts"]] for w in plan["waves"]]
    assert len(waves[0]) == 1 and waves[0][0] != "gpu-03"
    assert sorted(h for w in waves for h in w) == [f"gpu-0{i}" for i in range(1, 9) if i != 3]
    assert plan["skipped"] == [{"host": "gpu-03", "reason": "in maintenance by someone else: "
                                "RMA 42: skipped, not taken over"}]
    assert all(h["step"] == "pending" for w in plan["waves"] for h in w["hosts"])
    # Nothing ran: every planned host is still available.
    states = {h["name"]: h["state"] for h in gf.json("hosts", "list")}
    assert states["gpu-01"] == "available" and states["gpu-03"] == "maintenance"

    gf.run(*args, code=2)  # the name is taken
    assert gf.json("campaign", "status", "c1")["waves"] == plan["waves"]


def test_refusals_name_what_is_wrong(gf: Cli) -> None:
    up = str(gf.tmp / "up.yml")
    base = ["campaign", "create", "x", "--selector", "gpu-*", "--ticket", "T-1"]
    r = gf.run(*base, "--target-baseline", "b-new", code=2)
    assert "exactly one of --playbook, --command, --reimage or --mig" in flat(r.stderr + r.stdout)
    r = gf.run(*base, "--target-baseline", "nope", "--playbook", up, code=4)
    assert "no baseline named 'nope'" in flat(r.stderr + r.stdout)
    r = gf.run(*base, "--target-baseline", "b-new", "--playbook", up, "--waves", "50%,20%",
               code=2)
    assert "--waves" in flat(r.stderr + r.stdout)
    r = gf.run(*base, "--target-baseline", "b-new", "--playbook", str(gf.tmp / "no.yml"),
               code=2)
    assert "no such playbook" in flat(r.stderr + r.stdout)
    r = gf.run(*base, "--target-baseline", "b-new", "--playbook", up, "--auto-rollback", code=2)
    assert "--auto-rollback needs --rollback-playbook" in flat(r.stderr + r.stdout)
    gf.run("campaign", "status", "nope", code=4)


def test_approve_pause_and_abort_are_recorded(gf: Cli) -> None:
    up = str(gf.tmp / "up.yml")
    gf.run("campaign", "create", "c2", "--target-baseline", "b-new", "--selector", "gpu-*",
           "--playbook", up, "--ticket", "BUILD-8", "--require-approval")
    assert gf.json("campaign", "approve", "c2")["approved_by"] == ACTOR
    gf.run("campaign", "pause", "c2")
    assert gf.json("campaign", "status", "c2")["status"] == "paused"
    gf.run("campaign", "abort", "c2")
    assert gf.json("campaign", "list")[0]["status"] == "aborted"
    gf.run("campaign", "run", "c2", code=5)  # an aborted campaign does not run again
    events = gf.json("events", "--kind", "campaign")
    messages = [e["message"] for e in events]
    assert any(f"approved by {ACTOR}" in m for m in messages)
    assert any(m.endswith("aborted") for m in messages)
    assert all(e["actor"] == ACTOR for e in events)


def test_status_shows_a_progress_bar_per_wave_and_every_command_has_json(gf: Cli) -> None:
    """Progress bars per wave in ``status``/``report`` (empty at plan time, the canary's full
    after it ran), and ``--json`` on run, status, report, pause and abort."""
    args = ["campaign", "create", "c3", "--target-baseline", "b-new", "--selector", "gpu-*",
            "--command", "false", "--ticket", "BUILD-9", "--waves", "50%,100%"]
    plan = gf.json(*args)
    sizes = [len(w["hosts"]) for w in plan["waves"]]
    assert sizes[0] == 1 and sum(sizes) == 8 and len(sizes) >= 3
    lines = flat(gf.run("campaign", "status", "c3").stdout)
    assert f"canary [{'.' * 20}] 0/1" in lines, lines
    assert f"wave 1 [{'.' * 20}] 0/{sizes[1]}" in lines, lines
    # the command fails on the lab host (false exits 1): the canary fails, the campaign halts
    run = gf.run("campaign", "run", "c3", "--json", code=1)
    assert '"status": "halted"' in run.stdout
    out = flat(gf.run("campaign", "status", "c3").stdout)
    assert f"canary [{'#' * 20}] 1/1 1 failed" in out, out
    assert f"wave 1 [{'.' * 20}] 0/{sizes[1]}" in out, out
    report = flat(gf.run("campaign", "report", "c3").stdout)
    assert f"hosts: failed 1, pending {8 - 1}; skipped before the run: 0" in report, report
    assert gf.json("campaign", "report", "c3")["counts"] == {"failed": 1, "pending": 7}
    listed = flat(gf.run("campaign", "list").stdout)
    assert f"{progress_bar(1, 8)} 1/8 b-new" in listed and "##" in listed, listed
    aborted = gf.json("campaign", "abort", "c3")
    assert aborted["status"] == "aborted" and aborted["name"] == "c3"

    gf.json(*[a if a != "c3" else "c4" for a in args])
    paused = gf.json("campaign", "pause", "c4")
    assert paused["status"] == "paused" and paused["counts"] == {"pending": 8}
