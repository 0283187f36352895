"""The lab fleet: its hosts (model, faults, identity salt), building and changing a fleet,
saving it (``lab.json``) and writing its inventory."""

from __future__ import annotations

import fcntl
import json
import os
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.errors import ConfigError, NotFound
from gpufleet.lab.catalogue import (
    _DEFAULT_MIX,
    _HOSTS_PER_RACK,
    MODELS,
    ModelSpec,
    all_models,
    model_spec,
)
from gpufleet.lab.faults import BOOT_FAULTS, _split_fault, validate_faults

LAB_FILE = "lab.json"


# --------------------------------------------------------------------------- fleet model


class LabHost(BaseModel):
    """One simulated host; ``gpu_swap`` counts GPU replacements (each gives a new serial)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    model: str
    faults: list[str] = Field(default_factory=list)
    driver: str | None = None  # installed driver when it differs from the capture's
    serial_salt: int
    gpu_swap: int = 0
    rack: str = "r01"
    #: Compute tray (0-based) of a lab rack (lab/racks.py): the host's GPUs report the rack's
    #: chassis serial and NVLink domain and this tray's position; None: not in a rack.
    tray: int | None = Field(default=None, ge=0, lt=64)
    # When the Xid faults were injected: the kernel log lines carry this time, so a validation
    # right after sees them inside its window (without it: a fixed time from the capture's era).
    xid_at: datetime | None = None
    # A GPU moved in from another host (issue 10 parts history; templates.move_gpu): its
    # serial and UUID replace those of the GPU at fault_gpu_index.
    moved_in: dict[str, str] | None = None
    # Boots since the lab created the host (issue 24: faults belong to a boot): the probe's
    # boot_id changes with it, and the kernel log of a new boot starts empty of old Xids.
    boot: int = Field(default=0, ge=0)
    # Rounds the readings moved (issue 8, lab/readings.py): a real host's temperatures, power
    # and utilization differ between any two reads; 0: as the captures have them.
    readings: int = Field(default=0, ge=0)
    # Powered off through its lab BMC (issue 29 item 7, lab/bmc.py): SSH gets no route.
    powered_off: bool = False

    @model_validator(mode="after")
    def _check(self) -> LabHost:
        validate_faults(self.model, self.faults)
        if not 0 <= self.serial_salt < 10**6:
            raise ValueError("serial_salt must be in [0, 1000000)")
        return self

    @property
    def spec(self) -> ModelSpec:
        return model_spec(self.model)


class LabFleet(BaseModel):
    """A lab fleet, persisted as ``lab.json`` so separate CLI processes share it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hosts: list[LabHost] = Field(default_factory=list)
    seed: int = 0

    @model_validator(mode="after")
    def _unique(self) -> LabFleet:
        names = [h.name for h in self.hosts]
        if len(set(names)) != len(names):
            raise ValueError("lab host names must be unique")
        # Serials encode the salt, so equal salts would give two hosts the same GPU serials.
        if len({h.serial_salt for h in self.hosts}) != len(self.hosts):
            raise ValueError("lab host serial_salt values must be unique")
        trays = [(h.rack, h.tray) for h in self.hosts if h.tray is not None]
        if len(set(trays)) != len(trays):
            raise ValueError("two lab hosts in one rack tray")
        return self

    def host(self, name: str) -> LabHost:
        """The host called ``name``; :class:`NotFound` if absent."""
        for h in self.hosts:
            if h.name == name:
                return h
        raise NotFound(f"no lab host {name!r}")

    def save(self, directory: Path | str) -> Path:
        """Write ``lab.json`` in ``directory`` atomically (readers never see half a file)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        path = d / LAB_FILE
        tmp = d / f".{LAB_FILE}.{os.getpid()}.tmp"
        tmp.write_text(self.model_dump_json(indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, directory: Path | str) -> LabFleet:
        """Read ``lab.json`` from ``directory``; :class:`NotFound` when there is no lab."""
        path = Path(directory) / LAB_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise NotFound(f"no lab in {directory} ({LAB_FILE} missing)") from None
        return cls.model_validate(data)


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on the lab directory: the lab BMC and ``lab change`` are separate
    processes that both rewrite ``lab.json``."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lab.lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def update_lab(directory: Path | str, change: Callable[[LabFleet], LabFleet]) -> LabFleet:
    """Load, change and save the lab in ``directory`` under its lock; the saved fleet."""
    d = Path(directory)
    with _locked(d):
        fleet = change(LabFleet.load(d))
        fleet.save(d)
    return fleet


def set_power(fleet: LabFleet, host: str, on: bool) -> LabFleet:
    """The machine of lab host ``host`` powered off, or on from off (by its lab BMC): that is
    a boot, the boot count moves (a new boot id, a kernel log without the old Xids) and the
    faults a boot ends (``sshd-down``) are gone."""
    current = fleet.host(host)
    changes: dict[str, object] = {"powered_off": not on}
    if on:
        changes["boot"] = current.boot + 1
        changes["faults"] = [f for f in current.faults if f not in BOOT_FAULTS]
    changed = current.model_copy(update=changes)
    return LabFleet(hosts=[changed if h.name == host else h for h in fleet.hosts], seed=fleet.seed)


# --------------------------------------------------------------------------- building fleets


def _mix(n: int, models: Sequence[str] | None) -> list[str]:
    """Model of each host: round robin over ``models``, else the default mix (largest remainder)."""
    if models:
        for m in models:
            model_spec(m)
        return [models[i % len(models)] for i in range(n)]
    quotas = [(m, w * n) for m, w in _DEFAULT_MIX]
    counts = {m: int(q) for m, q in quotas}
    left = n - sum(counts.values())
    for m, _ in sorted(quotas, key=lambda mq: -(mq[1] - int(mq[1])))[:left]:
        counts[m] += 1
    # Contiguous per model so racks hold one model, as pools are racked in practice.
    return [m for m, _ in _DEFAULT_MIX for _ in range(counts[m])]


def _default_faults(
    names: list[str], models: list[str], rng: random.Random
) -> dict[str, list[str]]:
    """One of each demo fault, on distinct hosts that can show it."""
    wanted: list[tuple[str, tuple[str, ...]]] = [
        ("gpu-missing", ("a100-8x", "h100-8x")),
        ("driver-drift", ("a100-8x", "h100-8x", "v100s-8x")),
        ("ib-down", ("a100-8x", "h100-8x")),
        ("xid:79", ("a100-8x", "h100-8x", "v100s-8x")),
        ("remap-pending", ("h100-8x", "a10g-1x", "l40s-1x")),
        ("unreachable", MODELS),
        ("garbage", ("a100-8x", "v100s-8x", "a10g-1x")),
    ]
    taken: set[str] = set()
    out: dict[str, list[str]] = {}
    for fault, fits in wanted:
        cands = [h for h, m in zip(names, models, strict=True) if m in fits and h not in taken]
        if not cands:
            continue
        host = rng.choice(cands)
        taken.add(host)
        out[host] = [fault]
    return out


def create_fleet(
    n_hosts: int,
    *,
    models: Sequence[str] | None = None,
    faults: Mapping[str, list[str]] | None = None,
    seed: int = 0,
    prefix: str = "gpu",
    now: datetime | None = None,
) -> LabFleet:
    """Build a lab fleet of ``n_hosts`` named ``<prefix>-01``..; deterministic for a seed.

    ``models`` are used round robin; by default the fleet is mostly a100-8x and h100-8x with
    some v100s-8x and a few a10g-1x / l40s-1x. ``faults`` maps host name to faults; when it is
    None and the fleet has at least 32 hosts, one each of gpu-missing, driver-drift, ib-down,
    xid:79, remap-pending, unreachable and garbage is spread over the fleet for the demo.
    """
    if n_hosts < 1:
        raise ConfigError("a lab fleet needs at least one host")
    if n_hosts > 10**6:
        raise ConfigError("a lab fleet has at most 1000000 hosts")
    rng = random.Random(seed)
    mix = _mix(n_hosts, models)
    width = max(2, len(str(n_hosts)))
    names = [f"{prefix}-{i:0{width}d}" for i in range(1, n_hosts + 1)]
    salts = rng.sample(range(10**6), n_hosts)
    if faults is None:
        faults = _default_faults(names, mix, rng) if n_hosts >= 32 else {}
    unknown = sorted(set(faults) - set(names))
    if unknown:
        raise ConfigError(f"faults name hosts that are not in the lab: {', '.join(unknown)}")
    hosts: list[LabHost] = []
    rack, in_rack = 0, _HOSTS_PER_RACK
    for i, (name, model) in enumerate(zip(names, mix, strict=True)):
        # A new model starts a new rack.
        if in_rack >= _HOSTS_PER_RACK or (i and mix[i - 1] != model):
            rack, in_rack = rack + 1, 0
        in_rack += 1
        host_faults = list(faults.get(name, []))
        has_xid = any(_split_fault(f)[0] == "xid" for f in host_faults)
        hosts.append(
            LabHost(
                name=name,
                model=model,
                faults=host_faults,
                serial_salt=salts[i],
                rack=f"r{rack:02d}",
                xid_at=now if has_xid else None,
            )
        )
    return LabFleet(hosts=hosts, seed=seed)


def _fault_matches(fault: str, pattern: str) -> bool:
    return fault == pattern or _split_fault(fault)[0] == pattern


def apply_change(
    fleet: LabFleet,
    host: str,
    *,
    driver: str | None = None,
    clear_faults: Sequence[str] | None = None,
    add_faults: Sequence[str] | None = None,
    gpu_swap: bool = False,
    now: datetime | None = None,
) -> LabFleet:
    """Change one lab host as a technician would and return the new fleet.

    ``driver`` installs that driver version (and so ends any ``driver-drift``);
    ``clear_faults`` removes faults by exact name or kind (``"xid"`` clears every Xid,
    ``"all"`` everything); ``add_faults`` injects faults; ``gpu_swap`` replaces the GPU the
    GPU faults point at (see :func:`fault_gpu_index`): it gets a new serial and UUID, the
    faults stay until cleared.
    """
    current = fleet.host(host)
    faults = list(current.faults)
    if clear_faults:
        if "all" in clear_faults:
            faults = []
        else:
            faults = [f for f in faults if not any(_fault_matches(f, p) for p in clear_faults)]
    new_driver = current.driver
    if driver is not None:
        new_driver = driver
        faults = [f for f in faults if not _fault_matches(f, "driver-drift")]
    for f in add_faults or ():
        if f not in faults:
            faults.append(f)
    xid_at = current.xid_at
    if now is not None and any(_split_fault(f)[0] == "xid" for f in add_faults or ()):
        xid_at = now
    changed = LabHost.model_validate(
        current.model_dump()
        | {  # validates the new faults
            "faults": faults,
            "driver": new_driver,
            "xid_at": xid_at,
            "gpu_swap": current.gpu_swap + (1 if gpu_swap else 0),
        }
    )
    return LabFleet(hosts=[changed if h.name == host else h for h in fleet.hosts], seed=fleet.seed)


# --------------------------------------------------------------------------- inventory


def write_inventory(
    fleet: LabFleet,
    path: Path | str,
    *,
    transport: str = "sim",
    lab_dir: Path | str | None = None,
    host_vars: Mapping[str, Mapping[str, str]] | None = None,
) -> Path:
    """Write an Ansible INI inventory: one group per model with the expected spec as vars.

    Hosts carry ``gpufleet_transport``, ``gpufleet_lab_dir`` (absolute; default: the
    inventory's directory), ``gpufleet_rack`` and their ``host_vars`` (the lab BMC's).
    """
    out = Path(path)
    labd = Path(lab_dir if lab_dir is not None else out.parent).resolve()
    by_model: dict[str, list[LabHost]] = {}
    for h in fleet.hosts:
        by_model.setdefault(h.model, []).append(h)
    lines = [
        f"# gpufleet lab inventory: {len(fleet.hosts)} simulated hosts (seed {fleet.seed})",
        "",
    ]
    order = all_models()
    for model in sorted(by_model, key=order.index):
        spec = model_spec(model)
        lines.append(f"[{spec.group}]")
        lines += [
            f"{h.name} gpufleet_transport={transport} gpufleet_lab_dir={labd} "
            f"gpufleet_rack={h.rack}"
            + "".join(f" {k}={v}" for k, v in (host_vars or {}).get(h.name, {}).items())
            for h in by_model[model]
        ]
        lines += ["", f"[{spec.group}:vars]"]
        if spec.role != "gpu":  # a cpu/storage node: its role, no GPU expected
            lines += [f"gpufleet_pool={spec.pool}", f"gpufleet_role={spec.role}"]
            lines += ["gpufleet_fabric=none", ""]
            continue
        vars_: dict[str, object] = {
            "gpufleet_pool": spec.pool,
            "gpufleet_gpu_count": spec.gpu_count,
            "gpufleet_gpu_model": spec.gpu_model,
            "gpufleet_gpu_memory_mib": spec.gpu_memory_mib,
            "gpufleet_fabric": spec.fabric,
        }
        if spec.fabric != "none":
            vars_["gpufleet_ib_ports"] = spec.ib_ports
            vars_["gpufleet_ib_rate_gbps"] = int(spec.ib_rate_gbps or 0)
        if spec.nvlink_per_gpu:
            vars_["gpufleet_nvlink_per_gpu"] = spec.nvlink_per_gpu
        vars_["gpufleet_nvswitch"] = "true" if spec.nvswitch else "false"
        lines += [f"{k}={v}" for k, v in vars_.items()]
        lines.append("")
    lines.append("[lab:children]")
    lines += [model_spec(m).group for m in sorted(by_model, key=order.index)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out
