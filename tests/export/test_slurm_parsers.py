"""Parsers of Slurm's JSON on output captured from a real Slurm 22.05 (tests/fixtures/captured/
slurm, PROVENANCE.md): ``sacct --json`` -> failures, ``sinfo --json`` -> node states."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpufleet.collect.sacct import expand_hostlist, parse_sacct_json
from gpufleet.collect.slurm import parse_sinfo_json
from gpufleet.errors import ParseError

CAPTURED = Path(__file__).resolve().parent.parent / "fixtures" / "captured" / "slurm"


def test_sacct_failed_jobs_one_record_per_node() -> None:
    res = parse_sacct_json((CAPTURED / "sacct-22.05.json").read_text())
    assert res.jobs == 8 and res.problems == []
    got = [(f.job, f.host, f.state) for f in res.failures]
    # completed (3, 7) and cancelled (8) jobs are not failures; job 6 ran on two nodes
    assert got == [("1", "gpu-01", "FAILED"), ("2", "gpu-03", "FAILED"),
                   ("4", "gpu-01", "FAILED"), ("5", "gpu-03", "FAILED"),
                   ("6", "gpu-01", "FAILED"), ("6", "gpu-02", "FAILED")]
    six = res.failures[-1]
    assert six.message == "slurm job 6 (wrap) FAILED, reason ReqNodeNotAvail on gpu-[01-02]"
    assert six.time == datetime.fromtimestamp(1796254679, UTC) == six.end
    assert six.exit_code is None  # 22.05's JSON says SUCCESS/0 for every job (see PROVENANCE)
    assert six.as_row()["host"] == "gpu-02" and six.as_row()["gpu"] is None


def test_sacct_newer_shape_and_bad_jobs() -> None:
    # EDITED: job 2 of the capture rewritten in Slurm 23.02+'s shape (state.current a list,
    # numbers as {set, number}, exit_code.return_code a number object); job 6's nodes emptied
    doc = json.loads((CAPTURED / "sacct-22.05.json").read_text())
    jobs = {j["job_id"]: j for j in doc["jobs"]}
    two = jobs[2]
    two["state"]["current"] = ["NODE_FAIL"]
    two["time"]["end"] = {"set": True, "infinite": False, "number": 1796254455}
    two["exit_code"] = {"status": ["EXITED"], "return_code": {"set": True, "number": 7}}
    jobs[6]["nodes"] = "None assigned"
    res = parse_sacct_json(json.dumps({"jobs": [two, jobs[6], "x"], "errors": []}))
    assert [f.message for f in res.failures] == [
        "slurm job 2 (wrap) NODE_FAIL, exit code 7 on gpu-03"]
    assert res.problems == ["job 6: FAILED but ran on no node", "job #2: not an object"]


def test_sacct_nothing_found_is_zero_jobs() -> None:
    # real sacct --json for a window without jobs: error 9003 "Nothing found", jobs []
    text = (CAPTURED / "sacct-22.05-nothing-found.json").read_text()
    assert json.loads(text)["errors"][0]["error_number"] == 9003
    res = parse_sacct_json(text)
    assert (res.jobs, res.failures, res.problems) == (0, [], [])
    # any other error next to it is still one
    doc = json.loads(text)
    doc["errors"].append({"description": "Unable to connect to database", "error_number": 7000,
                          "error": "Unable to connect to database", "source": "x"})
    with pytest.raises(ParseError, match="Unable to connect to database"):
        parse_sacct_json(json.dumps(doc))


@pytest.mark.parametrize("text", ["", "{", "[]", '{"nodes": []}',
                                  '{"jobs": [], "errors": ["slurmdbd down"]}',
                                  '{"jobs": [], "errors": "Nothing found"}',
                                  '{"jobs": {}, "errors": [{"error_number": 9003}]}'])
def test_sacct_garbage_is_refused(text: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_sacct_json(text)
    assert "sacct --json" in str(info.value)


def test_hostlists() -> None:
    assert expand_hostlist("gpu-[01-03,07],login1") == ["gpu-01", "gpu-02", "gpu-03", "gpu-07",
                                                         "login1"]
    assert expand_hostlist("n[8-10]x") == ["n8x", "n9x", "n10x"]
    for bad in ("gpu-[01-03", "gpu-]1[", "gpu-[3-1]", "gpu-[a-b]"):
        with pytest.raises(ValueError):
            expand_hostlist(bad)


def test_sinfo_json_nodes() -> None:
    nodes = {n.name: n for n in parse_sinfo_json((CAPTURED / "sinfo-22.05.json").read_text())}
    assert set(nodes) == {"gpu-01", "gpu-02", "gpu-03"}
    assert nodes["gpu-03"].state == "idle" and nodes["gpu-03"].flags == {"COMPLETING"}
    assert not nodes["gpu-01"].drained and nodes["gpu-01"].reason is None
    # EDITED: 23.02+ shape, state a list of base state and flags
    newer = {"nodes": [
        {"name": "n1", "state": ["IDLE", "DRAIN"], "reason": "gpufleet:maintenance"}]}
    (n1,) = parse_sinfo_json(json.dumps(newer))
    assert n1.state == "idle" and n1.drained_by_gpufleet
    with pytest.raises(ParseError):
        parse_sinfo_json('{"nodes": [{"state": "idle"}]}')
