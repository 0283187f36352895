"""Reasons as a code and parameters (issue 29 item 8), rendered in English as before.

A check or a validation step says *why* with a :class:`Reason`: a stable ``code`` (a key of
:data:`TEMPLATES`) and its ``params`` (numbers, names, versions). Its English text
(:attr:`Reason.text`) is what the stored ``message``/``reason`` strings and the JSON hold,
word for word as before; the code and params are stored beside it (a check result's
``code`` and ``params``) for machines, and a person reading Chinese gets the template of
the code translated (:func:`localize` with the caller's ``_``).

Stored text from before the codes, or from a row that only kept the string (a host's
``status_reason``), is read back by :func:`parse`: every template is also a pattern, so
``"nccl: no NCCL all-reduce result (required)"`` is the ``check`` prefix and the code
``active.missing_required`` with ``what="NCCL all-reduce"``. A piece no template matches
stays as it is (English): never a guess.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any


def N_(message: str) -> str:
    """Marks a template for extraction (``make messages``); translated where it is shown."""
    return message


#: code -> English template (``str.format`` fields; ``{x:g}`` formats a number).
TEMPLATES: dict[str, str] = {
    # --- active tests (domain/checks/active.py)
    "active.missing": N_("no {what} result"),
    "active.missing_since": N_("no {what} result since {since}"),
    "active.missing_required": N_("no {what} result (required)"),
    "active.missing_since_required": N_("no {what} result since {since} (required)"),
    "active.dcgm_failed": N_("DCGM diag failed"),
    "active.dcgm_failed_on": N_("DCGM diag failed on GPU {gpus}"),
    "active.dcgm_failed_error": N_("DCGM diag failed ({error})"),
    "active.dcgm_failed_on_error": N_("DCGM diag failed on GPU {gpus} ({error})"),
    "active.dcgm_passed": N_("DCGM diag passed"),
    "active.burn_instead": N_("gpu-burn OK on all GPUs (no DCGM diag)"),
    "active.dcgm_shallow": N_("DCGM diag ran at level {level}, level {min_level} required"),
    "active.dcgm_unknown_level": N_(
        "DCGM diag ran at an unknown level, level {min_level} required"
    ),
    "active.nccl_no_busbw": N_("NCCL test reported no bus bandwidth"),
    "active.nccl_wrong": N_("NCCL test reported {wrong} wrong values (data corruption)"),
    "active.nccl_below": N_("NCCL busbw {busbw:g} GB/s below {floor:g} GB/s"),
    "active.nccl_no_floor": N_(
        "no NCCL bus-bandwidth floor known for {product} (set min_busbw_gbps in the profile)"
    ),
    "active.nccl_below_model": N_(
        "NCCL all-reduce peak busbw {peak:g} GB/s below the {model} floor {floor:g} GB/s"
    ),
    "active.nccl_model_ok": N_("NCCL all-reduce peak busbw {peak:g} GB/s (floor {floor:g} GB/s)"),
    "active.nccl_ok": N_("NCCL busbw {busbw:g} GB/s"),
    "active.burn_failed": N_("gpu-burn failed"),
    "active.burn_failed_on": N_("gpu-burn failed on GPU {gpus}"),
    "active.burn_ok": N_("gpu-burn OK on all GPUs"),
    # --- GPU inventory (domain/checks/gpu.py, accelerator.py)
    "gpu.count_bus_missing": N_(
        "driver sees {n} of {bus} NVIDIA GPUs on the PCI bus (missing from the driver: {missing})"
    ),
    "gpu.count_bus": N_("driver sees {n} of {bus} NVIDIA GPUs on the PCI bus"),
    "gpu.count_expected": N_("driver sees {n} GPUs, expected {expected}"),
    "gpu.count_ok_bus": N_("{n} GPUs (driver and PCI bus agree)"),
    "gpu.count_ok": N_("{n} GPUs"),
    "accel.count_bus_missing": N_(
        "{vendor} tool sees {n} of {bus} accelerators on the PCI bus"
        " (missing from the tool: {missing})"
    ),
    "accel.count_bus": N_("{vendor} tool sees {n} of {bus} accelerators on the PCI bus"),
    "accel.count_expected": N_("{vendor} tool sees {n} accelerators, expected {expected}"),
    # --- Xid (domain/checks/xid.py)
    "xid.fatal_on": N_("fatal Xid {code} ({mnemonic}, {action}) x{count} on {where}"),
    "xid.fatal": N_("fatal Xid {code} ({mnemonic}, {action}) x{count}"),
    "xid.none": N_("no Xid in the last {hours}h"),
    # --- fabric (domain/checks/fabric.py, nvl_fabric.py)
    "fabric.ib_ports_down": N_(
        "{up} of {total} IB/RoCE ports up at >= {speed} Gb/s, need {need}; down: {down}"
    ),
    "fabric.not_nvl_required": N_("not in a multi-node NVLink domain (required)"),
    "fabric.not_nvl": N_("not in a multi-node NVLink domain"),
    # --- drift (domain/checks/drift.py), one pin off the baseline
    "drift.one": N_("drift from baseline {baseline}: {field} {actual}, expected {expected}"),
    "drift.more": N_("{field} {actual}, expected {expected}"),
    "drift.no_baseline": N_("no baseline assigned"),
    # one (field, value) across the fleet (DriftSummary.describe: the dashboard's overview)
    "drift.summary_one": N_("{field} {found} on {n} host, baseline {expected}"),
    "drift.summary": N_("{field} {found} on {n} hosts, baseline {expected}"),
    # --- memory (domain/checks/memory.py)
    "memory.remap_pending": N_("row remapping pending on GPU {gpus}: needs GPU reset"),
    # --- other vendors' accelerators (domain/checks/accelerator.py)
    "accel.alarm": N_("{vendor} #{index} ({pci}) alarm [{codes}]: {detail}"),
    "accel.alarm_unknown": N_(
        "{vendor} #{index} ({pci}) alarm [{codes}]: {unknown} not in the {cat} fault "
        "catalogue"
    ),
    "accel.warning_unknown": N_(
        "{vendor} #{index} ({pci}) warning [{codes}]: {unknown} not in the {cat} fault "
        "catalogue"
    ),
    "accel.warning": N_("{vendor} #{index} ({pci}) warning [{codes}]: {detail}"),
    "accel.alarm_codes": N_("{vendor} #{index} ({pci}) alarm [{codes}]"),
    "accel.warning_codes": N_("{vendor} #{index} ({pci}) warning [{codes}]"),
    "accel.alarm_plain": N_("{vendor} #{index} ({pci}) alarm"),
    "accel.warning_plain": N_("{vendor} #{index} ({pci}) warning"),
    "accel.health_ok_noted": N_("{n} accelerators report health OK; record only: {noted}"),
    "accel.port_down": N_("{kind} port of {vendor} #{index} ({pci}) {lstate}"),
    # --- validation itself (service/hosts/validate.py)
    "validate.not_in_state": N_("not validated in state {state}"),
    "validate.not_collected_here": N_(
        "not collected in this run (another worker is collecting it)"
    ),
    "validate.not_collected": N_("not collected: {outcome} ({error})"),
    "validate.no_facts": N_("no facts collected yet"),
    "validate.no_profiles": N_("no profiles configured"),
    # --- collection and active-test runs (what a run could not do, per host)
    "run.unreachable": N_("unreachable: {error}"),
    "run.timeout": N_("timeout: {error}"),
    "run.auth_failed": N_("auth failed: {error}"),
    "run.host_key_changed": N_("host key changed: {error}"),
    "run.bad_output": N_("bad output: {error}"),
    "run.held_elsewhere": N_(
        "skipped: another worker holds this host (collecting or testing it)"
    ),
    "collect.refused": N_("connect to {target}: Connection refused"),
    "collect.no_route": N_("connect to {target}: No route to host"),
    "collect.malformed_xml": N_("{source}: malformed XML: {detail}"),
    # --- rack incidents (service/hosts/rack_fold.py): the alarm's message, a tray's restriction
    "rack.incident": N_(
        "rack incident: NVLink domain {domain} (rack {rack}): rack-scoped fabric findings on "
        "{n} of {trays} trays ({hosts}); its hosts are restricted (out of NVLink-domain "
        "placement)"
    ),
    "rack.drain": N_(
        "recommended: drain the rack (maintenance of every tray, approve by running the "
        "command in the alarm's data)"
    ),
    "rack.restricted": N_("rack incident (alarm {alarm})"),
    # --- check messages (domain/checks/*): gpu, memory, host, node, fabric, xid, drift, accel
    "gpu.smi_failed_lost": N_(
        "nvidia-smi failed ({err}) with {n} NVIDIA GPUs on the PCI bus: GPU lost"
    ),
    "gpu.smi_failed_driver": N_(
        "nvidia-smi failed ({err}) with {n} NVIDIA GPUs on the PCI bus: driver not loaded"
    ),
    "gpu.smi_failed_expected": N_("nvidia-smi failed ({err}); expected {expected} GPUs"),
    "gpu.no_driver_no_gpu": N_(
        "no working NVIDIA driver ({err}); no NVIDIA GPU on the PCI bus: not usable for GPU "
        "work"
    ),
    "gpu.no_driver_no_lspci": N_(
        "no working NVIDIA driver ({err}); lspci not collected: not usable for GPU work"
    ),
    "gpu.error_state": N_("GPU in error state: {detail}"),
    "gpu.none_visible": N_("no GPUs visible to the driver: not usable for GPU work"),
    "gpu.none_visible_no_lspci": N_(
        "no GPUs visible to the driver (lspci not collected): not usable for GPU work"
    ),
    "gpu.count_unknown": N_(
        "driver sees {n} GPUs, but lspci was not collected and no GPU count is expected: "
        "cannot tell whether a GPU is missing"
    ),
    "gpu.no_models": N_("no GPU models reported"),
    "gpu.all_are": N_("all GPUs are {model}"),
    "gpu.no_model_expected": N_("no GPU model expected"),
    "gpu.none_visible_see": N_("no GPUs visible to the driver (see gpu_count)"),
    "gpu.model_wrong": N_("GPU {gpus}: {got}, expected {expected}"),
    "gpu.all_match": N_("all GPUs match {model}"),
    "gpu.no_memory_expected": N_("no GPU memory expected"),
    "gpu.no_memory": N_("no GPU memory reported"),
    "gpu.memory_wrong": N_("{got}, expected {expected} MiB"),
    "gpu.memory_ok": N_("GPU memory matches {expected} MiB"),
    "memory.no_ecc_mode": N_("no GPU reports an ECC mode"),
    "memory.ecc_off": N_("ECC disabled on GPU {gpus}"),
    "memory.ecc_off_later": N_("ECC disabled on GPU {gpus} (enabled after the next reboot)"),
    "memory.ecc_pending": N_("ECC mode change pending on GPU {gpus}: needs a reboot"),
    "memory.ecc_on": N_("ECC enabled on {n} GPUs"),
    "memory.no_ecc_counters": N_("no ECC counters reported"),
    "memory.ecc_volatile": N_("uncorrectable ECC errors since driver load ({detail})"),
    "memory.ecc_lifetime_over": N_(
        "lifetime uncorrectable ECC errors at or above {threshold} ({detail})"
    ),
    "memory.ecc_lifetime": N_(
        "lifetime uncorrectable ECC errors, none since driver load ({detail})"
    ),
    "memory.ecc_none": N_("no uncorrectable ECC errors"),
    "memory.no_remap": N_("no GPU reports row remapping"),
    "memory.remap_failed": N_("row remapping failure on GPU {gpus}: field diagnostics and RMA"),
    "memory.remap_ok": N_("no row remapping pending or failed"),
    "memory.no_retired": N_("no GPU reports retired pages"),
    "memory.retired_over": N_("retired pages at or above {threshold} of 64 ({detail})"),
    "memory.retire_pending": N_("page retirement pending on GPU {gpus}: needs GPU reset"),
    "memory.retired_ok": N_("retired pages below {threshold}"),
    "host.no_persistence": N_("no GPU reports persistence mode"),
    "host.persistence_off": N_("persistence mode off on GPU {gpus}"),
    "host.persistence_on": N_("persistence mode on for {n} GPUs"),
    "host.no_modules": N_("kernel modules not collected"),
    "host.nouveau": N_("nouveau kernel module is loaded"),
    "host.no_nouveau": N_("nouveau not loaded"),
    "host.no_pcie": N_("no PCIe link expected"),
    "host.pcie_gen": N_("GPU {gpu} gen {gen} < {want}"),
    "host.pcie_width": N_("GPU {gpu} x{width} < x{want}"),
    "host.pcie_no_gpus": N_("no GPUs to check the PCIe link of"),
    "host.pcie_unreported": N_("PCIe link expected but not reported for GPU {gpus}"),
    "host.pcie_ok": N_("PCIe links as expected on {n} GPUs"),
    "node.not_collected": N_("not collected: {items}"),
    "node.os_ok": N_("{os} on kernel {kernel}"),
    "node.gpus_expected": N_("{n} GPUs expected"),
    "node.no_lspci": N_("lspci not collected: cannot tell the host has no GPU"),
    "node.found": N_("{n} GPU/accelerator device(s) found on a host not in the gpu role"),
    "node.no_accel": N_("no accelerator among {n} PCI devices"),
    "node.no_disks": N_("disks not collected (lsblk)"),
    "node.disks_low": N_("{count} disk(s), {gib} GiB; expected at least {want} and {want_gib} GiB"),
    "node.disks_ok": N_("{count} disk(s), {gib} GiB"),
    "proof.partial": N_("partial host: {why}"),
    "proof.baseline_status": N_("baseline {baseline} is {bstatus}, {required} required"),
    "proof.baseline_ok": N_("baseline {baseline} ({required})"),
    "proof.all_usable": N_("every GPU usable"),
    # --- health rules' findings (domain/rules.py) and their alarms (service/health/inspect_act)
    "rule.xid_gpu": N_("GPU {gpu}: {n} x {xid} in {window} s"),
    "rule.xid": N_("{n} x {xid} in {window} s"),
    "rule.metric": N_("{metric} +{n} in {window} s"),
    "rule.hits": N_("{hit} ({n} in {window} s)"),
    "rule.sweeps": N_("{finding} ({sweeps} sweeps in a row)"),
    "rule.answer": N_("{metric} {value} ({n} of {expected} GPUs answer)"),
    "rule.gpu": N_("GPU {gpu}: {finding}"),
    "rule.port": N_("port {port}: {finding}"),
    "rule.set": N_("{metric} set"),
    "rule.under_load": N_("{metric} {value} under load, fleet median {median} for {model}"),
    "rule.disk": N_("{path} {pct}% used"),
    "inspect.restricted": N_("restricted: {finding}"),
    # --- the inspect sweep's actions (service/health/inspect_act.py); {finding}: a message
    "inspect.noted": N_("noted: {finding}"),
    "inspect.alarm": N_("alarm {severity}: {finding}"),
    "inspect.cleared": N_("cleared: {finding}"),
    "inspect.closed": N_("closed: {finding}"),
    "inspect.quarantined": N_("quarantined: {finding}"),
    "inspect.guard": N_("quarantine held by the blast-radius guard"),
    "inspect.back": N_("findings cleared: back to validating"),
    "inspect.lease": N_("lease {id} owner {owner} notified (lease kept)"),
    # --- bmc status: the NotReady runbook's first step (domain/bmc.py diagnose)
    "bmc.all_down": N_(
        "SSH {ssh} and BMC {bmc}: machine, power or rack network down (check PDU, cabling, "
        "management network)"
    ),
    "bmc.off": N_("SSH down, BMC says power Off: powered off (power it on: gpufleet bmc power on)"),
    "bmc.hung": N_(
        "SSH down but BMC says On, health OK: OS hung or host network down (look at the "
        "console / SEL before rebooting)"
    ),
    "bmc.fault": N_(
        "SSH down, BMC says power {power}, health {health}: hardware fault likely (read the SEL)"
    ),
    # --- remediation steps' details (service/health/remediation*.py, domain/remediation.py)
    "remedy.restarted": N_("{service} restarted, {state}"),
    "remedy.not_active": N_("{service} restarted but is not active: {state}"),
    "remedy.restart_failed": N_("restart {service} failed (rc {rc}): {output}"),
    "remedy.plugin": N_(
        "device plugin container stopped ({output}); the kubelet starts it again"
    ),
    "remedy.rebooted": N_("rebooted (systemctl reboot); the host answers again"),
    "remedy.reboot_refused": N_("systemctl reboot refused: {output}"),
    "remedy.not_back": N_("the host did not come back within {seconds} s"),
    "remedy.cycled": N_("power cycled through the BMC (power {power})"),
    "remedy.answers": N_("the host answers again"),
    "remedy.no_answer": N_("the host did not answer within {seconds} s"),
    "remedy.no_bmc": N_("no usable BMC: {error}"),
    "remedy.cycle_failed": N_("BMC power cycle failed: {error}"),
    "remedy.unknown_holder": N_("cannot tell who holds the GPU: {holders}"),
    "remedy.in_use": N_(
        "the GPU is in use: {holders} (policy: refuse; stop them or set holders: stop)"
    ),
    "rule.recommended": N_("{what} (recommended: {rec})"),
    # --- validation holds (service/hosts/validate.py, domain/identity.py, core/lifecycle.py)
    "host.duplicate": N_(
        "same machine as host {other} (same {what}: {shown}); not counted twice: remove one of "
        "the two names"
    ),
    "host.duplicate_alarm": N_(
        "duplicate host: same machine as host {other} (same {what}: {shown}); not counted "
        "twice: remove one of the two names"
    ),
    "host.reclaim_owed": N_(
        "host {name} owes a passing reclaim ({due}): run 'gpufleet reclaim {name}' to re-run "
        "the checks, or 'gpufleet unquarantine {name} --force --reason ...' (recorded)"
    ),
    "fabric.nvlink_missing_expected": N_("NVLink status not collected, expected {expected}/GPU"),
    "fabric.nvlink_unavailable_expected": N_(
        "NVLink status unavailable ({why}), expected {expected}/GPU"
    ),
    "fabric.nvlink_missing": N_("NVLink status not collected"),
    "fabric.nvlink_unavailable": N_("NVLink status unavailable ({why})"),
    "fabric.no_nvlinks": N_("no NVLinks (PCIe GPUs)"),
    "fabric.link_inactive": N_("GPU {gpu} link {links} inactive"),
    "fabric.link_count": N_("GPU {gpu} has {n} active links, expected {expected}"),
    "fabric.topology": N_("topology expects {link} between GPUs: {pairs}"),
    "fabric.nvlinks_ok": N_("{total} NVLinks active on {n} GPUs"),
    "fabric.no_nvswitch": N_("no NVSwitch expected"),
    "fabric.fm_missing": N_("fabric manager state not collected"),
    "fabric.fm_down": N_("nvidia-fabricmanager not running on an NVSwitch system"),
    "fabric.fm_ok": N_("nvidia-fabricmanager running"),
    "fabric.no_fabric": N_("no high-speed fabric expected"),
    "fabric.no_ib": N_("no IB/RoCE ports expected"),
    "fabric.ib_missing": N_("IB/RoCE ports not collected ({why}); need {need}"),
    "fabric.ib_short": N_("{up} of {total} IB/RoCE ports up at >= {speed} Gb/s, need {need}"),
    "fabric.ib_some_down": N_("{up} of {total} IB/RoCE ports up at >= {speed} Gb/s; down: {down}"),
    "fabric.ib_ok": N_("{up} of {total} IB/RoCE ports up at >= {speed} Gb/s"),
    "fabric.ib_ok_any": N_("{up} of {total} IB/RoCE ports up"),
    "fabric_ready.no_report": N_("GPU report not collected: fabric state unknown"),
    "fabric_ready.no_report_skip": N_("GPU report not collected; no NVSwitch expected"),
    "fabric_ready.no_state": N_("GPU {gpu} ({arch}) reports no fabric state"),
    "fabric_ready.state": N_("GPU {gpu} fabric state {fstate} (status {status})"),
    "fabric_ready.status": N_("GPU {gpu} fabric status {status}"),
    "fabric_ready.fm_version": N_("fabric manager version not collected"),
    "fabric_ready.fm_differs": N_("fabric manager {fm} differs from driver {driver}"),
    "fabric_ready.modules": N_("kernel modules not collected (need {modules})"),
    "fabric_ready.module_missing": N_("kernel module {modules} not loaded"),
    "fabric_ready.no_nvswitch": N_("no NVSwitch fabric"),
    "fabric_ready.ok": N_("fabric Completed on {n} GPUs"),
    "nvl.no_report": N_("GPU report not collected: fabric unknown"),
    "xid.no_log": N_("kernel log not collected or unreadable: cannot rule out a fatal Xid"),
    "xid.no_log_why": N_(
        "kernel log not collected or unreadable: cannot rule out a fatal Xid ({why})"
    ),
    "xid.unreadable": N_(
        "{n} unreadable Xid line(s) in the kernel log (line {lines}): cannot rule out a fatal"
        " Xid"
    ),
    "xid.unreadable_piece": N_("{n} unreadable Xid line(s) in the kernel log (line {lines})"),
    "xid.piece_on": N_("Xid {code} ({mnemonic}, {action}) x{count} on {where}"),
    "xid.piece": N_("Xid {code} ({mnemonic}, {action}) x{count}"),
    "xid.also_on": N_("also Xid {code} ({mnemonic}, {action}) x{count} on {where}"),
    "xid.also": N_("also Xid {code} ({mnemonic}, {action}) x{count}"),
    "xid.nonfatal_on": N_("non-fatal Xid {code} ({mnemonic}, {action}) x{count} on {where}"),
    "xid.nonfatal": N_("non-fatal Xid {code} ({mnemonic}, {action}) x{count}"),
    "drift.not_pinned": N_("baseline {baseline} does not pin the {label}"),
    "drift.not_collected": N_("{label} not collected"),
    "drift.as_baseline": N_("{label} as in baseline {baseline}"),
    "drift.one_of": N_("{title} not in baseline {baseline} ({expected}): {detail}"),
    "accel.tool_failed": N_("accelerator tool failed: {detail}"),
    "accel.none": N_("no accelerators reported: not usable"),
    "accel.count_unknown": N_(
        "{n} accelerators, but lspci was not collected and no count is expected"
    ),
    "accel.no_model_expected": N_("no accelerator model expected"),
    "accel.none_see": N_("no accelerators reported (see gpu_count)"),
    "accel.all_match": N_("all accelerators match {model}"),
    "accel.no_models": N_("no accelerator models reported"),
    "accel.mixed": N_("mixed accelerator models: {models}"),
    "accel.all_are": N_("all accelerators are {model}"),
    "accel.no_memory_expected": N_("no accelerator memory expected"),
    "accel.no_memory": N_("no accelerator memory reported"),
    "accel.memory_ok": N_("accelerator memory matches {expected} MiB"),
    "accel.no_health": N_("no accelerator health reported"),
    "accel.health_ok": N_("{n} accelerators report health OK"),
    "accel.no_ports": N_("no accelerator network ports reported"),
    "accel.ports_ok": N_("{n} accelerator port states up ({kinds})"),
    "accel.no_temp": N_("no accelerator temperature reported"),
    "accel.temp_ok": N_("{n} accelerators at or under {under} C"),
    "accel.count_ok_bus": N_("{n} {vendor} accelerators (tool and PCI bus agree)"),
    "accel.count_ok": N_("{n} {vendor} accelerators"),
}

#: Fragments a parameter may hold (``what``, ``since``), translated as a whole.
FRAGMENTS: dict[str, str] = {
    "what.dcgm_level_or_burn": N_("DCGM diag at level {level} or deeper or gpu-burn"),
    "what.dcgm_level": N_("DCGM diag at level {level} or deeper"),
    "what.dcgm_or_burn": N_("DCGM diag or gpu-burn"),
    "what.dcgm": N_("DCGM diag"),
    "what.nccl": N_("NCCL all-reduce"),
    "what.burn": N_("gpu-burn"),
    "since.change": N_("the {change} on {day}"),
}

#: Parameters whose value is a word or a :data:`FRAGMENTS` text (translated), not data.
WORD_PARAMS = frozenset(
    {"what", "since", "change", "outcome", "state", "actual", "error", "bstatus", "required",
     "severity"}
)
#: Parameters that are a whole number (their pattern: digits only).
NUMBER_PARAMS = frozenset({"sweeps"})
#: Parameters whose value is a whole stored message of its own (read back by :func:`localize`).
NESTED_PARAMS = frozenset({"finding"})

#: The words of :data:`WORD_PARAMS` values, marked for extraction.
WORDS = (
    N_("driver change"), N_("firmware change"), N_("change"), N_("unset"),
    N_("kernel change"), N_("hardware change"), N_("GPU UUIDs"), N_("system UUID"),
)

Param = str | int | float


class _Formatter(string.Formatter):
    """``str.format`` that shows a parsed-back value (text) as it is, whatever its spec."""

    def format_field(self, value: Any, format_spec: str) -> Any:
        if isinstance(value, str):
            return value
        return super().format_field(value, format_spec)


_FMT = _Formatter()


@dataclass(frozen=True, slots=True)
class Reason:
    """Why, as a code of :data:`TEMPLATES` (or :data:`FRAGMENTS`) and its parameters; a
    parameter may itself be a :class:`Reason` (a fragment)."""

    code: str
    params: Mapping[str, Param | Reason] = field(default_factory=dict)

    def render(self, tr: Callable[[str], str] | None = None) -> str:
        """The text, its template translated by ``tr`` (None: English)."""
        template = TEMPLATES.get(self.code) or FRAGMENTS[self.code]
        values: dict[str, Any] = {}
        for k, v in self.params.items():
            if isinstance(v, Reason):
                values[k] = v.render(tr)
            elif tr is not None and k in NESTED_PARAMS and isinstance(v, str):
                values[k] = localize(v, tr)
            elif tr is not None and k in WORD_PARAMS and isinstance(v, str):
                values[k] = tr(v)
            else:
                values[k] = v
        return _FMT.format(tr(template) if tr else template, **values)

    @property
    def text(self) -> str:
        """The English text (what is stored and in JSON)."""
        return self.render()

    def __str__(self) -> str:
        return self.text

    def as_json(self) -> dict[str, Any]:
        """``{"code": ..., "params": {...}}`` (a fragment as one more such object)."""
        return {
            "code": self.code,
            "params": {
                k: v.as_json() if isinstance(v, Reason) else v for k, v in self.params.items()
            },
        }


def reason(code: str, **params: Param | Reason) -> Reason:
    """A :class:`Reason`; raises KeyError for a code that is not in the registry."""
    if code not in TEMPLATES and code not in FRAGMENTS:
        raise KeyError(f"unknown reason code {code!r}")
    return Reason(code, params)


# ---------------------------------------------------------------------------- parsing back

_FIELD = re.compile(r"\{(\w+)(?::[^}]*)?\}")
_PARAM = r"(?:(?!; ).)+?"


def _pattern(template: str) -> str:
    out, pos, seen = [], 0, set()
    for m in _FIELD.finditer(template):
        out.append(re.escape(template[pos : m.start()]))
        name = m.group(1)  # a field used twice ("{name}" of reclaim_owed) is the same text
        param = r"\d+" if name in NUMBER_PARAMS else _PARAM
        out.append(f"(?P={name})" if name in seen else f"(?P<{name}>{param})")
        seen.add(name)
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return "".join(out)


def _literal(template: str) -> int:
    return len(_FIELD.sub("", template))


@cache
def _compiled(kind: str) -> list[tuple[str, str, str, re.Pattern[str]]]:
    table = TEMPLATES if kind == "t" else FRAGMENTS
    # The most literal text first: "failed on GPU {gpus} ({error})" before "on GPU {gpus}".
    # (a tie: one that starts with text first, "alarm {severity}: ..." before "{metric} +...")
    codes = sorted(table, key=lambda c: (-_literal(table[c]), table[c].startswith("{")))
    # Each with the literal text it starts and ends with: cheap tests before the pattern
    # (every check result is parsed when it is made).
    return [
        (c, table[c].split("{", 1)[0], table[c].rsplit("}", 1)[-1] if "{" in table[c] else "",
         re.compile(_pattern(table[c]) + r"\Z", re.DOTALL))
        for c in codes
    ]


@lru_cache(maxsize=8192)
def parse(text: str, *, fragment: bool = False) -> Reason | None:
    """The :class:`Reason` whose English text is ``text`` exactly (None: no template).
    Remembered per text (a fleet's passing checks say the same few hundred things; a
    :class:`Reason` is never changed once made)."""
    for code, head, tail, pattern in _compiled("f" if fragment else "t"):
        if not (text.startswith(head) and text.endswith(tail)):
            continue
        m = pattern.match(text)
        if m is not None:
            params: dict[str, Param | Reason] = {}
            for k, v in m.groupdict().items():
                sub = (parse(v, fragment=True) or parse(v)) if k in WORD_PARAMS else None
                params[k] = sub if sub is not None else v
            return Reason(code, params)
    return None


_PIECE = re.compile(
    r"(?:not (?P<profile>[\w.-]+): )?(?:(?P<check>[a-z][a-z0-9_-]*(?:\[[\w.-]+\])?): )?"
)


def localize(text: str | None, tr: Callable[[str], str]) -> str:
    """A stored reason text (``"check: message; check: message"``, ``"not PROFILE: ..."``)
    with every piece a template matches translated by ``tr``; the rest as it is."""
    if not text:
        return text or ""
    pieces = text.split("; ")
    out: list[str] = []
    i = 0
    while i < len(pieces):
        done = False
        # A message may hold "; " itself (ib_ports' "...; need 8; down: ..."): the most pieces
        # first (a parameter never spans "; ", so only a template with "; " in it joins them).
        for j in range(min(len(pieces), i + 3), i, -1):
            rendered = _piece("; ".join(pieces[i:j]), tr)
            if rendered is not None:
                out.append(rendered)
                i, done = j, True
                break
        if not done:
            out.append(pieces[i])
            i += 1
    return tr(N_("; ")).join(out)


def _piece(piece: str, tr: Callable[[str], str]) -> str | None:
    head = _PIECE.match(piece)
    assert head is not None  # every group is optional
    check = head.group("check")
    # "unreachable: ..." is a whole message, not a check named "unreachable": whole first.
    found = parse(piece[head.start("check") :]) if check else None
    if found is not None and not TEMPLATES[found.code].startswith("{"):
        check = None
    else:
        found = parse(piece[head.end() :])
    if found is None:
        return None
    message = found.render(tr)
    if check:
        message = tr(N_("{check}: {message}")).format(check=check, message=message)
    if head.group("profile"):
        message = tr(N_("not {profile}: {why}")).format(profile=head.group("profile"), why=message)
    return message
