"""The proof the training profiles ask for (issue 24 item 5), given to lab hosts in tests as an
operator gives it: a validated baseline for the pool, a DCGM diag at level 2 and an NCCL
all-reduce, replayed by the lab from real captures."""

from __future__ import annotations

from pathlib import Path

from gpufleet.lab.demo import validated_baselines
from gpufleet.lab.fleet import LabFleet
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.evidence import ActiveRun, run_active

#: The lab replays one real all-reduce run, on 8x A100 (235 GB/s peak: lab/data/captured/
#: active): below the H100 SXM floor of domain/data/nccl_floors.yaml, and there is no H100
#: capture to replay instead. Tests of H100 lab hosts that follow a host into
#: training-multinode use this site profile: an NCCL result is still required (and any wrong
#: value or missing bandwidth fails it), the model floor is not applied.
LAB_NCCL_PROFILE = "profiles:\n  training-multinode:\n    checks:\n      nccl: {require: true}\n"


def lab_profiles(directory: Path) -> Path:
    """Write :data:`LAB_NCCL_PROFILE` into ``directory``; the path."""
    path = directory / "lab-profiles.yaml"
    path.write_text(LAB_NCCL_PROFILE)
    return path


def prove(fleet: Fleet, directory: Path, selector: str | None = None) -> list[ActiveRun]:
    """DCGM level 2 and NCCL on ``selector`` (every host), with :func:`lab_profiles` as the
    fleet's profiles file."""
    fleet.settings.profiles_file = lab_profiles(directory)
    return run_active(fleet, selector, "dcgm", level=2) + run_active(fleet, selector, "nccl")


def prove_lab(fleet: Fleet, lab: LabFleet, directory: Path) -> list[ActiveRun]:
    """Collect the enrolled ``lab``, give each pool a validated baseline from its reference
    host, then :func:`prove` every host; validation is the caller's next step."""
    collect(fleet)
    validated_baselines(fleet, lab)
    return prove(fleet, directory)
