"""``plan_blocks`` (which (rack, fabric) blocks placement needs, from GPU counts per block)
never changes what ``place`` chooses: ``place`` over the hosts of the planned blocks equals
``place`` over every candidate, on thousands of random fleets and requests."""

from __future__ import annotations

import random
from collections import Counter

from gpufleet.domain.placement import Block, HostView, Request, allocatable, place, plan_blocks
from gpufleet.domain.states import HostState


def _key(h: HostView) -> Block:
    return (h.rack or "", (h.fabric or "").lower())


def _fleet(rng: random.Random) -> list[HostView]:
    hosts = []
    for i in range(rng.randint(0, 40)):
        hosts.append(
            HostView(
                name=f"gpu-{rng.randint(0, 999):03d}-{i}",
                state=rng.choice([HostState.AVAILABLE] * 4 + [HostState.MAINTENANCE]),
                gpus=rng.choice([0, 1, 2, 4, 4, 8, 8, 8]),
                model="NVIDIA H100 80GB HBM3",
                rack=rng.choice([None, "", "r1", "r2", "r3", "r4"]),
                fabric=rng.choice([None, "ib", "IB", "roce"]),
                profiles=frozenset({"training-multinode"}),
                alarm=rng.random() < 0.05,
            )
        )
    return hosts


def _request(rng: random.Random) -> Request:
    if rng.random() < 0.3:
        return Request(hosts=rng.randint(1, 8))
    return Request(gpus=rng.choice([1, 2, 3, 4, 7, 8, 9, 12, 16, 24, 32, 40, 64, 100]))


def test_place_on_the_planned_blocks_equals_place_on_every_candidate() -> None:
    rng = random.Random(20261202)
    planned = refused = fabric_plans = 0
    for _ in range(4000):
        hosts, req = _fleet(rng), _request(rng)
        candidates = [h for h in hosts if allocatable(req, h)]
        blocks: dict[Block, Counter[int]] = {}
        for h in candidates:
            blocks.setdefault(_key(h), Counter())[h.gpus] += 1
        want = place(req, hosts)
        plan = plan_blocks(req, blocks)
        if plan is None:
            assert want is None, (req, hosts)
            refused += 1
            continue
        assert want is not None, (req, hosts, plan)
        subset = [
            h
            for h in candidates
            if _key(h) in plan.racks or (h.fabric or "").lower() in plan.fabrics
        ]
        assert place(req, subset) == want, (req, hosts, plan)
        planned += 1
        fabric_plans += bool(plan.fabrics)
    # both outcomes and both kinds of plan were exercised
    assert planned > 1000 and refused > 200 and fabric_plans > 50


def test_plan_reads_only_the_best_fitting_rack() -> None:
    blocks: dict[Block, Counter[int]] = {
        ("r1", "ib"): Counter({8: 32}),
        ("r2", "ib"): Counter({8: 9}),  # the smallest block that holds 64 GPUs
        ("r3", "ib"): Counter({8: 7}),  # too small
        ("r4", "roce"): Counter({8: 12}),
    }
    plan = plan_blocks(Request(gpus=64), blocks)
    assert plan is not None and plan.racks == {("r2", "ib")} and not plan.fabrics
    # no single rack holds 40 hosts: every candidate of the fabric that does
    plan = plan_blocks(Request(hosts=40), blocks)
    assert plan is not None and plan.fabrics == {"ib"} and not plan.racks
    assert plan_blocks(Request(gpus=1000), blocks) is None
    assert plan_blocks(Request(gpus=8), {}) is None
