"""Placement is pure: whole hosts, fewest first, one rack and fabric, smallest block, and a
refusal that explains itself with counts."""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.domain.placement import HostView, Request, explain, place
from gpufleet.domain.states import HostState

TRAIN = frozenset({"training-multinode", "inference"})
UNTIL = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)


def host(name: str, rack: str, *, gpus: int = 8, fabric: str = "ib", **kw: object) -> HostView:
    data: dict[str, object] = {
        "name": name,
        "state": HostState.AVAILABLE,
        "gpus": gpus,
        "model": "NVIDIA H100 80GB HBM3",
        "gpu_memory_mib": 81559,
        "rack": rack,
        "fabric": fabric,
        "pool": "train",
        "profiles": TRAIN,
    }
    data.update(kw)
    return HostView(**data)  # type: ignore[arg-type]


def test_16_gpu_multinode_lands_on_two_hosts_of_one_rack_and_fabric() -> None:
    hosts = [
        host("a1", "r01"),
        host("b1", "r02", fabric="roce"),
        host("b2", "r02"),
        host("c1", "r03"),
        host("c2", "r03"),
    ]
    p = place(Request(gpus=16, model="H100", profile="training-multinode"), hosts)
    assert p is not None
    assert p.hosts == ("c1", "c2") and p.racks == ("r03",) and p.fabric == "ib"
    assert p.gpus == 16 and not p.spans_racks


def test_fewest_hosts_first_and_single_host_best_fit() -> None:
    hosts = [
        host("big", "r01", gpus=8),
        host("small1", "r02", gpus=4),
        host("small2", "r02", gpus=4),
    ]
    assert place(Request(gpus=8), hosts).hosts == ("big",)  # type: ignore[union-attr]
    assert place(Request(gpus=3), hosts).hosts == ("small1",)  # type: ignore[union-attr]


def test_does_not_break_a_large_block_when_a_smaller_one_fits() -> None:
    big = [host(f"a{i}", "r01") for i in range(4)]
    small = [host("b1", "r02"), host("b2", "r02")]
    p = place(Request(gpus=16), big + small)
    assert p is not None and p.hosts == ("b1", "b2")
    p = place(Request(hosts=2), big + small)
    assert p is not None and p.hosts == ("b1", "b2")


def test_spans_racks_on_one_fabric_never_mixes_fabrics() -> None:
    hosts = [host("a1", "r01"), host("b1", "r02"), host("c1", "r03", fabric="roce")]
    p = place(Request(gpus=16), hosts)
    assert p is not None and p.hosts == ("a1", "b1") and p.spans_racks
    assert place(Request(gpus=24), hosts) is None  # three hosts exist, on two fabrics


def test_unusable_hosts_are_never_placed() -> None:
    hosts = [
        host("alarm", "r01", alarm=True),
        host("booked", "r01", busy_until=UNTIL),
        host("notval", "r01", profiles=frozenset({"inference"})),
        host("maint", "r01", state=HostState.MAINTENANCE),
        host("a100", "r01", model="NVIDIA A100-SXM4-40GB", gpu_memory_mib=40960),
    ]
    assert place(Request(gpus=8, model="H100", profile="training-multinode"), hosts) is None
    assert place(Request(gpus=8, min_gpu_memory_mib=80 * 1024), hosts[3:]) is None
    got = place(Request(gpus=8, model="A100"), hosts)
    assert got is not None and got.hosts == ("a100",)


def test_a_refused_request_explains_itself_with_counts() -> None:
    hosts = [
        host("g1", "r01"),
        host("g2", "r01", profiles=frozenset({"inference"})),
        host("g3", "r01", state=HostState.ALLOCATED, busy_until=UNTIL, profiles=TRAIN),
        host("g4", "r01", state=HostState.ALLOCATED, busy_until=UNTIL, profiles=TRAIN),
        host("q1", "r01", state=HostState.QUARANTINED, eta=UNTIL, profiles=frozenset()),
        host("v1", "r01", model="NVIDIA V100"),
    ]
    req = Request(gpus=16, model="H100", profile="training-multinode")
    assert place(req, hosts) is None
    r = explain(req, hosts)
    assert r.message.startswith("cannot place 16 GPUs H100 for training-multinode: ")
    assert "5 of 6 hosts match the model H100" in r.message
    assert "1 of the free ones are validated for training-multinode" in r.message
    assert "2 are allocated until 2026-12-04 18:00 UTC" in r.message
    assert "1 are quarantined (back by 2026-12-04 18:00 UTC)" in r.message
    assert "8 GPUs allocatable, 8 missing" in r.message
    assert r.counts["match_hardware"] == 5 and r.counts["validated_for_profile"] == 1
    assert r.missing_gpus == 8
    assert [h["host"] for h in r.held] == ["g3", "g4", "q1"]


def test_reservation_may_use_a_host_whose_lease_ends_before_it() -> None:
    h = host("g1", "r01", state=HostState.ALLOCATED, free_by_start=True)
    assert place(Request(hosts=1), [h]) is not None
    assert place(Request(hosts=1), [host("g1", "r01", state=HostState.ALLOCATED)]) is None
