"""Checks of accelerators of other vendors (issue 15): what the vendor plugins reported
(``HostFacts.accelerators`` / ``accelerator_errors``), compared with lspci and the spec.

Configuration follows the node type: nothing here is chosen per vendor by the operator. A host
whose accelerators are all of another vendor (no NVIDIA GPU on the bus or in the driver, and a
vendor plugin reported records or an error, or lspci lists another vendor's accelerators) is
an *other-vendor host*: the inventory checks ``gpu_count``, ``gpu_model``,
``single_gpu_model`` and ``gpu_memory`` judge its accelerators with :func:`count`,
:func:`model`, :func:`single_model` and :func:`memory` (the profile's GPU count, model and
memory requirement apply to the accelerators of the host's vendor). The checks registered
here (``accelerator_health``, ``accelerator_links``, ``accelerator_temperature``) read only
other vendors' records: NVIDIA GPUs keep their own checks and health rules.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from gpufleet.domain.accelerators import (
    PCI_VENDOR_IDS,
    Accelerator,
    Health,
    LinkState,
    Vendor,
    accelerators_on_bus,
    unread_on_bus,
)
from gpufleet.domain.accelerators import other_vendor_host as other_vendor_host
from gpufleet.domain.checks.base import (
    NUMBER,
    CheckContext,
    CheckResult,
    CheckStatus,
    check,
    pci_addr,
    res,
)
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import Fault

#: Default temperature limit of ``accelerator_temperature`` (C); a profile sets ``max_c``.
DEFAULT_MAX_C = 90.0


def _on_bus(facts: HostFacts) -> dict[Vendor, int]:
    return accelerators_on_bus(facts.pci_devices or [])


def _name(a: Accelerator) -> str:
    where = f" ({pci_addr(a.bus_id)})" if a.bus_id else ""
    return f"{a.vendor} #{a.index}{where}"


def count(facts: HostFacts, ctx: CheckContext, name: str) -> CheckResult:
    """The vendor tool answered, sees every accelerator lspci lists under the vendor's PCI
    id, and as many as the spec expects (the spec is silent: as many as lspci lists); lspci
    listing accelerators of a vendor no installed plugin reads fails, naming them."""
    accs = facts.accelerators
    on_bus = _on_bus(facts)
    vendors = sorted(
        {a.vendor for a in accs} | set(facts.accelerator_errors)
        | {v for v, n in on_bus.items() if n and v != Vendor.NVIDIA},
        key=lambda v: v.value,
    )
    ev: dict[str, Any] = {
        "vendors": [v.value for v in vendors],
        "expected": ctx.spec.gpu_count,
        "reported": len(accs),
        "pci": None if facts.pci_devices is None else sum(on_bus.get(v, 0) for v in vendors),
    }
    unread = unread_on_bus(facts.pci_devices or [])
    if unread:  # Hygon DCUs and the like, without their plugin: named, never "GPU-less"
        ev["unread"] = unread
        what = ", ".join(f"{n} {v}" for v, n in sorted(unread.items()))
        msg = f"lspci lists {what} accelerators and no installed vendor plugin reads them"
        return res(name, CheckStatus.FAIL, msg, **ev)
    if facts.accelerator_errors:
        ev["errors"] = {v.value: e for v, e in facts.accelerator_errors.items()}
        detail = "; ".join(f"{v}: {e}" for v, e in sorted(facts.accelerator_errors.items()))
        not_loaded = all("not found" in e for e in facts.accelerator_errors.values())
        fault = Fault.DRIVER_NOT_LOADED if not_loaded else None
        return res(name, CheckStatus.FAIL, f"accelerator tool failed: {detail}", fault, **ev)
    for v in vendors:
        mine = [a for a in accs if a.vendor == v]
        bus = on_bus.get(v, 0)
        if facts.pci_devices is not None and bus > len(mine):
            seen = {pci_addr(a.bus_id) for a in mine if a.bus_id}
            missing = sorted(
                d.address
                for d in facts.pci_devices
                if d.vendor_id == PCI_VENDOR_IDS[v] and pci_addr(d.address) not in seen
            )
            if not all(a.bus_id for a in mine):
                missing = []  # the tool prints no bus ids (hy-smi): which one is unknown
            ev["missing"] = missing
            where = f" (missing from the tool: {', '.join(missing)})" if missing else ""
            msg = f"{v} tool sees {len(mine)} of {bus} accelerators on the PCI bus{where}"
            return res(name, CheckStatus.FAIL, msg, Fault.GPU_LOST, **ev)
    n = len(accs)
    expected = ctx.spec.gpu_count
    if expected is None and facts.pci_devices is not None:
        expected = ev["pci"]
    if n == 0:
        return res(name, CheckStatus.FAIL, "no accelerators reported: not usable", **ev)
    if expected is None:
        msg = f"{n} accelerators, but lspci was not collected and no count is expected"
        return res(name, CheckStatus.FAIL, msg, **ev)
    if n != expected:
        fault = Fault.GPU_LOST if 0 < n < expected else None
        msg = f"{'/'.join(vendors)} tool sees {n} accelerators, expected {expected}"
        return res(name, CheckStatus.FAIL, msg, fault, **ev)
    agree = " (tool and PCI bus agree)" if facts.pci_devices is not None else ""
    return res(name, CheckStatus.PASS, f"{n} {'/'.join(vendors)} accelerators{agree}", **ev)


def model(facts: HostFacts, ctx: CheckContext, name: str) -> CheckResult:
    """Every accelerator's model contains ``ctx.spec.gpu_model`` (case-insensitive)."""
    if not ctx.spec.gpu_model:
        return res(name, CheckStatus.SKIP, "no accelerator model expected")
    if not facts.accelerators:
        return res(name, CheckStatus.SKIP, "no accelerators reported (see gpu_count)")
    want = ctx.spec.gpu_model.lower()
    wrong = [a for a in facts.accelerators if want not in a.model.lower()]
    ev: dict[str, Any] = {
        "expected": ctx.spec.gpu_model,
        "models": sorted({a.model for a in facts.accelerators}),
    }
    if wrong:
        got = ", ".join(f"{_name(a)}: {a.model}" for a in wrong)
        return res(name, CheckStatus.FAIL, f"{got}, expected {ctx.spec.gpu_model}", **ev)
    return res(name, CheckStatus.PASS, f"all accelerators match {ctx.spec.gpu_model}", **ev)


def single_model(facts: HostFacts, name: str) -> CheckResult:
    models = Counter(f"{a.vendor} {a.model}" for a in facts.accelerators)
    if not models:
        return res(name, CheckStatus.SKIP, "no accelerator models reported")
    if len(models) > 1:
        mix = ", ".join(f"{n}x {m}" for m, n in models.most_common())
        return res(name, CheckStatus.FAIL, f"mixed accelerator models: {mix}", models=dict(models))
    (only,) = models
    return res(name, CheckStatus.PASS, f"all accelerators are {only}", models=dict(models))


def memory(
    facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any], name: str
) -> CheckResult:
    """Each accelerator's memory (HBM / VRAM) within ``tolerance_pct`` of the spec's."""
    expected = ctx.spec.gpu_memory_mib
    if not expected:
        return res(name, CheckStatus.SKIP, "no accelerator memory expected")
    sized = [a for a in facts.accelerators if a.memory_total_mib is not None]
    if not sized:
        return res(name, CheckStatus.SKIP, "no accelerator memory reported")
    tol = float(params.get("tolerance_pct", 5)) / 100
    wrong = [a for a in sized if abs((a.memory_total_mib or 0) - expected) > expected * tol]
    ev: dict[str, Any] = {
        "expected_mib": expected,
        "mib": {f"{a.vendor}:{a.index}": a.memory_total_mib for a in sized},
    }
    if wrong:
        got = ", ".join(f"{_name(a)}: {a.memory_total_mib} MiB" for a in wrong)
        return res(name, CheckStatus.FAIL, f"{got}, expected {expected} MiB", **ev)
    return res(name, CheckStatus.PASS, f"accelerator memory matches {expected} MiB", **ev)


@check("accelerator_health")
def accelerator_health(
    facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]
) -> CheckResult:
    """Every accelerator whose tool states a health (Ascend ``npu-smi``) reports OK. A device
    in Alarm or Warning whose tool gives error codes is judged by its vendor's fault catalogue
    as the inspection judges it (:func:`gpufleet.domain.fault_catalogue.judge_codes`, with the
    site overlay of ``ctx.fault_catalogues``): a code whose handling level is critical (an NPU
    reset, isolation) quarantines (``accelerator_alarm``) naming the device, its codes and
    the deciding level; a warning level warns; record-only codes (Ascend ``NotHandle``) are
    noted and pass. A code the catalogue does not know, a device without codes or a vendor
    without a catalogue counts as its health: an Alarm quarantines, a Warning warns. Tools
    without a health verdict (rocm-smi) skip."""
    # device_health -> rules -> preflight -> checks: imported here, not at module level
    from gpufleet.domain.device_health import shipped_catalogue
    from gpufleet.domain.fault_catalogue import judge_codes
    from gpufleet.domain.preflight import Action
    from gpufleet.domain.rules import Severity

    name = "accelerator_health"
    judged = [a for a in facts.accelerators if a.health is not Health.UNKNOWN]
    if not judged:
        return res(name, CheckStatus.SKIP, "no accelerator health reported")
    catalogues = ctx.fault_catalogues or shipped_catalogue
    levels: dict[str, dict[str, str]] = {}

    def verdict(a: Accelerator) -> tuple[Severity, str]:
        own = Severity.CRITICAL if a.health is Health.ALARM else Severity.WARNING
        codes = f" [{' '.join(a.error_codes)}]" if a.error_codes else ""
        text = f"{_name(a)} {a.health}{codes}"
        catalogue = catalogues(str(a.vendor)) if a.error_codes else None
        if catalogue is None:
            return own, text
        v = judge_codes(catalogue, a.error_codes, (own, Action.NONE))
        levels[f"{a.vendor}:{a.index}"] = {e.code: e.level for e in v.found}
        if v.unknown and v.severity is own:
            return own, f"{text}: {' '.join(v.unknown)} not in the {a.vendor} fault catalogue"
        worst = v.found[0]
        return v.severity, f"{text}: {worst.code} {worst.level} -> {worst.action.value}"

    unwell = [verdict(a) for a in judged if a.health is not Health.OK]
    ev: dict[str, Any] = {
        "health": {f"{a.vendor}:{a.index}": a.health.value for a in judged},
        "error_codes": {f"{a.vendor}:{a.index}": list(a.error_codes) for a in judged
                        if a.error_codes},
        "fault_levels": levels,
    }
    by = {sev: [text for s, text in unwell if s is sev] for sev in Severity}
    if by[Severity.CRITICAL]:
        msg = "; ".join(by[Severity.CRITICAL] + by[Severity.WARNING])
        return res(name, CheckStatus.FAIL, msg, Fault.ACCELERATOR_ALARM, **ev)
    if by[Severity.WARNING]:
        return res(name, CheckStatus.WARN, "; ".join(by[Severity.WARNING]), **ev)
    ok = sum(1 for a in judged if a.health is Health.OK)
    noted = f"; record only: {'; '.join(by[Severity.INFO])}" if by[Severity.INFO] else ""
    return res(name, CheckStatus.PASS, f"{ok} accelerators report health OK{noted}", **ev)


@check("accelerator_links")
def accelerator_links(
    facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]
) -> CheckResult:
    """Every accelerator network port is up (Ascend RoCE ports: ``hccn_tool -link`` and its
    network health, ``-net_health``); device to device links without a state (HCCS, XGMI
    topology) are not judged."""
    name = "accelerator_links"
    ports = [(a, ln) for a in facts.accelerators for ln in a.links if ln.peer is None]
    if not ports:
        return res(name, CheckStatus.SKIP, "no accelerator network ports reported")
    down = [(a, ln) for a, ln in ports if ln.state is not LinkState.UP]
    ev: dict[str, Any] = {"ports": len(ports), "down": [f"{a.vendor}:{a.index}" for a, _ in down]}
    if down:
        msg = ", ".join(f"{ln.kind} port of {_name(a)} {ln.state}" for a, ln in down)
        return res(name, CheckStatus.FAIL, msg, Fault.IB_DOWN, **ev)
    kinds = ", ".join(sorted({ln.kind for _, ln in ports}))
    return res(name, CheckStatus.PASS, f"{len(ports)} accelerator port states up ({kinds})", **ev)


@check("accelerator_temperature", max_c=NUMBER, by_model=dict)
def accelerator_temperature(
    facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]
) -> CheckResult:
    """No accelerator above its limit: ``by_model`` (``{model substring: max C}``, matched
    case-insensitively against ``"<vendor> <model>"``, first match wins: the threshold follows
    what the host reports), else ``max_c`` (default :data:`DEFAULT_MAX_C`)."""
    name = "accelerator_temperature"
    default = float(params.get("max_c", DEFAULT_MAX_C))
    by_model = dict(params.get("by_model") or {})
    for key, value in by_model.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            msg = f"profile parameter by_model[{key!r}] is not a temperature: {value!r}"
            return res(name, CheckStatus.FAIL, msg)
    temps = [a for a in facts.accelerators if a.temperature_c is not None]
    if not temps:
        return res(name, CheckStatus.SKIP, "no accelerator temperature reported")

    def limit(a: Accelerator) -> float:
        label = f"{a.vendor} {a.model}".lower()
        return next(
            (float(v) for k, v in by_model.items() if str(k).lower() in label), default
        )

    hot = [a for a in temps if (a.temperature_c or 0) > limit(a)]
    limits = sorted({limit(a) for a in temps})
    ev: dict[str, Any] = {
        "max_c": limits[0] if len(limits) == 1 else limits,
        "hottest_c": max(a.temperature_c or 0 for a in temps),
    }
    if hot:
        msg = ", ".join(f"{_name(a)} {a.temperature_c:g} C > {limit(a):g} C" for a in hot)
        return res(name, CheckStatus.FAIL, msg, **ev)
    under = "/".join(f"{x:g}" for x in limits)
    return res(name, CheckStatus.PASS, f"{len(temps)} accelerators at or under {under} C", **ev)
