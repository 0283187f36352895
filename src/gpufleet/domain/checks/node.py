"""Checks of the nodes that are not GPU nodes (``cpu`` and ``storage`` roles, issue 26 item
9): the host answered with its OS facts, its disks are seen, and no accelerator sits on a
host the inventory calls GPU-less (a mislabelled GPU node would hide from GPU capacity)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.domain.checks.base import CheckContext, CheckResult, CheckStatus, check, res
from gpufleet.domain.facts import HostFacts


@check("os_facts")
def os_facts(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """The collection read the host's OS release and kernel: no facts is a fault."""
    name = "os_facts"
    missing = [n for n, v in (("os-release", facts.os), ("kernel", facts.kernel)) if v is None]
    if missing:
        return res(name, CheckStatus.FAIL, f"not collected: {', '.join(missing)}")
    os_name = facts.os.pretty_name if facts.os is not None else None
    return res(name, CheckStatus.PASS, f"{os_name or 'OS'} on kernel {facts.kernel}")


@check("no_accelerators")
def no_accelerators(
    facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]
) -> CheckResult:
    """No GPU or accelerator reported (nvidia-smi, a vendor tool or lspci) on a host whose
    role says it has none; lspci not collected is a failure (nothing proves the bus). Skips
    where the inventory expects GPUs (``gpufleet_gpu_count`` above 0: not a GPU-less node)."""
    name = "no_accelerators"
    if ctx.spec.gpu_count:
        return res(name, CheckStatus.SKIP, f"{ctx.spec.gpu_count} GPUs expected")
    if facts.pci_devices is None:
        return res(name, CheckStatus.FAIL, "lspci not collected: cannot tell the host has no GPU")
    found = len(facts.gpus) + len(facts.accelerators) + len(facts.pci_gpus)
    if found:
        return res(
            name,
            CheckStatus.FAIL,
            f"{found} GPU/accelerator device(s) found on a host not in the gpu role",
            gpus=len(facts.gpus),
            accelerators=len(facts.accelerators),
            pci_gpus=[d.address for d in facts.pci_gpus],
        )
    return res(name, CheckStatus.PASS, f"no accelerator among {len(facts.pci_devices)} PCI devices")


@check("disks", min_disks=int, min_total_gib=int)
def disks(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """At least ``min_disks`` whole disks (default 1), ``min_total_gib`` GiB in all (default
    0); lsblk not collected is a failure."""
    name = "disks"
    if facts.block_devices is None:
        return res(name, CheckStatus.FAIL, "disks not collected (lsblk)")
    want = int(params.get("min_disks", 1))
    want_gib = int(params.get("min_total_gib", 0))
    total_gib = sum(d.size_bytes for d in facts.block_devices) // (1 << 30)
    count = len(facts.block_devices)
    if count < want or total_gib < want_gib:
        return res(
            name,
            CheckStatus.FAIL,
            f"{count} disk(s), {total_gib} GiB; expected at least {want} and {want_gib} GiB",
            disks=count,
            total_gib=total_gib,
        )
    return res(name, CheckStatus.PASS, f"{count} disk(s), {total_gib} GiB", disks=count)
