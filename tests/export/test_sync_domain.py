"""Pure parts of ``gpufleet sync``: targets, --every, and how a Slurm decision is explained."""

from __future__ import annotations

import pytest

from gpufleet.domain.slurm import SlurmNode, decide
from gpufleet.domain.states import HostState
from gpufleet.domain.sync import Cause, parse_every, parse_targets, slurm_disagreements


def test_targets_and_every() -> None:
    assert [t.value for t in parse_targets(" slurm, k8s ,")] == ["k8s", "slurm"]
    assert parse_targets("") == ()
    with pytest.raises(ValueError, match="'ansible' is not a sync target"):
        parse_targets("k8s,ansible")
    assert parse_every("1m") == 60 and parse_every("30s") == 30 and parse_every("2h") == 7200
    assert parse_every("0.5") == 0.5
    for bad in ("0s", "-1m", "soon", "", "infm"):
        with pytest.raises(ValueError):
            parse_every(bad)


def test_slurm_drain_is_by_hand_only_after_gpufleet_drained() -> None:
    idle = SlurmNode("gpu-01", "idle")
    wanted = "gpufleet:quarantined boom"
    d = decide(idle, HostState.QUARANTINED, wanted)
    [first] = slurm_disagreements(d, None)
    assert first.cause is Cause.PENDING
    [again] = slurm_disagreements(d, "drain")
    assert again.cause is Cause.BY_HAND and "resumed by hand while quarantined" in again.what
    [after_resume] = slurm_disagreements(d, "resume")
    assert after_resume.cause is Cause.PENDING
    foreign = SlurmNode("gpu-01", "idle", frozenset({"DRAIN"}), "admin: fan noise")
    [f] = slurm_disagreements(decide(foreign, HostState.AVAILABLE, None), "resume")
    assert f.cause is Cause.FOREIGN and "never resumes" in f.next_sync
    assert slurm_disagreements(decide(idle, HostState.AVAILABLE, None), "resume") == []
    assert slurm_disagreements(decide(idle, None, None), None) == []
