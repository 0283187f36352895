"""Operator lifecycle through the ``gpufleet`` CLI, on SQLite and on the real PostgreSQL:
maintenance, retire, declared changes, unquarantine, and the event log they leave.

Every state change made here must show up in ``hosts show NAME --json`` as a ``transition``
event with the actor (``$GPUFLEET_ACTOR``) and the reason given on the command line.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat

ACTOR = "cli-lifecycle-test"
POOL = "train-h100"
HOSTS = [f"gpu-0{i}" for i in range(1, 9)]
_TRANSITION = re.compile(
    r"^(?P<event>[a-z_]+): (?:(?P<src>[a-z]+) -> (?P<dst>[a-z]+)|stays (?P<same>[a-z]+))"
    r"(?: \((?P<reason>.*)\))?$"
)


@dataclass
class Gf(Cli):
    """The CLI plus transition-log parsing."""

    def transitions(self, host: str) -> list[dict[str, str]]:
        """The host's transition events, oldest first, parsed from their messages."""
        out = []
        for ev in reversed(self.json("hosts", "show", host)["events"]):
            if ev["kind"] != "transition":
                continue
            m = _TRANSITION.match(ev["message"])
            assert m, ev["message"]
            src = m["src"] or m["same"]
            dst = m["dst"] or m["same"]
            out.append({"event": m["event"], "from": src, "to": dst,
                        "reason": m["reason"] or "", "actor": ev["actor"]})
        return out


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Gf]:
    c = cli_for_backend(request, tmp_path, ACTOR)
    yield Gf(c.global_args, c.tmp, c.env)


def test_operator_lifecycle_and_event_log(gf: Gf) -> None:
    lab = gf.tmp / "lab"
    gf.run("lab", "create", "--hosts", "8", "--model", "h100-8x", "--dir", str(lab),
           "--fault", "gpu-02=driver-drift", "--fault", "gpu-03=ib-down",
           "--fault", "gpu-04=gpu-missing")
    gf.run("enroll", "-i", str(lab / "inventory.ini"))
    gf.run("collect")
    gf.run("baseline", "create", "h100-lab", "--from-host", "gpu-01", "--pool", POOL)
    gf.run("validate", code=1)
    before = {r["name"]: r["state"] for r in gf.json("hosts", "list")}
    assert before["gpu-05"] == before["gpu-06"] == before["gpu-01"] == "available"
    assert before["gpu-04"] == "quarantined"

    # Maintenance on: out of the pool, tainted, no validated.* labels.
    r = gf.run("maintenance", "on", "gpu-05", "--reason", "x")
    assert flat(r.stdout) == "gpu-05: maintenance"
    assert gf.state("gpu-05") == "maintenance"
    (lbl,) = gf.json("labels", "gpu-05")
    assert lbl["taints"] == [
        {"key": "gpufleet.io/maintenance", "value": "true", "effect": "NoSchedule"}
    ]
    assert not [k for k in lbl["labels"] if "validated." in k]
    # Twice is refused; validation leaves a host in maintenance alone.
    r = gf.run("maintenance", "on", "gpu-05", "--reason", "again", code=5)
    assert "maintenance_on" in flat(r.stderr) and "'maintenance'" in flat(r.stderr)
    (v,) = gf.json("validate", "gpu-05", code=0)  # held out on purpose: not a failure
    assert v["state"] == "maintenance" and "maintenance" in v["skipped"]

    # Maintenance off: validating, never straight to available; validation then passes.
    r = gf.run("maintenance", "off", "gpu-05", "--reason", "DIMM replaced")
    assert flat(r.stdout) == "gpu-05: validating"
    assert gf.state("gpu-05") == "validating"
    (v,) = gf.json("validate", "gpu-05")
    assert v["state"] == "available"

    # Retire: terminal; collection no longer touches it; retiring again is refused.
    r = gf.run("retire", "gpu-06", "--reason", "returned to vendor")
    assert flat(r.stdout) == "gpu-06: retired"
    assert gf.state("gpu-06") == "retired"
    gf.run("retire", "gpu-06", code=5)
    collected = gf.json("collect")
    assert "gpu-06" not in {h["host"] for h in collected["hosts"]}
    assert len(collected["hosts"]) == 7
    assert gf.json("labels", "gpu-06")[0]["taints"][0]["key"] == "gpufleet.io/retired"
    r = gf.run("maintenance", "on", "gpu-06", "--reason", "y", code=5)
    assert "gpu-06" in flat(r.stderr) and "'retired'" in flat(r.stderr)

    # A declared driver upgrade sends an available host back to validation.
    r = gf.run("change", "record", "gpu-01", "--kind", "driver-upgrade", "--ticket", "CI-123")
    assert flat(r.stdout) == "gpu-01: validating"
    assert gf.state("gpu-01") == "validating"
    shown = gf.json("hosts", "show", "gpu-01")
    declared = [e for e in shown["events"] if e["kind"] == "change-declared"]
    assert len(declared) == 1
    assert "driver-upgrade" in declared[0]["message"] and "CI-123" in declared[0]["message"]
    assert declared[0]["actor"] == ACTOR

    # Unquarantine without a repair: validation quarantines it again (GPU still lost).
    r = gf.run("unquarantine", "gpu-04", "--reason", "GPU reseated")
    assert flat(r.stdout) == "gpu-04: validating"
    (v,) = gf.json("validate", "gpu-04", code=1)
    assert v["state"] == "quarantined" and "gpu_lost" in v["faults"]

    # ---- the event log: every state change above, with actor and reason.
    expected: dict[str, list[tuple[str, str, str, str | None]]] = {
        "gpu-05": [("maintenance_on", "available", "maintenance", "x"),
                   ("maintenance_off", "maintenance", "validating", "DIMM replaced"),
                   ("validation_passed", "validating", "available", "")],
        "gpu-06": [("retire", "available", "retired", "returned to vendor")],
        "gpu-01": [("change_declared", "available", "validating",
                    "driver-upgrade declared (ticket CI-123)")],
        "gpu-04": [("unquarantine", "quarantined", "validating", "GPU reseated"),
                   ("hardware_fault", "validating", "quarantined", None)],
    }
    final = {r["name"]: r["state"] for r in gf.json("hosts", "list")}
    for host in HOSTS:
        chain = gf.transitions(host)
        assert chain, host
        assert all(t["actor"] == ACTOR for t in chain), (host, chain)
        # The transitions reconstruct the host's whole path: enrolled -> ... -> now.
        assert chain[0]["from"] == "enrolled", (host, chain)
        for a, b in itertools.pairwise(chain):
            assert b["from"] == a["to"], (host, chain)
        assert chain[-1]["to"] == final[host], (host, chain)
        # The operator's transitions are the last ones, in order, with their reasons.
        want = expected.get(host)
        if want:
            got = chain[-len(want):]
            for (event, src, dst, reason), t in zip(want, got, strict=True):
                assert (t["event"], t["from"], t["to"]) == (event, src, dst), (host, chain)
                if reason is not None:
                    assert t["reason"] == reason, (host, t)
    # Hosts nobody touched after the first validation kept its two transitions.
    for host in ("gpu-07", "gpu-08"):
        assert [(t["event"], t["to"]) for t in gf.transitions(host)] == [
            ("validate", "validating"), ("validation_passed", "available")
        ]

    # summary: per-state counts add up; the quarantined host is listed with its fault.
    sm = gf.json("summary")
    assert sum(sm["per_state"].values()) == sm["hosts"] == 8
    assert sm["per_state"] == {
        "available": 4, "validating": 2, "quarantined": 1, "retired": 1
    }, sm["per_state"]
    assert [(q["host"], q["fault"]) for q in sm["quarantined"]] == [("gpu-04", "gpu_lost")]
    assert sorted(v["host"] for v in sm["validating"]) == ["gpu-01", "gpu-02"]
