"""LocalTransport: the real script run with sh on this machine against fake tools."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from tests.sshlab import materialize_host
from tests.sshlab_fixtures import sample_sections

from gpufleet.collect.bundle import Section, split_bundle
from gpufleet.collect.local import LocalTransport
from gpufleet.collect.script import remote_script
from gpufleet.collect.transport import Outcome, RawResult, Target

HERE = Target("local", "localhost")


def run(transport: LocalTransport, script: str, timeout_s: float = 120.0) -> RawResult:
    return asyncio.run(transport.run(HERE, script, timeout_s))


@pytest.mark.parametrize("variant", ["healthy", "driver-down", "no-gpu"])
def test_round_trip_with_fake_tools(tmp_path: Path, variant: str) -> None:
    given = sample_sections("node-a", variant)
    env = materialize_host(tmp_path / "host", given)
    res = run(LocalTransport(env), remote_script())
    assert res.outcome is Outcome.OK, res.reason
    assert res.output is not None and res.host_key is None
    got = split_bundle(res.output)
    for name, sec in given.items():
        assert got[name] == sec, name


def test_nonzero_exit_is_still_ok_with_output() -> None:
    res = run(LocalTransport(), "echo partial; echo oops >&2; exit 3")
    assert res.outcome is Outcome.OK
    assert res.output == "partial\n"
    assert res.reason == "script exited with status 3: oops"


def test_tools_do_not_eat_the_script() -> None:
    # A tool reading stdin must not swallow the rest of the script.
    res = run(LocalTransport(), "cat\necho still-here\n")
    assert res.output == "still-here\n"


def test_timeout_kills_the_script() -> None:
    start = time.monotonic()
    res = run(LocalTransport(), "sleep 60; echo late", timeout_s=1.0)
    assert res.outcome is Outcome.TIMEOUT
    assert res.reason == "no answer within 1 s (command still running)"
    assert time.monotonic() - start < 30


def test_runaway_output_is_bad_output() -> None:
    res = run(LocalTransport(max_output_bytes=10_000), "yes")
    assert res.outcome is Outcome.BAD_OUTPUT
    assert "10000 bytes" in res.reason


def test_a_tool_not_installed_answers_127_at_once(tmp_path: Path) -> None:
    """Issue 30: an absent tool (most vendor probes on any one host) is found missing by the
    shell's ``command -v``, with no ``timeout`` process: rc 127 and "TOOL: not found", as
    before only the wording of the message changed; a section run through a function in a
    subshell (npu-smi's per-chip loops) says the same."""
    env = materialize_host(tmp_path / "host", sample_sections("node-a", "no-gpu"))
    res = run(LocalTransport(env), remote_script())
    assert res.outcome is Outcome.OK, res.reason
    assert res.output is not None
    got = split_bundle(res.output)
    for name in ("nvidia-smi-xml", "nvidia-smi-q"):
        assert got[name] == Section(name, "", "nvidia-smi: not found", 127), got[name]
    assert got["npu_smi_board"] == Section("npu_smi_board", "", "npu-smi: not found", 127)


def test_the_gpu_sections_run_in_a_lane_of_their_own() -> None:
    """Issue 30: nvidia-smi's sections run one after another in a background subshell while
    the others run; the round trip above shows their output comes back whole."""
    script = remote_script()
    start = script.index('( E="$E.ge"\n')
    lane = script[start : script.index(') >"$E.g" 2>/dev/null &\n', start)]
    names = [line.split()[1] for line in lane.splitlines() if line.startswith("sec ")]
    assert names == ["nvidia-smi-xml", "nvidia-smi-q", "topo-m", "nvlink-s"]
    assert "nvx_rc=$rc" in lane  # the text report's fallback reads it in the same lane
    assert script.index('wait\ncat "$E.g"\n') > script.index("sec accelerators ")
