"""Issue 24 item 5: a partial host (a GPU left out as unusable) is never offered for
multi-host training, whatever its other GPUs and its evidence say."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from gpufleet.domain.checks import ActiveEvidence
from gpufleet.domain.facts import HostFacts, XidEvent
from gpufleet.domain.gpu_health import GpuFaultPolicy, evaluate_gpus
from gpufleet.domain.profiles import Decision, load_profiles
from gpufleet.domain.spec import Baseline, ExpectedSpec
from gpufleet.domain.xid import XidPolicy


def test_a_partial_host_is_never_training_multinode(
    facts_factory: Callable[..., HostFacts], spec: ExpectedSpec, baseline: Baseline,
    now: datetime, proof: ActiveEvidence,
) -> None:
    """Xid 79 on GPU 3 (a middle one) under the pool's `partial` policy: the host stays
    available with 7 GPUs for the single-host profiles. On main 84be469 it also kept
    training-multinode."""
    xid79 = XidEvent(code=79, pci_address="PCI:0000:5d:00", time=now - timedelta(minutes=5),
                     message="NVRM: Xid (PCI:0000:5d:00): 79, pid=0, GPU has fallen off the bus.")
    facts = facts_factory(xids=[xid79])
    verdict = evaluate_gpus(facts, spec, baseline, load_profiles(), XidPolicy.load_default(),
                            now, gpu_fault=GpuFaultPolicy.PARTIAL, evidence=proof)
    assert [u.index for u in verdict.unusable] == [3] and verdict.usable_gpus == 7
    out = verdict.outcome
    assert out.decision is Decision.AVAILABLE
    assert out.profiles_passed == {"test", "inference", "training-single"}
    assert out.profiles["training-multinode"].reasons == [
        "all_gpus_usable: partial host: GPU 3 unusable: fatal Xid 79"]
    # The same host with every GPU usable is a multinode host: the proof is complete.
    whole = evaluate_gpus(facts_factory(), spec, baseline, load_profiles(),
                          XidPolicy.load_default(), now, gpu_fault=GpuFaultPolicy.PARTIAL,
                          evidence=proof)
    assert "training-multinode" in whole.outcome.profiles_passed
