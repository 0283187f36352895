"""The inspection probe (``gpufleet inspect``): one cheap POSIX sh command per host per sweep,
and the pure parser of its answer into a :class:`~gpufleet.domain.rules.HostSample`.

The probe prints framed parts, each after a ``@@probe NAME`` line:

``gpu``     ``nvidia-smi --query-gpu=<PROBE_FIELDS> --format=csv,nounits`` (with its header row,
            so the columns are named by nvidia-smi itself), then ``@@rc N``
``fabric``  ``nvidia-smi --query-gpu=<FABRIC_FIELDS> --format=csv,nounits``, then ``@@rc N``:
            the multi-node NVLink fabric (issue 27), asked apart from ``gpu`` because an
            nvidia-smi older than the fields refuses the whole query; such a refusal (or no
            part) means no fabric to judge, never a failure of the GPU query
``kmsg``    kernel-log ``NVRM: Xid`` lines (``dmesg --time-format iso``, else ``journalctl -k``)
``ib``      ``port CA/N state=STATE counter=value ...`` per IB/RoCE port, from sysfs
``disk``    ``df -P -k`` of the configured paths
``uptime``  ``/proc/uptime`` (grace after boot)
``driver``  seconds since the ``nvidia`` kernel module was loaded: the host's clock minus the
            modification time of ``/sys/module/nvidia`` (sysfs creates the directory when the
            module loads; grace after a driver reload without a reboot); empty when not loaded
``boot``    ``/proc/sys/kernel/random/boot_id`` (issue 24 item 4: faults belong to a boot);
            where it cannot be read, the boot is named by the boot time the uptime gives
            (``uptime:<ISO minute>``)

No data is a fault (issue 24 item 1): every failure to observe becomes a
:class:`~gpufleet.domain.samples.ProbeFailure` of a kind the rules name (``observe`` rules):
nvidia-smi not found (rc 127), the driver not loaded ("couldn't communicate with the NVIDIA
driver", rc 9), a GPU handle error ("Unable to determine the device handle ... Unknown Error",
rc 15), a GPU in an error state (a row saying "GPU is lost", "ERR!" ...), the tool timing out
(``timeout``'s rc 124), any other failure or unreadable answer, cut kernel-log Xid lines and
unreadable parts.

Whether the GPUs have NVLink (topology-aware rules) is not probed: the service takes it from
the host's latest collected facts (``nvidia-smi nvlink -s``). File paths are prefixed with
``$GPUFLEET_SYSROOT`` (empty on a real host) as the collection
script does, so the real-sshd lab can serve them. Parsing never touches the store.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from gpufleet.collect.inspect_vendors import parse_vendor_parts, vendor_probe_lines
from gpufleet.collect.kernel_log import parse_xids
from gpufleet.collect.nvidia_smi.csv import parse_query_gpu_csv
from gpufleet.domain.device_health import DeviceFault
from gpufleet.domain.fabric import fabric_conditions
from gpufleet.domain.facts import Gpu, UnreadableXid
from gpufleet.domain.samples import (
    PORT_METRICS,
    DiskSample,
    GpuSample,
    HostSample,
    PortSample,
    ProbeFailure,
    XidSeen,
)
from gpufleet.domain.times import as_utc
from gpufleet.errors import ParseError

#: Marker the lab's ``sim`` transport recognises (it answers with rendered captures).
PROBE_MARK = "@@gpufleet:probe"

#: The ``--query-gpu`` fields of the probe (canonical names; R535+ for the clock-event reasons).
PROBE_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "temperature.gpu",
    "power.draw",
    "enforced.power.limit",
    "clocks.current.sm",
    "clocks.current.memory",
    "clocks.max.sm",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.total",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.aggregate.total",
    "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.single_bit_ecc.count",
    "retired_pages.double_bit.count",
    "retired_pages.pending",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "fan.speed",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "clocks_event_reasons.sw_power_cap",
    "clocks_event_reasons.hw_slowdown",
    "clocks_event_reasons.hw_thermal_slowdown",
    "clocks_event_reasons.hw_power_brake_slowdown",
    "clocks_event_reasons.sw_thermal_slowdown",
    "clocks_event_reasons.sync_boost",
)

#: The fabric part's ``--query-gpu`` fields (R570+: driver 590's ``--help-query-gpu``).
FABRIC_FIELDS: tuple[str, ...] = (
    "index",
    "fabric.state",
    "fabric.status",
    "fabric.cliqueId",
    "fabric.clusterUuid",
    "fabric.health.summary",
    "fabric.health.bandwidth",
    "fabric.health.route_recovery_in_progress",
    "fabric.health.route_unhealthy",
    "fabric.health.access_timeout_recovery",
    "fabric.health.incorrect_configuration",
)

#: IB/RoCE port counters read from ``/sys/class/infiniband/*/ports/*/counters``.
IB_COUNTERS: tuple[str, ...] = PORT_METRICS

_REASONS = (
    "sw_power_cap",
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
    "sync_boost",
)


def probe_script(
    disk_paths: Sequence[str] = ("/",),
    gpu_timeout_s: int = 20,
    vendors: Sequence[str] | None = None,
) -> str:
    """The probe command for one host. ``vendors``: the host's accelerator vendors (None:
    NVIDIA only); the ``gpu`` and ``driver`` parts are NVIDIA's, every other vendor's parts
    are its plugin's (:mod:`gpufleet.collect.inspect_vendors`)."""
    paths = " ".join(shlex.quote(p) for p in disk_paths) or "/"
    counters = " ".join(IB_COUNTERS)
    nvidia = vendors is None or "nvidia" in vendors
    others = [v for v in vendors or () if v != "nvidia"]
    gpu = [
        "echo '@@probe gpu'",
        f"timeout {gpu_timeout_s} nvidia-smi --query-gpu={','.join(PROBE_FIELDS)} "
        "--format=csv,nounits 2>&1",
        'echo "@@rc $?"',
        "echo '@@probe fabric'",
        f"timeout {gpu_timeout_s} nvidia-smi --query-gpu={','.join(FABRIC_FIELDS)} "
        "--format=csv,nounits 2>&1",
        'echo "@@rc $?"',
    ]
    driver = [
        "echo '@@probe driver'",
        'm=$(stat -c %Y "$R"/sys/module/nvidia 2>/dev/null) && echo "$(( $(date +%s) - m ))"',
    ]
    return "\n".join(
        [
            f"# {PROBE_MARK} v1",
            'R="${GPUFLEET_SYSROOT:-}"',
            *(gpu if nvidia else []),
            *(vendor_probe_lines(others, gpu_timeout_s) if others else []),
            "echo '@@probe kmsg'",
            "{ dmesg --time-format iso 2>/dev/null || journalctl -k -o short-iso --no-pager "
            "2>/dev/null; } | grep 'NVRM: Xid' | tail -n 500",
            "echo '@@probe ib'",
            'for p in "$R"/sys/class/infiniband/*/ports/*; do',
            '  [ -d "$p" ] || continue',
            # read is a shell builtin: no process per file (9 ports x 8 counters per host)
            '  ca=${p%/ports/*}; ca=${ca##*/}; s=; read -r s 2>/dev/null < "$p/state"',
            '  printf \'port %s/%s state=%s\' "$ca" "${p##*/}" "${s#*: }"',
            f"  for c in {counters}; do",
            # (a file without a final newline still sets v; a missing one leaves it empty)
            '    v=; read -r v 2>/dev/null < "$p/counters/$c"',
            '    [ -n "$v" ] && printf \' %s=%s\' "$c" "$v"',
            "  done",
            "  echo",
            "done",
            "echo '@@probe disk'",
            f"df -P -k {paths} 2>/dev/null",
            "echo '@@probe uptime'",
            'cat "$R"/proc/uptime 2>/dev/null',
            *(driver if nvidia else []),
            "echo '@@probe boot'",
            'cat "$R"/proc/sys/kernel/random/boot_id 2>/dev/null',
            "echo '@@probe end'",
            "",
        ]
    )


@dataclass(frozen=True)
class ProbeResult:
    """A parsed probe answer: the sample, where the kernel log was read up to, and the parts
    that could not be read (named; the sample keeps None for them)."""

    sample: HostSample
    kmsg_cursor: str | None
    problems: tuple[str, ...]
    #: what the vendor plugins' parts say is wrong (judged by the policy's device rules)
    faults: tuple[DeviceFault, ...] = ()

    @property
    def observed(self) -> bool:
        """True only when every part was read and nothing failed (outcome ``ok``)."""
        return not self.problems and not self.sample.failures


def split_probe(text: str, source: str = "probe") -> dict[str, str]:
    """The probe's parts by name; :class:`ParseError` when it is not a probe answer."""
    parts: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("@@probe "):
            current = line.split(" ", 1)[1].strip()
            parts[current] = []
        elif current is not None:
            parts[current].append(line)
    if "end" not in parts:
        missing = "no '@@probe' parts" if not parts else "cut short (no '@@probe end')"
        raise ParseError(source, f"not a complete probe answer: {missing}")
    return {k: "\n".join(v) for k, v in parts.items()}


def _gpu_sample(g: Gpu) -> GpuSample:
    r = g.clock_event_reasons
    reasons = frozenset(x for x in _REASONS if r is not None and getattr(r, x) is True)
    ev, ea = g.ecc_volatile, g.ecc_aggregate
    rp, rr = g.retired_pages, g.remapped_rows
    return GpuSample(
        index=g.index,
        uuid=g.uuid,
        model=g.product_name,
        pci_bus_id=g.pci_bus_id,
        temperature_c=g.temperature_c,
        power_w=g.power_draw_w,
        power_limit_w=g.power_limit_w,
        sm_clock_mhz=g.clocks_sm_mhz,
        max_sm_clock_mhz=g.clocks_max_sm_mhz,
        mem_clock_mhz=g.clocks_mem_mhz,
        utilization_gpu_pct=g.utilization_gpu_pct,
        utilization_memory_pct=g.utilization_memory_pct,
        memory_used_mib=g.memory_used_mib,
        ecc_volatile_correctable=ev.correctable if ev else None,
        ecc_volatile_uncorrectable=ev.uncorrectable if ev else None,
        ecc_aggregate_correctable=ea.correctable if ea else None,
        ecc_aggregate_uncorrectable=ea.uncorrectable if ea else None,
        retired_single_bit=rp.single_bit if rp else None,
        retired_double_bit=rp.double_bit if rp else None,
        retired_pending=rp.pending if rp else None,
        remap_correctable=rr.correctable if rr else None,
        remap_uncorrectable=rr.uncorrectable if rr else None,
        remap_pending=rr.pending if rr else None,
        remap_failure=rr.failure if rr else None,
        fan_pct=g.fan_speed_pct,
        pcie_gen=g.pcie_gen_current,
        pcie_gen_max=g.pcie_gen_max,
        pcie_width=g.pcie_width_current,
        pcie_width_max=g.pcie_width_max,
        reasons=reasons,
    )


def parse_gpus(text: str, source: str = "nvidia-smi --query-gpu") -> tuple[GpuSample, ...]:
    """The ``gpu`` part: the CSV (header row first) and its ``@@rc`` line."""
    return tuple(_gpu_sample(g) for g in _parse_gpu_part(text, source))


def _with_fabric(
    gpus: tuple[GpuSample, ...], text: str | None, source: str
) -> tuple[GpuSample, ...]:
    """``gpus`` with the fabric part's conditions added to their ``reasons`` (by index): none
    when the part is absent or nvidia-smi refused the fields (a driver without them)."""
    if text is None:
        return gpus
    body, rc = _split_rc(text)
    if rc != "0":
        return gpus
    by_index = {
        g.index: fabric_conditions(g) for g in parse_query_gpu_csv(body, FABRIC_FIELDS, source)
    }
    return tuple(
        replace(g, reasons=g.reasons | by_index[g.index]) if by_index.get(g.index) else g
        for g in gpus
    )


def _split_rc(text: str) -> tuple[str, str]:
    lines = text.splitlines()
    rc_line = next((x for x in reversed(lines) if x.startswith("@@rc ")), None)
    body = "\n".join(x for x in lines if not x.startswith("@@rc "))
    rc_words = rc_line.split() if rc_line else []
    return body, rc_words[1] if len(rc_words) > 1 else "?"


def _parse_gpu_part(text: str, source: str) -> list[Gpu]:
    body, rc = _split_rc(text)
    if rc != "0":
        first = body.strip().splitlines()[0][:160] if body.strip() else "no output"
        raise ParseError(source, f"nvidia-smi exited {rc}: {first}")
    return parse_query_gpu_csv(body, PROBE_FIELDS, source)


#: What nvidia-smi says when the driver is not loaded / a GPU cannot be reached.
_DRIVER_DOWN = ("couldn't communicate with the nvidia driver", "driver/library version mismatch")
_HANDLE = ("unable to determine the device handle", "unknown error", "gpu is lost")


def gpu_failure(text: str, source: str) -> ProbeFailure | None:
    """The kind of failure of the ``gpu`` part (None: it answered); the detail quotes it."""
    body, rc = _split_rc(text)
    low = body.lower()
    first = body.strip().splitlines()[0][:200] if body.strip() else "no output"
    if rc == "0":
        return None
    if rc == "127" or "not found" in low or "no such file" in low:
        return ProbeFailure("gpu_tool_missing", f"{source}: nvidia-smi not found: {first}")
    if rc == "124":
        return ProbeFailure("probe_timeout", f"{source}: nvidia-smi did not answer in time")
    if any(m in low for m in _DRIVER_DOWN):
        return ProbeFailure("driver_not_loaded", f"{source}: nvidia-smi exited {rc}: {first}")
    if any(m in low for m in _HANDLE):
        line = next((x for x in body.splitlines() if any(m in x.lower() for m in _HANDLE)), first)
        return ProbeFailure("gpu_handle_error", f"{source}: nvidia-smi exited {rc}: {line[:200]}")
    return ProbeFailure("gpu_tool_error", f"{source}: nvidia-smi exited {rc}: {first}")


def boot_identity(text: str, at: datetime, uptime_s: float | None) -> str | None:
    """The ``boot`` part's boot id, else ``uptime:<boot time to the minute>``, else None."""
    words = text.split()
    if words and len(words[0]) <= 64:
        return words[0]
    if uptime_s is None:
        return None
    booted = (at - timedelta(seconds=uptime_s)).replace(second=0, microsecond=0)
    return f"uptime:{booted.astimezone(UTC).isoformat()}"


def parse_ports(text: str, source: str = "ib") -> tuple[PortSample, ...]:
    """``port mlx5_0/1 state=ACTIVE link_downed=0 ...`` lines."""
    out: list[PortSample] = []
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split()
        if not words:
            continue
        if words[0] != "port" or len(words) < 2:
            raise ParseError(source, f"expected 'port CA/N ...': {line[:80]!r}", line=number)
        state: str | None = None
        counters: dict[str, int] = {}
        for w in words[2:]:
            key, sep, value = w.partition("=")
            if not sep:
                raise ParseError(source, f"expected name=value, got {w!r}", line=number)
            if key == "state":
                state = value or None
                continue
            try:
                counters[key] = int(value)
            except ValueError:
                raise ParseError(
                    source, f"port {words[1]}: {key} is not a number: {value!r}", line=number
                ) from None
        out.append(PortSample(words[1], state, counters))
    return tuple(out)


def parse_df(text: str, source: str = "df -P -k") -> tuple[DiskSample, ...]:
    """POSIX ``df -P -k``: header, then filesystem, 1024-blocks, used, available, capacity,
    mounted on (the mount point may hold spaces)."""
    out: list[DiskSample] = []
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split()
        if not words or words[0] == "Filesystem":
            continue
        if len(words) < 6:
            raise ParseError(source, f"expected 6 columns: {line[:80]!r}", line=number)
        try:
            size, used = int(words[1]), int(words[2])
        except ValueError:
            raise ParseError(source, f"sizes are not numbers: {line[:80]!r}", line=number) from None
        out.append(DiskSample(" ".join(words[5:]), size, used))
    return tuple(out)


def parse_probe(
    text: str,
    at: datetime,
    *,
    kmsg_since: str | None = None,
    source: str = "probe",
) -> ProbeResult:
    """Turn one probe answer into a sample taken ``at``.

    Only Xid lines newer than ``kmsg_since`` (the cursor the previous sweep returned, an ISO
    time) count; the new cursor is the newest Xid time seen. A GPU part that cannot be read
    leaves ``gpus`` None (the rules see nothing, they do not see "healthy"); other unreadable
    parts are named in ``problems``. Other vendors' parts are read by their plugins
    (:func:`~gpufleet.collect.inspect_vendors.parse_vendor_parts`): on a host without the
    NVIDIA ``gpu`` part their devices are the sample's ``gpus`` and their tools' failures the
    sample's failures.
    """
    parts = split_probe(text, source)
    problems: list[str] = []
    failures: list[ProbeFailure] = []
    gpus: tuple[GpuSample, ...] | None = None
    gpu_source = f"{source}: nvidia-smi --query-gpu"
    try:
        read = _parse_gpu_part(parts.get("gpu", ""), gpu_source)
    except ParseError as exc:
        problems.append(str(exc))
        failures.append(
            gpu_failure(parts.get("gpu", ""), gpu_source)
            or ProbeFailure("gpu_tool_error", str(exc))
        )
    else:
        gpus = tuple(_gpu_sample(g) for g in read)
        try:
            gpus = _with_fabric(gpus, parts.get("fabric"), f"{source}: fabric")
        except ParseError as exc:
            problems.append(str(exc))
        broken = [f"GPU {g.index}: {g.error}" for g in read if g.error]
        if broken:
            detail = f"{gpu_source}: " + "; ".join(broken)
            problems.append(detail)
            failures.append(ProbeFailure("gpu_error_state", detail))
    vendor = parse_vendor_parts(parts, source)  # other vendors: their plugins
    if vendor is not None and "gpu" not in parts:  # no NVIDIA GPUs: theirs are the devices
        gpus, problems, failures = vendor.devices, list(vendor.problems), list(vendor.failures)
    elif vendor is not None:
        problems += vendor.problems
        failures += vendor.failures
    since = _iso(kmsg_since)
    xids: list[XidSeen] = []
    cursor = kmsg_since
    newest = since
    cut: list[UnreadableXid] = []
    for e in parse_xids(parts.get("kmsg", ""), f"{source}: kernel log", unreadable=cut):
        t = as_utc(e.time) if e.time else e.time
        if t is not None and since is not None and t <= since:
            continue
        if t is None and since is not None:
            continue  # no wall-clock time: counted on the first sweep only
        xids.append(XidSeen(e.code, e.pci_address, t, e.message))
        if t is not None and (newest is None or t > newest):
            newest, cursor = t, t.isoformat()
    new_cut = [u for u in cut if _is_new(u.time, since)]
    for u in new_cut:  # the cursor passes a cut line too: reported once, not every sweep
        ut = as_utc(u.time) if u.time else u.time
        if ut is not None and (newest is None or ut > newest):
            newest, cursor = ut, ut.isoformat()
    if new_cut:  # a cut Xid line may be a fatal one: never dropped silently
        detail = f"{source}: kernel log: {len(new_cut)} unreadable Xid line(s): " + "; ".join(
            f"line {u.line}: {u.text}" for u in new_cut[:3]
        )
        problems.append(detail)
        failures.append(ProbeFailure("kmsg_unreadable", detail))
    parts_from = len(problems)  # what follows: the other parts (each a part_unreadable)
    ports: tuple[PortSample, ...] = ()
    try:
        ports = parse_ports(parts.get("ib", ""), f"{source}: ib")
    except ParseError as exc:
        problems.append(str(exc))
    ports += vendor.ports if vendor is not None else ()
    disks: tuple[DiskSample, ...] = ()
    try:
        disks = parse_df(parts.get("disk", ""), f"{source}: df")
    except ParseError as exc:
        problems.append(str(exc))
    uptime: float | None = None
    raw = parts.get("uptime", "").split()
    if raw:
        try:
            uptime = float(raw[0])
        except ValueError:
            problems.append(f"{source}: /proc/uptime: not a number: {raw[0][:40]!r}")
    driver_age: float | None = None
    raw = parts.get("driver", "").split()
    if raw:
        try:
            driver_age = max(0.0, float(raw[0]))  # a clock stepped back: just loaded
        except ValueError:
            problems.append(
                f"{source}: driver load age (/sys/module/nvidia): not a number: {raw[0][:40]!r}"
            )
    failures += [ProbeFailure("part_unreadable", p) for p in problems[parts_from:]]
    sample = HostSample(
        at=at,
        gpus=gpus,
        xids=tuple(xids),
        ports=ports,
        disks=disks,
        uptime_s=uptime,
        driver_age_s=driver_age,
        failures=tuple(failures),
        boot_id=boot_identity(parts.get("boot", ""), at, uptime),
    )
    return ProbeResult(sample, cursor, tuple(problems), vendor.faults if vendor is not None else ())


def _is_new(t: datetime | None, since: datetime | None) -> bool:
    """A kernel-log line newer than the cursor (one without a time: the first sweep only)."""
    if since is None:
        return True
    if t is None:
        return False
    return as_utc(t) > since


def _iso(text: str | None) -> datetime | None:
    if not text:
        return None
    return as_utc(datetime.fromisoformat(text))
