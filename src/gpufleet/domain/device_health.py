"""Vendor-neutral inspection of accelerators other than NVIDIA's (issue 24 item 3).

A vendor plugin that can be inspected declares a :class:`~gpufleet.domain.vendors.VendorInspector`:
the probe commands (its ``inspect_sections``) and the reader of their answers
(``parse_inspect``, giving an :class:`~gpufleet.domain.accelerators.AcceleratorInventory`, the
same records the collection reads). Everything after that is here, pure and shared by every
vendor:

* :func:`device_samples` turns the records into the sweep's per-device samples
  (:class:`~gpufleet.domain.rules.GpuSample`: index, UUID, model, PCI bus id, temperature,
  power and limit, memory used), stored in ``gpu_samples`` like NVIDIA's, so the temperature
  and ECC rules of the policy read them too; network ports of the devices (an Ascend NPU's
  RoCE port) become :class:`~gpufleet.domain.rules.PortSample`\\ s (``huawei:3/roce``);
* :func:`device_faults` names what the records say is wrong: a device whose tool reports it
  unhealthy (with the tool's error codes), a device port down;
* :func:`device_findings` turns faults into :class:`~gpufleet.domain.rules.Finding`\\ s with the
  severity and recommended action of the policy's ``device`` rules (``health_rules.yaml``:
  ``accelerator-unhealthy``, ``accelerator-warning``, ``accelerator-link-down``), which a site
  overlay may change. A device in alarm or warning whose tool gives error codes is judged by
  its vendor's fault catalogue (:mod:`gpufleet.domain.fault_catalogue`: the vendor's handling
  level of each code -> severity and action, the worst code deciding; ``NotHandle`` codes
  alone are only noted), and the finding carries the vendor's cause and suggestion (English
  and Chinese) in its message and data. A code the catalogue does not know fails closed to
  the device rule's own verdict (Alarm: ``accelerator-unhealthy``, critical, ``reset_gpu``),
  as if the tool had printed no code: an unknown code never makes a device look better than
  its tool says it is.

What is not a device's fault but a failure to observe (the vendor's tool missing, failing,
timing out or printing what cannot be read) is a :class:`~gpufleet.domain.samples.ProbeFailure`
as for NVIDIA, judged by the ``observe`` rules; fewer devices than the host was validated with
is the ``gpus_missing`` host metric (``gpu-count-low``), the devices being the sample's GPUs.

A tool that reports no health (rocm-smi) leaves health unknown: that is no fault. No real
capture of an HBM ECC count exists for Ascend (``npu-smi info -t ecc``) or AMD (rocm-smi's JSON
has none), so no ECC is read for them; a plugin that reads one fills the ECC fields of the
records' error counters named ``ecc_uncorrectable`` / ``ecc_correctable``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.domain.accelerators import Accelerator, AcceleratorInventory, Health, LinkState
from gpufleet.domain.fault_catalogue import FaultCatalogue, judge_codes, with_overlay
from gpufleet.domain.rules import Action, Finding, Rule, RulePolicy, Severity
from gpufleet.domain.samples import GpuSample, PortSample

#: Fault kinds -> the ``metric`` of the policy's ``device`` rule judging them.
UNHEALTHY = "unhealthy"
WARNING = "warning"
LINK_DOWN = "link-down"
DEVICE_FAULTS: frozenset[str] = frozenset({UNHEALTHY, WARNING, LINK_DOWN})
#: Error counters of a record read as the sample's ECC fields.
ECC_COUNTERS = {
    "ecc_uncorrectable": "ecc_volatile_uncorrectable",
    "ecc_correctable": "ecc_volatile_correctable",
}


@dataclass(frozen=True)
class DeviceFault:
    """Something wrong with a vendor's devices seen in one sweep: ``kind`` (one of
    :data:`DEVICE_FAULTS`), the device index (None: the vendor's tool or the host), the port
    (``huawei:3/roce``) for a link, what to tell people, and the tool's error codes."""

    vendor: str
    kind: str
    message: str
    index: int | None = None
    subject: str | None = None
    codes: tuple[str, ...] = ()

#: A vendor -> its fault catalogue (None: it has none).
Catalogues = Callable[[str], FaultCatalogue | None]


def shipped_catalogue(vendor: str) -> FaultCatalogue | None:
    """The catalogue the vendor's plugin ships (loaded on first use), None without one."""
    from gpufleet.domain.vendors import plugin

    load = plugin(vendor).faults
    return load() if load is not None else None


def site_catalogues(text: str, source: str = "<fault overlay>") -> Catalogues:
    """Every installed vendor's catalogue with an operator overlay applied
    (:func:`gpufleet.domain.fault_catalogue.with_overlay`; refused naming file, line, code)."""
    from gpufleet.domain.vendors import plugin, vendor_names

    shipped: dict[str, FaultCatalogue] = {}
    for name in vendor_names():
        load = plugin(name).faults
        if load is not None:
            shipped[name] = load()
    return with_overlay(shipped, text, source=source).get


def port_name(vendor: str, index: int, kind: str) -> str:
    """The sample name of a device's network port: ``huawei:3/roce``."""
    return f"{vendor}:{index}/{kind}"


def device_samples(inv: AcceleratorInventory) -> tuple[GpuSample, ...]:
    """One sample per accelerator (vendor-neutral fields only)."""
    out: list[GpuSample] = []
    for a in sorted(inv.accelerators, key=lambda a: a.index):
        counters = {c.name: c.count for c in a.error_counters}
        ecc = {field: counters[name] for name, field in ECC_COUNTERS.items() if name in counters}
        out.append(
            GpuSample(
                index=a.index,
                uuid=a.uuid,
                model=a.model,
                pci_bus_id=a.bus_id,
                temperature_c=a.temperature_c,
                power_w=a.power_w,
                power_limit_w=a.power_limit_w,
                memory_used_mib=None if a.memory_used_mib is None else float(a.memory_used_mib),
                ecc_volatile_correctable=ecc.get("ecc_volatile_correctable"),
                ecc_volatile_uncorrectable=ecc.get("ecc_volatile_uncorrectable"),
            )
        )
    return tuple(out)


def device_ports(inv: AcceleratorInventory) -> tuple[PortSample, ...]:
    """The devices' network ports (links without a peer device) with their state."""
    return tuple(
        PortSample(port_name(inv.vendor, a.index, ln.kind), ln.state.value.upper())
        for a in sorted(inv.accelerators, key=lambda a: a.index)
        for ln in a.links
        if ln.peer is None
    )


def _health_fault(vendor: str, a: Accelerator) -> DeviceFault | None:
    if a.health not in (Health.ALARM, Health.WARNING):
        return None  # OK, or a tool that reports no health (unknown): nothing to say
    codes = f", error codes {' '.join(a.error_codes)}" if a.error_codes else ""
    kind = UNHEALTHY if a.health is Health.ALARM else WARNING
    return DeviceFault(
        vendor,
        kind,
        f"{vendor} {a.model} #{a.index}: health {a.health.value}{codes}",
        a.index,
        codes=a.error_codes,
    )


def device_faults(inv: AcceleratorInventory) -> tuple[DeviceFault, ...]:
    """What the records say is wrong (see the module doc)."""
    vendor = str(inv.vendor)
    out = [f for a in inv.accelerators if (f := _health_fault(vendor, a)) is not None]
    for a in sorted(inv.accelerators, key=lambda a: a.index):
        for ln in a.links:
            if ln.peer is None and ln.state is LinkState.DOWN:
                name = port_name(vendor, a.index, ln.kind)
                out.append(
                    DeviceFault(vendor, LINK_DOWN, f"{name}: link down", a.index, subject=name)
                )
    return tuple(out)


def device_rule_scope(metric: str | None, consecutive: int) -> str:
    """The scope of a ``device`` rule judging ``metric`` (a port's for a link, so a sweep that
    could not read the ports does not clear its alarm; a device's otherwise);
    :class:`ValueError` for a metric that names no fault or a rule asking for several sweeps
    (a device rule fires on the sweep that saw the fault)."""
    if metric not in DEVICE_FAULTS:
        known = ", ".join(sorted(DEVICE_FAULTS))
        raise ValueError(f"a device rule's metric is one of {known}, not {metric!r}")
    if consecutive != 1:
        raise ValueError("a device rule fires on the sweep that saw the fault (consecutive: 1)")
    return "port" if metric == LINK_DOWN else "gpu"


def device_findings(
    policy: RulePolicy,
    faults: Sequence[DeviceFault],
    catalogues: Catalogues = shipped_catalogue,
) -> list[Finding]:
    """Findings of the policy's enabled ``device`` rules (metric = fault kind) for the faults
    of one sweep (one per fault; a kind no enabled rule judges gives none); a fault with error
    codes is judged by its vendor's catalogue (module doc)."""
    rules = {r.metric: r for r in policy.rules if r.kind == "device" and r.enabled}
    out: list[Finding] = []
    for f in faults:
        rule = rules.get(f.kind)
        if rule is None:
            continue
        severity, action = rule.severity, rule.action or Action.NONE
        message, data = f"{rule.id}: {f.message}", None
        catalogue = catalogues(f.vendor) if f.codes else None
        if catalogue is not None:
            severity, action, message, data = _by_catalogue(rule, f, catalogue)
        out.append(
            Finding(
                rule=rule.id,
                severity=severity,
                action=action,
                message=message,
                gpu_index=f.index,
                subject=f.subject
                if f.subject is not None
                else (f.vendor if f.index is None else None),
                data=data,
            )
        )
    return out


def _by_catalogue(
    rule: Rule, f: DeviceFault, catalogue: FaultCatalogue
) -> tuple[Severity, Action, str, dict[str, Any]]:
    """Severity, action, message and alarm data of a fault whose codes the catalogue judges:
    the worst code decides; an unknown code counts as the rule's own verdict."""
    v = judge_codes(catalogue, f.codes, (rule.severity, rule.action or Action.NONE))
    unknown = list(v.unknown)
    parts = [f"{rule.id}: {f.message}"] + [e.describe() for e in v.found]
    if unknown:
        parts.append(
            f"not in the {f.vendor} fault catalogue: {' '.join(unknown)} "
            f"(judged as {rule.id}: {rule.severity.value}, {(rule.action or Action.NONE).value})"
        )
    data: dict[str, Any] = {"fault_codes": [e.as_data() for e in v.found]}
    if unknown:
        data["unknown_codes"] = unknown
    return v.severity, v.action, " | ".join(parts), data
