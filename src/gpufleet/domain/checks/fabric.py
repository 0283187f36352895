"""Fabrics: NVLink and NVSwitch (fabric manager) inside the host, IB/RoCE ports out of it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.domain.checks.base import NUMBER, CheckContext, CheckResult, CheckStatus, check, res
from gpufleet.domain.facts import HostFacts, IbPort
from gpufleet.domain.health import Fault


@check("nvlink", pair_link=str)
def nvlink(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """All NVLinks active, ``ctx.spec.nvlink_per_gpu`` active per GPU, and every GPU pair joined
    by ``pair_link`` in ``nvidia-smi topo -m`` (default ``NV<nvlink_per_gpu>`` on NVSwitch
    systems, where every pair sees all links)."""
    name = "nvlink"
    expected = ctx.spec.nvlink_per_gpu
    pair_link: str | None = params.get("pair_link") or (
        f"NV{expected}" if expected and ctx.spec.nvswitch else None
    )
    status = facts.nvlink
    if status is None or not status.supported:
        why = "not collected" if status is None else f"unavailable ({status.message or 'MIG?'})"
        if expected:
            return res(name, CheckStatus.FAIL, f"NVLink status {why}, expected {expected}/GPU")
        return res(name, CheckStatus.SKIP, f"NVLink status {why}")
    active = {g.gpu_index: sum(1 for link in g.links if link.active) for g in status.gpus}
    inactive = {
        g.gpu_index: [link.link for link in g.links if not link.active]
        for g in status.gpus
        if any(not link.active for link in g.links)
    }
    if not any(g.links for g in status.gpus) and not expected:
        return res(name, CheckStatus.SKIP, "no NVLinks (PCIe GPUs)")
    problems: list[str] = []
    for gpu, links in inactive.items():
        problems.append(f"GPU {gpu} link {', '.join(map(str, links))} inactive")
    if expected is not None:
        for gpu, n in active.items():
            if n != expected:
                problems.append(f"GPU {gpu} has {n} active links, expected {expected}")
    bad_pairs: list[str] = []
    if pair_link and facts.topology:
        gpus = [d for d in facts.topology.devices if d.startswith("GPU")]
        for i, a in enumerate(gpus):
            for b in gpus[i + 1 :]:
                got = facts.topology.links.get(a, {}).get(b)
                if got is not None and got != pair_link:
                    bad_pairs.append(f"{a}-{b} {got}")
        if bad_pairs:
            shown = ", ".join(bad_pairs[:8]) + (" ..." if len(bad_pairs) > 8 else "")
            problems.append(f"topology expects {pair_link} between GPUs: {shown}")
    ev: dict[str, Any] = {
        "active": active,
        "inactive": inactive,
        "expected": expected,
        "pair_link": pair_link,
        "bad_pairs": bad_pairs,
    }
    if problems:
        return res(name, CheckStatus.FAIL, "; ".join(problems), Fault.NVLINK_DOWN, **ev)
    total = sum(active.values())
    return res(name, CheckStatus.PASS, f"{total} NVLinks active on {len(active)} GPUs", **ev)


@check("fabricmanager")
def fabricmanager(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """nvidia-fabricmanager runs where ``ctx.spec.nvswitch`` says there are NVSwitches."""
    name = "fabricmanager"
    if not ctx.spec.nvswitch:
        return res(name, CheckStatus.SKIP, "no NVSwitch expected")
    if facts.fabricmanager_active is None:
        return res(name, CheckStatus.FAIL, "fabric manager state not collected")
    if not facts.fabricmanager_active:
        msg = "nvidia-fabricmanager not running on an NVSwitch system"
        return res(name, CheckStatus.FAIL, msg, Fault.FABRICMANAGER_DOWN)
    return res(name, CheckStatus.PASS, "nvidia-fabricmanager running")


# --------------------------------------------------------------------------- network


_LINK_LAYERS = {"ib": {"infiniband"}, "roce": {"ethernet"}}


def _port_up(port: IbPort, min_rate: float | None) -> bool:
    if (port.state or "").lower() != "active":
        return False
    if port.physical_state is not None and port.physical_state.lower() != "linkup":
        return False
    return min_rate is None or port.rate_gbps is None or port.rate_gbps >= min_rate


@check("ib_ports", min_ports=int, min_rate_gbps=NUMBER, required=bool)
def ib_ports(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """At least ``spec.ib_ports`` IB/RoCE ports Active/LinkUp at ``spec.ib_rate_gbps`` or more.

    ``spec.fabric`` picks the link layer (ib: InfiniBand, roce: Ethernet, unset: both). The
    fault ``ib_down`` costs multi-node profiles only; it does not quarantine.
    """
    name = "ib_ports"
    # ``required``: the profile itself needs a fabric (multi-node), whatever the spec says.
    missing = CheckStatus.FAIL if params.get("required") else CheckStatus.SKIP
    if ctx.spec.fabric == "none":
        return res(name, missing, "no high-speed fabric expected")
    need: int | None = params.get("min_ports", ctx.spec.ib_ports)
    if not need:
        return res(name, missing, "no IB/RoCE ports expected")
    min_rate: float | None = params.get("min_rate_gbps", ctx.spec.ib_rate_gbps)
    layers = _LINK_LAYERS.get(ctx.spec.fabric or "", {"infiniband", "ethernet"})
    if facts.ib_ports is None:
        why = next((p for p in facts.problems if "ibstat" in p), "ibstat missing or failed")
        msg = f"IB/RoCE ports not collected ({why}); need {need}"
        return res(name, CheckStatus.FAIL, msg, need=need, collected=False)
    ports = [p for p in facts.ib_ports if (p.link_layer or "").lower() in layers]
    up = [p for p in ports if _port_up(p, min_rate)]
    down = [p for p in ports if p not in up]

    def label(p: IbPort) -> str:
        rate = f" {p.rate_gbps:g} Gb/s" if p.rate_gbps is not None else ""
        slow = " below rate" if _port_up(p, None) else ""
        return f"{p.ca}/{p.port} ({p.state or '?'}/{p.physical_state or '?'}{rate}{slow})"

    ev: dict[str, Any] = {
        "need": need,
        "min_rate_gbps": min_rate,
        "up": [f"{p.ca}/{p.port}" for p in up],
        "down": [f"{p.ca}/{p.port}" for p in down],
    }
    at_rate = f" at >= {min_rate:g} Gb/s" if min_rate else ""
    summary = f"{len(up)} of {len(ports)} IB/RoCE ports up{at_rate}"
    down_text = f"; down: {', '.join(label(p) for p in down)}" if down else ""
    if len(up) < need:
        return res(
            name, CheckStatus.FAIL, f"{summary}, need {need}{down_text}", Fault.IB_DOWN, **ev
        )
    # Enough rails are up. A port that is down still deserves a look; an active port below the
    # fabric rate is usually another NIC (frontend, storage) and is not worth a warning.
    dead = [p for p in down if not _port_up(p, None)]
    if dead:
        return res(
            name, CheckStatus.WARN, f"{summary}; down: {', '.join(label(p) for p in dead)}", **ev
        )
    return res(name, CheckStatus.PASS, summary, **ev)
