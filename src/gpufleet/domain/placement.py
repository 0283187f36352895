"""Whole-host, topology-aware placement, and why a request cannot be met. Pure: the service
hands in every host it considered as a :class:`HostView`.

The rules, in order:

1. **Fewest hosts first**: a request for N GPUs uses the smallest number of whole hosts that
   can hold N.
2. **Same rack and fabric** for a multi-host request: hosts of one rack on one fabric are
   preferred; when no rack holds enough, hosts of one fabric across racks; never a mix of
   fabrics.
3. **Do not break a large contiguous block** when a smaller one fits: among the racks (blocks
   of free hosts) that fit, the one with the fewest free GPUs is used, and within it the
   hosts that waste the fewest GPUs.

A request for one **NVLink domain** (``nvl_domain``, issue 27: GB200/GB300 NVL72) takes only
hosts of a multi-node NVLink domain that no rack incident restricts, and its blocks are the
domains themselves: the hosts of one domain, never spanning two (no fabric fallback).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpufleet.domain.cuda import cuda_refusal
from gpufleet.domain.states import HostState


@dataclass(frozen=True, slots=True)
class Request:
    """What was asked: ``gpus`` or ``hosts`` (one of them), and what the hosts must be."""

    gpus: int | None = None
    hosts: int | None = None
    model: str | None = None
    min_gpu_memory_mib: int | None = None
    fabric: str | None = None
    profile: str | None = None
    #: issue 26: the CUDA ``major.minor`` the workload was built for (the driver gate).
    cuda: str | None = None
    #: issue 27: the hosts must share one multi-node NVLink domain (never span two).
    nvl_domain: bool = False

    def describe(self) -> str:
        size = f"{self.gpus} GPUs" if self.gpus is not None else f"{self.hosts} hosts"
        parts = [size]
        if self.model:
            parts.append(self.model)
        if self.min_gpu_memory_mib:
            parts.append(f">= {self.min_gpu_memory_mib // 1024}G per GPU")
        if self.fabric:
            parts.append(f"fabric {self.fabric}")
        if self.cuda:
            parts.append(f"CUDA {self.cuda}")
        if self.nvl_domain:
            parts.append("in one NVLink domain")
        if self.profile:
            parts.append(f"for {self.profile}")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class HostView:
    """One host as placement sees it. ``busy_until``: the end of the latest lease or
    reservation that overlaps the requested window (None: free for it); ``eta``: when a host
    in maintenance or quarantine is expected back."""

    name: str
    state: HostState
    gpus: int
    model: str | None = None
    gpu_memory_mib: int | None = None
    rack: str | None = None
    fabric: str | None = None
    pool: str | None = None
    profiles: frozenset[str] = frozenset()
    alarm: bool = False
    busy_until: datetime | None = None
    eta: datetime | None = None
    #: Allocated now, but its lease ends before the requested window starts.
    free_by_start: bool = False
    #: issue 26: the NVIDIA driver of its latest facts (None: not collected).
    driver: str | None = None
    #: issue 27: its NVLink domain (None: not a member) and whether a rack incident keeps it
    #: out of NVLink-domain placement.
    nvl_domain: str | None = None
    nvl_restricted: bool = False


def matches_hardware(req: Request, h: HostView) -> bool:
    """Model, GPU memory and fabric as asked (case-insensitive substring for the model)."""
    if req.model and (h.model is None or req.model.lower() not in h.model.lower()):
        return False
    if req.min_gpu_memory_mib and (
        h.gpu_memory_mib is None or h.gpu_memory_mib < req.min_gpu_memory_mib
    ):
        return False
    if req.fabric and (h.fabric or "").lower() != req.fabric.lower():
        return False
    if req.cuda and cuda_refusal(h.driver, req.cuda) is not None:
        return False
    if req.nvl_domain and (h.nvl_domain is None or h.nvl_restricted):
        return False
    return h.gpus > 0


def allocatable(req: Request, h: HostView) -> bool:
    """Could be handed out for the requested window: available (or allocated under a lease
    that ends before the window), validated for the profile, no open alarm, no overlapping
    lease or reservation, and the hardware asked."""
    usable = h.state is HostState.AVAILABLE or (h.state is HostState.ALLOCATED and h.free_by_start)
    return (
        usable
        and matches_hardware(req, h)
        and (req.profile is None or req.profile in h.profiles)
        and not h.alarm
        and h.busy_until is None
    )


@dataclass(frozen=True, slots=True)
class Placement:
    """The hosts chosen, and how they sit."""

    hosts: tuple[str, ...]
    gpus: int
    racks: tuple[str, ...]
    fabric: str | None
    #: issue 27: the one NVLink domain of an ``nvl_domain`` request.
    nvl_domain: str | None = None

    @property
    def spans_racks(self) -> bool:
        return len(self.racks) > 1


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request cannot be met: counts along the way and where capacity is held."""

    message: str
    counts: dict[str, int]
    held: list[dict[str, object]] = field(default_factory=list)
    allocatable_gpus: int = 0
    missing_gpus: int | None = None


def _group_key(h: HostView, req: Request | None = None) -> tuple[str, str]:
    if req is not None and req.nvl_domain:  # the domain is the rack and the fabric
        return (h.nvl_domain or "", h.nvl_domain or "")
    return (h.rack or "", (h.fabric or "").lower())


def _pick(ordered: Sequence[HostView], k: int, need: int) -> list[HostView] | None:
    """``k`` hosts of ``ordered`` (largest first) holding at least ``need`` GPUs with the
    least waste: the k-1 largest, then the smallest host that covers what is left (None: k
    cannot)."""
    if len(ordered) < k or sum(h.gpus for h in ordered[:k]) < need:
        return None
    head = list(ordered[: k - 1])
    rest = need - sum(h.gpus for h in head)
    last = min(
        (h for h in ordered[k - 1 :] if h.gpus >= rest),
        key=lambda h: (h.gpus, h.name),
        default=None,
    )
    return None if last is None else [*head, last]


def _score(group: Sequence[HostView], chosen: Sequence[HostView]) -> tuple[int, int, str]:
    """Lower is better: GPUs wasted, then the block's free GPUs (keep large blocks whole)."""
    return (
        sum(h.gpus for h in chosen),
        sum(h.gpus for h in group),
        min(h.name for h in chosen),
    )


def place(req: Request, candidates: Iterable[HostView]) -> Placement | None:
    """Choose hosts for ``req`` among ``candidates`` (every one :func:`allocatable`), or None
    when they cannot hold it. Deterministic: the same inputs give the same hosts."""
    pool = sorted((h for h in candidates if allocatable(req, h)), key=lambda h: h.name)
    if not pool:
        return None
    if req.hosts is not None:
        k_range: Iterable[int] = [req.hosts]
        need = 0
    else:
        need = req.gpus or 0
        k_range = range(1, len(pool) + 1)
    by_rack: dict[tuple[str, str], list[HostView]] = {}
    by_fabric: dict[str, list[HostView]] = {}
    for h in sorted(pool, key=lambda h: (-h.gpus, h.name)):  # each group largest first
        key = _group_key(h, req)
        by_rack.setdefault(key, []).append(h)
        by_fabric.setdefault(key[1], []).append(h)
    if req.hosts is None:  # fewer hosts than need / largest host cannot hold it
        largest = max(h.gpus for h in pool)
        k_range = range(max(1, -(-need // largest)), len(pool) + 1)
    for k in k_range:
        if k > len(pool):
            return None
        best: tuple[tuple[int, int, str], list[HostView]] | None = None
        # Single-host requests: every host is its own block; blocks sized by their rack.
        for group in by_rack.values():
            chosen = _pick(group, k, need)
            if chosen is not None:
                score = _score(group, chosen)
                if best is None or score < best[0]:
                    best = (score, chosen)
        if best is None and k > 1:
            for group in by_fabric.values():
                chosen = _pick(group, k, need)
                if chosen is not None:
                    score = _score(group, chosen)
                    if best is None or score < best[0]:
                        best = (score, chosen)
        if best is not None:
            hosts = sorted(best[1], key=lambda h: h.name)
            return Placement(
                hosts=tuple(h.name for h in hosts),
                gpus=sum(h.gpus for h in hosts),
                racks=tuple(sorted({h.rack or "-" for h in hosts})),
                fabric=hosts[0].fabric,
                nvl_domain=hosts[0].nvl_domain if req.nvl_domain else None,
            )
    return None


def _when(dt: datetime | None) -> str:
    return dt.strftime("%Y-%m-%d %H:%M %Z").strip() if dt is not None else "unknown"


def _cuda_parts(req: Request, hosts: list[HostView], counts: dict[str, int]) -> list[str]:
    """Issue 26: the hosts the CUDA gate left out, with the reason of the first few
    (``"node1: driver 535.154.05 serves CUDA up to 12.2"``)."""
    assert req.cuda is not None
    other = Request(model=req.model, min_gpu_memory_mib=req.min_gpu_memory_mib,
                    fabric=req.fabric)
    refused = [
        (h.name, why)
        for h in hosts
        if matches_hardware(other, h) and (why := cuda_refusal(h.driver, req.cuda)) is not None
    ]
    counts["cuda_refused"] = len(refused)
    if not refused:
        return []
    shown = "; ".join(f"{n}: {why}" for n, why in refused[:5])
    more = f"; {len(refused) - 5} more" if len(refused) > 5 else ""
    return [f"{len(refused)} cannot run CUDA {req.cuda} ({shown}{more})"]


def explain(req: Request, hosts: Iterable[HostView]) -> Refusal:
    """Why ``req`` cannot be placed on ``hosts`` (every host of the selection), in counts:
    how many match the hardware, how many are validated for the profile, where the rest are
    held (allocated or reserved until, maintenance or quarantine back by)."""
    all_hosts = list(hosts)
    hw = [h for h in all_hosts if matches_hardware(req, h)]
    counts: dict[str, int] = {"hosts": len(all_hosts), "match_hardware": len(hw)}
    what = (
        " and ".join(
            x
            for x in (
                req.model and f"the model {req.model}",
                req.min_gpu_memory_mib and f"{req.min_gpu_memory_mib // 1024}G GPU memory",
                req.fabric and f"fabric {req.fabric}",
                req.cuda and f"a driver serving CUDA {req.cuda}",
                req.nvl_domain and "an unrestricted NVLink domain",
            )
            if x
        )
        or "the request"
    )
    parts = [f"{len(hw)} of {len(all_hosts)} hosts match {what}"]
    if req.cuda:
        parts += _cuda_parts(req, all_hosts, counts)
    by_state = Counter(h.state.value for h in hw)
    for state, n in sorted(by_state.items()):
        counts[f"state_{state}"] = n
    held: list[dict[str, object]] = []
    usable = [
        h
        for h in hw
        if h.state is HostState.AVAILABLE or (h.state is HostState.ALLOCATED and h.free_by_start)
    ]
    if req.profile:
        validated = [h for h in usable if req.profile in h.profiles]
        counts["validated_for_profile"] = len(validated)
        parts.append(f"{len(validated)} of the free ones are validated for {req.profile}")
    else:
        validated = usable
    alarmed = [h for h in validated if h.alarm]
    if alarmed:
        counts["open_alarm"] = len(alarmed)
        parts.append(f"{len(alarmed)} have an open alarm")
    booked = [h for h in validated if not h.alarm and h.busy_until is not None]
    if booked:
        counts["reserved"] = len(booked)
        last = max(h.busy_until for h in booked if h.busy_until is not None)
        parts.append(f"{len(booked)} are reserved or leased in that window (until {_when(last)})")
        held += [
            {"host": h.name, "state": "reserved", "gpus": h.gpus, "until": h.busy_until}
            for h in booked
        ]
    for state, verb in (
        (HostState.ALLOCATED, "allocated"),
        (HostState.MAINTENANCE, "in maintenance"),
        (HostState.QUARANTINED, "quarantined"),
        (HostState.RECLAIMING, "reclaiming"),
        (HostState.VALIDATING, "validating"),
        (HostState.ENROLLED, "enrolled, never validated"),
    ):
        group = [
            h
            for h in hw
            if h.state is state and not (h.free_by_start and state is HostState.ALLOCATED)
        ]
        if not group:
            continue
        known = [t for t in (h.busy_until or h.eta for h in group) if t is not None]
        when = ""
        if state is HostState.ALLOCATED and known:
            when = f" until {_when(max(known))}"
        elif state in (HostState.MAINTENANCE, HostState.QUARANTINED):
            if not known:
                when = " (no expected-back time)"
            elif len(known) == len(group):
                when = f" (back by {_when(max(known))})"
            else:
                when = f" ({len(known)} expected back, latest by {_when(max(known))})"
        parts.append(f"{len(group)} are {verb}{when}")
        held += [
            {"host": h.name, "state": state.value, "gpus": h.gpus, "until": h.busy_until or h.eta}
            for h in group
        ]
    free = [h for h in all_hosts if allocatable(req, h)]
    free_gpus = sum(h.gpus for h in free)
    missing: int | None = None
    if req.gpus is not None:
        missing = max(0, req.gpus - free_gpus)
        tail = f"{free_gpus} GPUs allocatable, {missing} missing"
        if missing == 0 and free:
            tail = (
                f"{free_gpus} GPUs allocatable but no hosts of one fabric can hold "
                f"{req.gpus} together"
            )
    else:
        tail = f"{len(free)} hosts allocatable, {(req.hosts or 0)} asked"
        if len(free) >= (req.hosts or 0):
            tail += ", but not on one fabric"
    counts["allocatable_hosts"] = len(free)
    counts["allocatable_gpus"] = free_gpus
    return Refusal(
        message=f"cannot place {req.describe()}: " + ", ".join(parts) + f"; {tail}",
        counts=counts,
        held=sorted(held, key=lambda d: str(d["host"])),
        allocatable_gpus=free_gpus,
        missing_gpus=missing,
    )


# --- which blocks to read: placement on per-block GPU counts --------------------------------

#: A block of candidate hosts: (rack, fabric) as :func:`place` groups them, both "" when unset
#: and the fabric lower-cased.
Block = tuple[str, str]


@dataclass(frozen=True, slots=True)
class BlockPlan:
    """The blocks whose hosts :func:`place` needs: ``racks`` (rack blocks, each whole) when a
    single rack holds the request, else ``fabrics`` (every candidate of those fabrics)."""

    racks: frozenset[Block] = frozenset()
    fabrics: frozenset[str] = frozenset()


#: A block's hosts as runs of (GPUs, hosts), GPUs descending, both > 0.
Runs = list[tuple[int, int]]


def _runs(c: Counter[int]) -> Runs:
    if len(c) == 1:  # the usual block: one kind of host
        ((g, n),) = c.items()
        return [(g, n)] if g > 0 and n > 0 else []
    return sorted(((g, n) for g, n in c.items() if g > 0 and n > 0), reverse=True)


def _top(runs: Runs, k: int) -> int:
    """GPUs of the ``k`` largest hosts of ``runs``."""
    total = 0
    for g, n in runs:
        if k <= 0:
            break
        take = min(n, k)
        total += g * take
        k -= take
    return total


def _pick_counts(runs: Runs, hosts: int, k: int, need: int) -> int | None:
    """:func:`_pick` on GPU counts only (``runs`` of a block holding ``hosts`` hosts): the
    GPUs the chosen ``k`` hosts hold, None when ``k`` hosts of the block cannot hold
    ``need``. The k-1 largest, then the smallest host from position k-1 on that covers the
    rest."""
    if hosts < k or _top(runs, k) < need:
        return None
    head = _top(runs, k - 1)
    rest = need - head
    last: int | None = None
    start = 0
    for g, n in runs:
        if start + n > k - 1 and g >= rest:
            last = g  # descending: the last qualifying run is the smallest
        start += n
    return None if last is None else head + last


def _fabric_runs(racks: Mapping[Block, tuple[Runs, int, int]]) -> dict[str, tuple[Runs, int, int]]:
    fab: dict[str, Counter[int]] = {}
    for (_, fabric), (runs, _, _) in racks.items():
        c = fab.setdefault(fabric, Counter())
        for g, n in runs:
            c[g] += n
    out: dict[str, tuple[Runs, int, int]] = {}
    for f, c in fab.items():
        runs = _runs(c)
        out[f] = (runs, sum(n for _, n in runs), sum(g * n for g, n in runs))
    return out


def plan_blocks(req: Request, blocks: Mapping[Block, Counter[int]]) -> BlockPlan | None:
    """Which blocks :func:`place` would choose from, knowing only how many candidate hosts of
    each GPU count every (rack, fabric) block has (``blocks``: every allocatable host of the
    fleet, counted). ``place`` on the hosts of the returned blocks gives exactly what ``place``
    on every candidate gives: the blocks returned are all those whose score ties the best on
    GPUs used and block size (the host name, the last tie-break, needs the hosts). None:
    the request cannot be placed."""
    racks: dict[Block, tuple[Runs, int, int]] = {}  # runs, hosts, GPUs
    for key, c in blocks.items():
        runs = _runs(c)
        if runs:
            racks[key] = (runs, sum(n for _, n in runs), sum(g * n for g, n in runs))
    if not racks:
        return None
    fabrics: dict[str, tuple[Runs, int, int]] | None = None  # only when no rack holds it
    total = sum(h for _, h, _ in racks.values())
    if req.hosts is not None:
        need = 0
        ks: Iterable[int] = [req.hosts]
    else:
        need = req.gpus or 0
        largest = max(r[0][0] for r, _, _ in racks.values())
        ks = range(max(1, -(-need // largest)), total + 1)
    for k in ks:
        if k > total:
            return None
        memo: dict[tuple[tuple[int, int], ...], int | None] = {}  # racks share shapes
        scored = {}
        for key, (runs, hosts, gpus) in racks.items():
            shape = tuple(runs)
            if shape not in memo:
                memo[shape] = _pick_counts(runs, hosts, k, need)
            used = memo[shape]
            if used is not None:
                scored[key] = (used, gpus)
        if scored:
            best = min(scored.values())
            return BlockPlan(racks=frozenset(key for key, s in scored.items() if s == best))
        if k > 1:
            if fabrics is None:
                fabrics = _fabric_runs(racks)
            fscored = {
                f: (used, gpus)
                for f, (runs, hosts, gpus) in fabrics.items()
                if (used := _pick_counts(runs, hosts, k, need)) is not None
            }
            if fscored:
                best = min(fscored.values())
                return BlockPlan(fabrics=frozenset(f for f, s in fscored.items() if s == best))
    return None


# --- the per-rack summary placement reads first -----------------------------------------------

#: One kind of host in a rack's summary: fabric (lower-cased, '' when unset), usable GPUs,
#: model, smallest GPU memory (MiB, None unknown) and the validated profiles (sorted).
SummaryKey = tuple[str, int, str | None, int | None, tuple[str, ...]]


def summarize(keys: Iterable[SummaryKey]) -> list[list[Any]]:
    """The summary entries of one rack's candidate hosts (one key each): how many hosts of
    each kind, as JSON-ready arrays ``[fabric, gpus, model, mem, [profiles], hosts]`` (short
    to store and to read) in a stable order."""
    counts = Counter(keys)
    return [
        [f, g, m, mem, list(p), n]
        for (f, g, m, mem, p), n in sorted(counts.items(), key=lambda kv: repr(kv[0]))
    ]


def summary_blocks(
    req: Request, racks: Iterable[tuple[str, Sequence[Sequence[Any]]]]
) -> dict[Block, Counter[int]]:
    """The candidate counts :func:`plan_blocks` reads, from the racks' summary entries (see
    :func:`summarize`): per (rack, fabric) block, how many hosts of each GPU count match the
    request's hardware and profile. The window (leases, reservations) and any selector are
    not in the summary: the service checks the hosts it then reads."""
    out: dict[Block, Counter[int]] = {}
    seen: dict[tuple[Any, ...], bool] = {}  # racks repeat a few kinds of host
    for rack, entries in racks:
        for fabric, gpus, model, mem, profiles, hosts in entries:
            sig = (fabric, gpus, model, mem, *profiles)
            ok = seen.get(sig)
            if ok is None:
                view = HostView(
                    name="",
                    state=HostState.AVAILABLE,
                    gpus=int(gpus),
                    model=model,
                    gpu_memory_mib=mem,
                    fabric=fabric or None,
                )
                ok = seen[sig] = matches_hardware(req, view) and (
                    req.profile is None or req.profile in profiles
                )
            if ok:
                block = (rack, fabric or "")
                c = out.get(block)
                if c is None:
                    c = out[block] = Counter()
                c[gpus] += hosts
    return out
