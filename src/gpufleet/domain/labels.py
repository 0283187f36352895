"""Kubernetes node labels and taints derived from facts and lifecycle.

``nvidia.com/*`` labels follow GPU Feature Discovery's names and formats so that existing
selectors keep working on hosts gpufleet labels before GFD runs; ``gpufleet.io/*`` carry what
GFD cannot know (lifecycle state, pool, baseline, validated profiles, fabric actually up).
Every value goes through :func:`sanitize_label_value`.

What the labels take from the facts is :func:`fact_labels`: a small JSON value stored with each
snapshot (``fact_snapshots.fact_labels``, migration 0015, issue 8), so that the labels of a
fleet are derived without decoding every host's facts document; :func:`derive_labels` takes
either the facts or that stored value and gives the same labels.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from gpufleet.domain.health import Fault
from gpufleet.domain.mig import label_digest, mig_labels
from gpufleet.domain.states import HostState

if TYPE_CHECKING:  # not imported at run time: ``labels HOST`` starts without them (issue 8)
    from gpufleet.domain.facts import HostFacts
    from gpufleet.domain.spec_stored import LabelSpec

PREFIX = "gpufleet.io"
_VALUE_MAX = 63
_PREFIX_MAX = 253
_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-_.A-Za-z0-9]*[A-Za-z0-9])?)?$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_INVALID_CHARS = re.compile(r"[^-_.A-Za-z0-9]+")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")

# GFD (k8s-device-plugin internal/lm/resource.go, getArchFamily) derives the family from
# the CUDA compute capability; these are its values. nvidia-smi's "Product Architecture"
# names the same generations ("Ada Lovelace" is GFD's "ada-lovelace", compute 8.9).
GFD_FAMILIES = frozenset(
    {
        "tesla",
        "fermi",
        "kepler",
        "maxwell",
        "pascal",
        "volta",
        "turing",
        "ampere",
        "ada-lovelace",
        "hopper",
        "blackwell",
    }
)
# Used when the driver did not report an architecture: a product-name token that is one of
# these models, or starts with one followed by a letter (V100S, A100X, H100NVL), decides.
# More specific names first.
_FAMILY_BY_MODEL = (
    ("GB200", "blackwell"),
    ("GB300", "blackwell"),
    ("B200", "blackwell"),
    ("B300", "blackwell"),
    ("GH200", "hopper"),
    ("H100", "hopper"),
    ("H800", "hopper"),
    ("H200", "hopper"),
    ("H20", "hopper"),
    ("L40S", "ada-lovelace"),
    ("L40", "ada-lovelace"),
    ("L4", "ada-lovelace"),
    ("L20", "ada-lovelace"),
    ("A100", "ampere"),
    ("A800", "ampere"),
    ("A10", "ampere"),
    ("A30", "ampere"),
    ("A40", "ampere"),
    ("V100", "volta"),
    ("GV100", "volta"),
    ("T4", "turing"),
    ("P100", "pascal"),
    ("P40", "pascal"),
    ("P4", "pascal"),
)
# GFD's sanitise(): characters outside [A-Za-z0-9-_. ] are dropped (not replaced).
_GFD_DROP = re.compile(r"[^A-Za-z0-9\-_. ]")


@dataclass(frozen=True, slots=True)
class Taint:
    """A Kubernetes taint: ``key=value:effect``."""

    key: str
    value: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}"


def sanitize_label_value(value: object) -> str:
    """Make ``value`` a valid label value: at most 63 characters of ``[-_.A-Za-z0-9]``,
    alphanumeric at both ends; runs of anything else (spaces, unicode, ``/``) become ``-``.
    ``None`` and values with no usable character give ``""`` (valid)."""
    if value is None:
        return ""
    return _sanitized(str(value))


@lru_cache(maxsize=4096)  # a fleet's labels repeat a few values on every host (issue 8)
def _sanitized(text: str) -> str:
    text = _EDGE.sub("", _INVALID_CHARS.sub("-", text))[:_VALUE_MAX]
    return _EDGE.sub("", text)  # truncation may leave a '-' or '.' at the end


def is_valid_label_value(value: str) -> bool:
    return len(value) <= _VALUE_MAX and _VALUE_RE.match(value) is not None


@lru_cache(maxsize=1024)  # the same few keys on every host (issue 8)
def is_valid_label_key(key: str) -> bool:
    """``[prefix/]name``: prefix a DNS subdomain of at most 253 characters, name a non-empty
    label value."""
    prefix, _, name = key.rpartition("/")
    if not name or not is_valid_label_value(name):
        return False
    if not prefix and "/" not in key:
        return True
    return 0 < len(prefix) <= _PREFIX_MAX and all(
        _DNS_LABEL_RE.match(part) for part in prefix.split(".")
    )


def gfd_product(product_name: str) -> str:
    """GFD's ``nvidia.com/gpu.product``: the name NVML reports with characters outside
    ``[A-Za-z0-9-_. ]`` dropped and runs of blanks turned into one ``-``; the ``NVIDIA``
    prefix stays (``"NVIDIA A100-SXM4-80GB"`` -> ``"NVIDIA-A100-SXM4-80GB"``, as GFD's
    ``getProductName``/``sanitise`` do)."""
    return sanitize_label_value("-".join(_GFD_DROP.sub("", product_name).split()))


def gpu_family(architecture: str | None, product_name: str | None) -> str | None:
    """GFD's ``nvidia.com/gpu.family``: ``"Hopper"`` -> ``"hopper"``, ``"Ada Lovelace"`` ->
    ``"ada-lovelace"``, ``"Volta"`` -> ``"volta"``. An architecture GFD has no name for is not
    guessed; without an architecture the product name decides (``"TITAN V"``, ``"Tesla
    V100-PCIE-32GB"`` -> ``"volta"``); None when neither tells."""
    if architecture:
        family = "-".join(architecture.lower().split())
        if family in GFD_FAMILIES:
            return family
    name = (product_name or "").upper()
    if re.search(r"\bTITAN V\b", name):
        return "volta"
    tokens = name.replace("-", " ").split()
    for model, family in _FAMILY_BY_MODEL:
        for token in tokens:
            if token == model or (
                token.startswith(model) and token[len(model) :].isalpha() and model[-1].isdigit()
            ):
                return family
    return None


def _version_parts(version: str | None, names: Iterable[str]) -> dict[str, str]:
    if not version:
        return {}
    parts = version.strip().split(".")
    return {name: part for name, part in zip(names, parts, strict=False) if part}


def _active_ports(facts: HostFacts) -> list[tuple[float | None, str | None]]:
    """(rate, link layer) of the high-speed ports that are *Active* and linked up."""
    return [
        (p.rate_gbps, p.link_layer)
        for p in facts.ib_ports or []  # None: ibstat not collected, no port counts as up
        if (p.state or "").lower() == "active"
        and (p.physical_state or "linkup").lower() == "linkup"
    ]


def fabric_up(facts: HostFacts, spec: LabelSpec | None = None) -> str:
    """``ib`` / ``roce`` / ``none`` from ports that are *Active*.

    When the spec expects N high-speed ports, fewer than N active (at the expected rate) is
    ``none``: a rail-optimised multi-node job needs every rail, so a host with one rail down
    must not be scheduled as a fabric node.
    """
    return _fabric(_active_ports(facts), spec)


def _fabric(active: Iterable[Iterable[Any]], spec: LabelSpec | None) -> str:
    ports = [(rate, layer) for rate, layer in active]
    if spec is not None and spec.ib_rate_gbps:
        ports = [p for p in ports if (p[0] or 0) >= spec.ib_rate_gbps]
    if spec is not None and spec.ib_ports and len(ports) < spec.ib_ports:
        return "none"
    layers = {(layer or "").lower() for _, layer in ports}
    if "infiniband" in layers:
        return "ib"
    if "ethernet" in layers:
        return "roce"
    return "none"


#: The version of what :func:`fact_labels` stores: bump it whenever the labels take something
#: new from the facts; a stored value of another version is not used (the reader decodes the
#: facts instead), so a stale one can never give wrong labels.
FACT_LABELS_VERSION = 4  # 2: issue 26, gpufleet.io/cuda.max; 3: issue 27, NVLink domain;
# 4: issue 26 item 7, the MIG layout ("mig", for GFD's nvidia.com/mig* labels)


def fact_labels(facts: HostFacts) -> dict[str, Any]:
    """Everything :func:`derive_labels` takes from ``facts``, as a small JSON value: the
    labels that depend on the facts alone, the GPU count and the active high-speed ports
    (the fabric label also depends on the host's expected spec, applied when reading)."""
    after: dict[str, str] = {}  # the labels that follow the fabric label
    nvlink = facts.nvlink
    has_nvlink = bool(
        nvlink and nvlink.supported and any(lk.active for g in nvlink.gpus for lk in g.links)
    )
    after[f"{PREFIX}/nvlink"] = str(has_nvlink).lower()
    if facts.block_devices is not None:  # None: lsblk not collected, size unknown
        nvme = sum(
            d.size_bytes
            for d in facts.block_devices
            if (d.transport or "").lower() == "nvme" or d.name.startswith("nvme")
        )
        after[f"{PREFIX}/local-nvme-gb"] = str(nvme // 10**9)
    # issue 26: the newest CUDA the NVIDIA driver serves (NVIDIA's table, domain.cuda); no
    # label when no driver was read (a workload's nodeSelector then cannot match: closed)
    from gpufleet.domain.cuda import cuda_max

    if (top := cuda_max(facts.driver_version)) is not None:
        after[f"{PREFIX}/cuda.max"] = top
    from gpufleet.domain.accelerator_exports import inventory_digest, own_accelerator_labels
    from gpufleet.domain.accelerators import inventories_of

    inventories = inventories_of(facts)
    after.update(own_accelerator_labels(inventories))  # issue 15: gpufleet.io/accelerator.*
    after.update(_rack_labels(facts))  # issue 27: rack, NVLink domain, tray (never from GFD)
    return {
        "v": FACT_LABELS_VERSION,
        "labels": _gfd_labels(facts),
        "gpus": len(facts.gpus),
        "ports": [list(p) for p in _active_ports(facts)],
        "after": after,
        # issue 15: what the accelerator labels read (the vendors' labels are applied by the
        # service, which knows the plugins: service/vendor_exports.digest_accelerator_labels)
        "accelerators": inventory_digest(inventories),
        "mig": label_digest(facts, _gfd_labels_product(facts)),
    }


def _gfd_labels_product(facts: HostFacts) -> str | None:
    first = facts.gpus[0] if facts.gpus else None
    return gfd_product(first.product_name) if first and first.product_name else None


def usable_fact_labels(value: object) -> dict[str, Any] | None:
    """A stored :func:`fact_labels` value if it is of this version (else None: decode the
    facts)."""
    if isinstance(value, dict) and value.get("v") == FACT_LABELS_VERSION:
        return value
    return None


def derive_labels(
    host_name: str,
    facts: HostFacts | dict[str, Any] | None,
    state: HostState,
    pool: str | None,
    baseline_name: str | None,
    rack: str | None,
    profiles_passed: Iterable[str],
    spec: LabelSpec | None = None,
    fault: Fault | None = None,
    usable_gpus: int | None = None,
    unusable_gpus: int = 0,
    accelerator_labels: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Labels for one node. Labels whose value is unknown are left out, not set empty.

    ``usable_gpus`` (a partial host, issue 10): ``nvidia.com/gpu.count`` says how many GPUs
    may be used and ``gpufleet.io/gpus.unusable`` how many were left out.

    Issue 15: ``gpufleet.io/accelerator.vendor/model/count`` for every vendor's accelerators
    (:func:`gpufleet.domain.accelerator_exports.own_accelerator_labels`);
    ``accelerator_labels`` (from the service, which knows the vendor plugins:
    :func:`gpufleet.service.hosts.vendor_exports.host_accelerator_labels`) are the other vendors'
    own labels (Ascend device plugin / Volcano, AMD node labeller), added beside these; they
    never replace one of these.

    ``host_name`` is not labelled (Kubernetes has ``kubernetes.io/hostname``); it is taken so
    exporters can call this uniformly and for future per-host labels.

    ``facts`` may be the facts or their :func:`fact_labels` (as stored with the snapshot,
    checked by :func:`usable_fact_labels`): the labels are the same.
    """
    fl = None if facts is None else facts if isinstance(facts, dict) else fact_labels(facts)
    own = own_labels(state, pool, baseline_name, rack, profiles_passed, spec, fault)
    if fl is None:
        return own
    return with_fact_labels(
        own, fact_tail(fl, spec, usable_gpus, unusable_gpus, accelerator_labels)
    )


def own_labels(
    state: HostState,
    pool: str | None,
    baseline_name: str | None,
    rack: str | None,
    profiles_passed: Iterable[str],
    spec: LabelSpec | None = None,
    fault: Fault | None = None,
) -> dict[str, str]:
    """The labels :func:`derive_labels` takes from the host itself (its lifecycle, pool,
    baseline, rack, fault and validated profiles), sanitized, in its order: the first part
    of every host's labels."""
    labels: dict[str, str] = {f"{PREFIX}/state": str(state)}
    own = {
        "pool": pool,
        "baseline": baseline_name,
        "rack": rack or (spec.rack if spec else None),
        "fault": str(fault) if fault else None,
    }
    for key, value in own.items():
        if value:
            labels[f"{PREFIX}/{key}"] = value
    out = {k: sanitize_label_value(v) for k, v in labels.items()}
    out.update(_validated(tuple(sorted(set(profiles_passed)))))
    return out


@lru_cache(maxsize=256)  # a fleet validates a few lists of profiles (issue 8)
def _validated(profiles: tuple[str, ...]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for profile in profiles:
        key = f"{PREFIX}/validated.{sanitize_label_value(profile)}"
        if is_valid_label_key(key):
            labels[key] = "true"
    return labels


@dataclass(frozen=True, slots=True)
class FactTail:
    """The labels :func:`derive_labels` takes from a host's facts (their stored
    :func:`fact_labels`), its expected fabric and partial GPUs, sanitized: ``labels`` in
    their order, set over the host's own; ``defaults`` (the vendors' own accelerator
    labels) only where no label of that key is set. Hosts of one hardware configuration
    share one (:class:`gpufleet.service.hosts.labels.FleetLabels`, issue 8)."""

    labels: Mapping[str, str]
    defaults: tuple[tuple[str, str], ...]


def fact_tail(
    fl: Mapping[str, Any],
    spec: LabelSpec | None,
    usable_gpus: int | None = None,
    unusable_gpus: int = 0,
    accelerator_labels: Mapping[str, str] | None = None,
) -> FactTail:
    """The :class:`FactTail` of stored :func:`fact_labels` ``fl`` (see :func:`derive_labels`
    for the arguments); the spec matters only through its expected ports and rate."""
    labels: dict[str, str] = {}
    labels.update(fl["labels"])
    if usable_gpus is not None and fl["gpus"]:
        labels["nvidia.com/gpu.count"] = str(usable_gpus)
        labels[f"{PREFIX}/gpus.unusable"] = str(unusable_gpus)
    labels[f"{PREFIX}/fabric"] = _fabric(fl["ports"], spec)
    if spec is not None and spec.mig_strategy:  # issue 26 item 7: GFD's, the group's strategy
        labels.update(mig_labels(fl.get("mig") or {}, spec.mig_strategy))
    labels.update(fl["after"])
    defaults = tuple(
        (k, sanitize_label_value(v))
        for k, v in (accelerator_labels or {}).items()
        if k not in labels
    )
    return FactTail({k: sanitize_label_value(v) for k, v in labels.items()}, defaults)


def with_fact_labels(own: dict[str, str], tail: FactTail) -> dict[str, str]:
    """A host's labels: its :func:`own_labels` (updated in place) then its :class:`FactTail`."""
    own.update(tail.labels)
    for key, value in tail.defaults:
        own.setdefault(key, value)
    return own


def _rack_labels(facts: HostFacts) -> dict[str, str]:
    """Issue 27: ``gpufleet.io/rack`` (the chassis serial: the physical rack, over the
    inventory's), ``gpufleet.io/nvl-domain`` (the clusterUuid) and ``gpufleet.io/tray`` (the
    tray index), where the GPUs report them; valid label values or left out."""
    from gpufleet.domain.fabric import host_fabric

    hf = host_fabric(facts)
    values = {
        f"{PREFIX}/rack": hf.rack_id,
        f"{PREFIX}/nvl-domain": hf.nvl_domain,
        f"{PREFIX}/tray": None if hf.tray is None or hf.tray.tray_index is None
        else str(hf.tray.tray_index),
    }
    return {k: v for k, v in values.items() if v and is_valid_label_value(v)}


def _gfd_labels(facts: HostFacts) -> dict[str, str]:
    labels: dict[str, str] = {}
    gpus = facts.gpus
    if not gpus:
        return labels
    from gpufleet.domain.fabric import host_fabric

    partition = host_fabric(facts).partition  # GFD's nvidia.com/gpu.clique (issue 27)
    if partition and is_valid_label_value(partition):
        labels["nvidia.com/gpu.clique"] = partition
    first = gpus[0]  # GFD labels from device 0 too
    labels["nvidia.com/gpu.count"] = str(len(gpus))
    if first.product_name:
        labels["nvidia.com/gpu.product"] = gfd_product(first.product_name)
    if first.memory_total_mib is not None:
        labels["nvidia.com/gpu.memory"] = str(first.memory_total_mib)
    family = gpu_family(first.architecture, first.product_name)
    if family:
        labels["nvidia.com/gpu.family"] = family
    # nvidia-smi prints MIG mode "N/A" (parsed as None) on GPUs without MIG support.
    mig = any(g.mig_mode_current is not None for g in gpus)
    labels["nvidia.com/mig.capable"] = str(mig).lower()
    driver = facts.driver_version
    if driver:
        labels["nvidia.com/cuda.driver-version.full"] = driver
        for part, value in _version_parts(driver, ("major", "minor", "revision")).items():
            labels[f"nvidia.com/cuda.driver-version.{part}"] = value
    cuda = facts.cuda_version
    if cuda:
        labels["nvidia.com/cuda.runtime-version.full"] = cuda
        for part, value in _version_parts(cuda, ("major", "minor")).items():
            labels[f"nvidia.com/cuda.runtime-version.{part}"] = value
    return labels


def derive_taints(state: HostState, fault: Fault | None = None) -> list[Taint]:
    """Taints keeping work off hosts that are not ready for it.

    ``NoSchedule`` throughout: evicting running pods (``NoExecute``) is the service's call,
    taken with the allocation holder, not a side effect of a label sync.
    """
    if state is HostState.QUARANTINED:
        return [
            Taint(f"{PREFIX}/quarantined", sanitize_label_value(fault or "unknown"), "NoSchedule")
        ]
    if state is HostState.MAINTENANCE:
        return [Taint(f"{PREFIX}/maintenance", "true", "NoSchedule")]
    if state is HostState.RETIRED:
        return [Taint(f"{PREFIX}/retired", "true", "NoSchedule")]
    if state in (HostState.ENROLLED, HostState.VALIDATING, HostState.RECLAIMING):
        return [Taint(f"{PREFIX}/not-ready", str(state), "NoSchedule")]
    return []


#: Issue 26: the taint key of a leased host; its value is the lease id. The lessee's pods
#: carry the toleration ``{key: gpufleet.io/lease, operator: Equal, value: "<id>", effect:
#: NoSchedule}`` (docs/reference.md), every other pod stays off the host.
LEASE_TAINT_KEY = f"{PREFIX}/lease"


@dataclass(frozen=True, slots=True)
class LeaseTag:
    """The lease holding a host (issue 26): what its node's lease taint and labels say.
    ``lease_id`` None: the host is allocated but no active lease was found (the taint is
    then ``gpufleet.io/lease=unknown``: an allocated host is never open to everyone)."""

    lease_id: int | None
    owner: str | None = None
    ends_at: datetime | None = None


def lease_taint(tag: LeaseTag) -> Taint:
    """``gpufleet.io/lease=<id>:NoSchedule``."""
    value = str(tag.lease_id) if tag.lease_id is not None else "unknown"
    return Taint(LEASE_TAINT_KEY, value, "NoSchedule")


def lease_labels(tag: LeaseTag) -> dict[str, str]:
    """``gpufleet.io/lease.id``, ``.owner`` (sanitized) and ``.ends`` (UTC, label-value safe:
    ``20261205T140000Z``); unknown values are left out."""
    out: dict[str, str] = {}
    if tag.lease_id is not None:
        out[f"{LEASE_TAINT_KEY}.id"] = str(tag.lease_id)
    owner = sanitize_label_value(tag.owner)
    if owner:
        out[f"{LEASE_TAINT_KEY}.owner"] = owner
    if tag.ends_at is not None:
        ends = tag.ends_at.astimezone(UTC) if tag.ends_at.tzinfo else tag.ends_at
        out[f"{LEASE_TAINT_KEY}.ends"] = ends.strftime("%Y%m%dT%H%M%SZ")
    return out
