"""Redfish client for a host's BMC, on ``sushy`` (the OpenStack library Ironic uses).

Each function opens one short-lived connection (HTTP basic auth; TLS verified unless the
operator asked for ``insecure``; a CA bundle when given), maps the resources it reads
explicitly into :mod:`gpufleet.domain.bmc` models, and turns every failure into a
:class:`BmcFailure` with an outcome and a one-line reason naming the host. The password is a
constructor argument only: it is never logged, formatted or returned (``BmcTarget`` hides it
from ``repr``). Reads never touch the store; the services decide what is kept.

sushy maps ComputerSystem, Processor, Manager and VirtualMedia; it has no LogService, so the
event log is read as raw JSON through the same connection and mapped here (the System's log
services first, else the Manager's: vendors differ).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import requests
import sushy  # type: ignore[import-untyped]
from pydantic import ValidationError
from sushy import exceptions as sx
from sushy.auth import BasicAuth  # type: ignore[import-untyped]

from gpufleet.collect.redfish_guard import (
    DeadlineExceeded,
    Exchange,
    GuardedConnector,
    guard_failure,
)
from gpufleet.domain.bmc import (
    BmcGpu,
    BmcIdentity,
    BmcOutcome,
    BmcReading,
    PowerAction,
    SelEntry,
)

# sushy logs request bodies at DEBUG; nothing of ours turns that on, and nothing may.
logging.getLogger("sushy").setLevel(logging.WARNING)

#: Most log entries read per log service (newest pages are not fetched beyond this).
MAX_SEL_ENTRIES = 2000
#: Largest body of one Redfish answer read by default (GPUFLEET_BMC_MAX_BODY_BYTES).
MAX_BODY_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class BmcTarget:
    """How to reach one host's BMC. ``verify``: True (system CAs), a CA bundle path, or
    False (only when the operator asked for ``--insecure``)."""

    host: str
    address: str
    username: str
    password: str = field(repr=False)
    verify: bool | str = True
    system_id: str | None = None
    timeout_s: float = 10.0
    #: Seconds the whole exchange with the BMC may take (every request of one read or
    #: action); None: only each request's ``timeout_s``.
    deadline_s: float | None = None
    max_body_bytes: int = MAX_BODY_BYTES

    @property
    def base_url(self) -> str:
        addr = self.address.rstrip("/")
        if "://" not in addr:
            addr = "https://" + addr
        return addr.removesuffix("/redfish/v1")


class BmcFailure(Exception):
    """A BMC could not be read or did not do what was asked; ``str()`` names the host and
    never holds a credential."""

    def __init__(self, host: str, outcome: BmcOutcome, reason: str) -> None:
        self.host, self.outcome, self.reason = host, outcome, reason
        super().__init__(f"{host}: BMC {outcome}: {reason}")


def _scrub(text: str, target: BmcTarget) -> str:
    if target.password and target.password in text:
        text = text.replace(target.password, "<redacted>")
    return text[:400]


def _classify(exc: BaseException, target: BmcTarget) -> BmcFailure:
    t = target.host
    where = target.base_url
    if isinstance(exc, BmcFailure):
        return exc
    guard = guard_failure(exc)
    if isinstance(guard, DeadlineExceeded):
        return BmcFailure(t, BmcOutcome.TIMEOUT, f"{where}: no complete answer within "
                          f"{target.deadline_s:g} s (the deadline of the whole exchange)")
    if guard is not None:
        return BmcFailure(t, BmcOutcome.BAD_RESPONSE, f"{where}: refused: {guard}")
    if isinstance(exc, sx.AccessError):
        return BmcFailure(
            t, BmcOutcome.AUTH_FAILED,
            f"{where} refused the credentials of user {target.username!r} "
            f"(HTTP {getattr(exc, 'status_code', '401')})",
        )
    if isinstance(exc, sx.ConnectionError):
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, requests.exceptions.SSLError) or "SSLError" in str(exc) or (
            "CERTIFICATE_VERIFY_FAILED" in str(exc)
        ):
            return BmcFailure(
                t, BmcOutcome.TLS,
                f"{where}: TLS certificate not trusted (give the BMC's CA with "
                "gpufleet_bmc_ca_bundle / --ca-bundle; --insecure only if you must)",
            )
        if isinstance(cause, requests.exceptions.Timeout) or "timed out" in str(exc).lower():
            return BmcFailure(t, BmcOutcome.TIMEOUT, f"{where}: no answer within "
                              f"{target.timeout_s:g} s")
        return BmcFailure(t, BmcOutcome.UNREACHABLE, f"{where}: cannot connect")
    if isinstance(exc, (sx.MalformedAttributeError, sx.MissingAttributeError, ValidationError,
                        ValueError, KeyError, TypeError)):
        return BmcFailure(t, BmcOutcome.BAD_RESPONSE,
                          f"{where}: not a Redfish answer ({type(exc).__name__}: "
                          f"{_scrub(str(exc), target)})")
    if isinstance(exc, sx.HTTPError):
        return BmcFailure(t, BmcOutcome.ERROR, f"{where}: {_scrub(str(exc), target)}")
    if isinstance(exc, sx.SushyError):
        return BmcFailure(t, BmcOutcome.ERROR, f"{where}: {_scrub(str(exc), target)}")
    if isinstance(exc, requests.exceptions.RequestException):
        return BmcFailure(t, BmcOutcome.UNREACHABLE, f"{where}: {type(exc).__name__}")
    return BmcFailure(t, BmcOutcome.ERROR, f"{where}: {type(exc).__name__}: "
                      f"{_scrub(str(exc), target)}")


@contextmanager
def _session(target: BmcTarget) -> Iterator[sushy.Sushy]:
    """A sushy root for ``target``; every failure inside becomes a :class:`BmcFailure`."""
    root: sushy.Sushy | None = None
    exchange = Exchange(target.deadline_s, target.max_body_bytes)
    try:
        with exchange:
            url = target.base_url + "/redfish/v1"
            root = sushy.Sushy(
                url,
                auth=BasicAuth(username=target.username, password=target.password),
                connector=GuardedConnector(
                    url, exchange, verify=target.verify,
                    default_request_timeout=target.timeout_s,
                    connect_timeout=target.timeout_s,
                    server_side_retries=0, server_side_retries_delay=0,
                ),
            )
            yield root
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise
        raise _classify(exc, target) from None
    finally:
        if root is not None:
            with suppress(Exception):
                root._conn.close()


def _system(root: sushy.Sushy, target: BmcTarget) -> Any:
    ids = list(root.get_system_collection().members_identities)
    if target.system_id:
        want = [i for i in ids if i.rstrip("/").rsplit("/", 1)[-1] == target.system_id]
        if not want:
            raise BmcFailure(
                target.host, BmcOutcome.ERROR,
                f"{target.base_url} has no system {target.system_id!r} "
                f"({len(ids)} systems; gpufleet_bmc_system names one)",
            )
        return root.get_system(want[0])
    if len(ids) != 1:
        raise BmcFailure(
            target.host, BmcOutcome.ERROR,
            f"{target.base_url} has {len(ids)} systems: name one with gpufleet_bmc_system",
        )
    return root.get_system(ids[0])


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if hasattr(value, "value"):
        value = value.value
    if not isinstance(value, (str, int, float)):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return str(value)


def _get_json(conn: Any, path: str) -> dict[str, Any]:
    data = conn.get(path=path).json()
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def _members(conn: Any, path: str) -> list[str]:
    data = _get_json(conn, path)
    out = []
    for m in data.get("Members", []):
        if not isinstance(m, dict) or not isinstance(m.get("@odata.id"), str):
            raise ValueError(f"{path}: a member without @odata.id")
        out.append(m["@odata.id"])
    return out


def _link(data: dict[str, Any], key: str) -> str | None:
    v = data.get(key)
    if isinstance(v, dict) and isinstance(v.get("@odata.id"), str):
        return str(v["@odata.id"])
    return None


def _read_logs(conn: Any, owner: str, path: str) -> tuple[list[SelEntry], str] | None:
    """Entries of the first log service of ``path`` (a System or Manager), or None when it
    offers none. The SEL-typed service (LogEntryType SEL) is preferred."""
    data = _get_json(conn, path)
    services_path = _link(data, "LogServices")
    if services_path is None:
        return None
    services = _members(conn, services_path)
    if not services:
        return None
    chosen = services[0]
    for sp in services:
        sd = _get_json(conn, sp)
        if str(sd.get("LogEntryType", "")).upper() == "SEL" or "sel" in sp.lower():
            chosen = sp
            break
    sd = _get_json(conn, chosen)
    entries_path = _link(sd, "Entries")
    if entries_path is None:
        return None
    coll = _get_json(conn, entries_path)
    out: list[SelEntry] = []
    source = f"{owner}:{chosen.rstrip('/').rsplit('/', 1)[-1]}"
    for m in coll.get("Members", [])[:MAX_SEL_ENTRIES]:
        if not isinstance(m, dict):
            raise ValueError(f"{entries_path}: a member is not an object")
        entry = m if "Id" in m else _get_json(conn, str(m["@odata.id"]))
        out.append(
            SelEntry(
                key=f"{source}/{entry['Id']}",
                created=_text(entry.get("Created")),
                severity=_text(entry.get("Severity")),
                message=str(entry.get("Message") or entry.get("EntryCode") or "")[:4096],
                entry_type=_text(entry.get("EntryType")),
            )
        )
    return out, source


def _gpus(system: Any) -> list[BmcGpu] | None:
    try:
        procs = system.processors
    except (sx.MissingAttributeError, sx.HTTPError):
        return None  # no Processors (or the BMC answers 501): not said, not "none"
    try:
        members = procs.get_members()
    except sx.HTTPError:
        return None
    out = []
    for p in members:
        if _text(p.processor_type) != "GPU":
            continue
        raw = p.json
        out.append(
            BmcGpu(
                id=str(p.identity),
                manufacturer=_text(p.manufacturer),
                model=_text(p.model),
                serial=_text(raw.get("SerialNumber")),
                health=_text(p.status.health) if p.status else None,
            )
        )
    return out


def read_bmc(target: BmcTarget) -> BmcReading:
    """Identity, power, health, GPU processors and the event log of ``target``'s system;
    :class:`BmcFailure` when the BMC cannot be read or does not answer Redfish."""
    with _session(target) as root:
        system = _system(root, target)
        conn = system._conn  # sushy's connection: the log services are read raw through it
        sel = _read_logs(conn, f"System:{system.identity}", system.path)
        if sel is None:
            for mpath in _managers(root, system):
                sel = _read_logs(conn, f"Manager:{mpath.rstrip('/').rsplit('/', 1)[-1]}",
                                 mpath)
                if sel is not None:
                    break
        status = system.status
        return BmcReading(
            system_id=str(system.identity),
            identity=BmcIdentity(
                manufacturer=_text(system.manufacturer),
                model=_text(system.model),
                serial=_text(system.serial_number),
                uuid=_text(system.uuid),
                bios_version=_text(system.bios_version),
            ),
            power_state=_text(system.power_state),
            health=_text(status.health) if status else None,
            health_rollup=_text(status.health_rollup) if status else None,
            gpus=_gpus(system),
            sel=sel[0] if sel else None,
            sel_source=sel[1] if sel else None,
        )


def _managers(root: sushy.Sushy, system: Any) -> list[str]:
    links = system.json.get("Links", {}).get("ManagedBy", [])
    paths = [m["@odata.id"] for m in links if isinstance(m, dict) and "@odata.id" in m]
    if not paths:
        paths = list(root.get_manager_collection().members_identities)
    return paths


def power_state(target: BmcTarget) -> str | None:
    """The system's PowerState now."""
    with _session(target) as root:
        return _text(_system(root, target).power_state)


_RESETS: dict[PowerAction, tuple[str, ...]] = {
    PowerAction.ON: ("On", "ForceOn"),
    PowerAction.OFF: ("ForceOff", "GracefulShutdown"),
    PowerAction.RESET: ("ForceRestart", "GracefulRestart", "PowerCycle"),
    PowerAction.CYCLE: ("PowerCycle",),
}


def power(
    target: BmcTarget,
    action: PowerAction,
    *,
    settle_s: float = 60.0,
    poll_s: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Do ``action`` and wait (up to ``settle_s``) for the power state it ends in; returns
    the state reached. A BMC without PowerCycle gets ForceOff, wait Off, On (a cycle)."""
    with _session(target) as root:
        system = _system(root, target)
        allowed = {_text(v) for v in system.get_allowed_reset_system_values()}
        before = _text(system.power_state)
        steps: list[tuple[str, str]] = []
        pick = next((r for r in _RESETS[action] if r in allowed), None)
        if pick is not None:
            steps.append((pick, action.settles_to))
        elif action is PowerAction.CYCLE and {"ForceOff", "On"} <= allowed:
            if (before or "").lower() != "off":
                steps.append(("ForceOff", "Off"))
            steps.append(("On", "On"))
        else:
            offered = ", ".join(sorted(a for a in allowed if a))
            raise BmcFailure(
                target.host, BmcOutcome.ERROR,
                f"the BMC offers no reset for {action} (it allows {offered})",
            )
        state = before
        for reset, want in steps:
            system.reset_system(sushy.ResetType(reset))
            state = _wait_power(system, want, settle_s, poll_s, sleep, target)
        return state


def _wait_power(
    system: Any, want: str, settle_s: float, poll_s: float,
    sleep: Callable[[float], None], target: BmcTarget,
) -> str | None:
    deadline = time.monotonic() + settle_s
    while True:
        system.refresh()
        state = _text(system.power_state)
        if (state or "").lower() == want.lower():
            return state
        if time.monotonic() >= deadline:
            raise BmcFailure(
                target.host, BmcOutcome.TIMEOUT,
                f"power state still {state} after {settle_s:g} s (waiting for {want})",
            )
        sleep(poll_s)


@dataclass
class MediaResult:
    """What :func:`boot_from_media` did."""

    device: str
    notes: list[str]
    power_state: str | None


def boot_from_media(
    target: BmcTarget, image_url: str, *, settle_s: float = 60.0, poll_s: float = 0.5
) -> MediaResult:
    """Insert ``image_url`` as virtual CD/DVD (ejecting what is there first), set a one-time
    boot override to it, and power-cycle. Vendor quirks handled: media already inserted
    (ejected first, or kept when it is the same image), a Manager-level or System-level
    VirtualMedia collection."""
    notes: list[str] = []
    with _session(target) as root:
        system = _system(root, target)
        devices = []
        with suppress(Exception):
            devices = list(system.virtual_media.get_members())
        if not devices:
            for mpath in _managers(root, system):
                with suppress(Exception):
                    devices = list(root.get_manager(mpath).virtual_media.get_members())
                if devices:
                    break
        cd = next(
            (d for d in devices
             if {_text(t) for t in (d.media_types or [])} & {"CD", "DVD"}),
            None,
        )
        if cd is None:
            raise BmcFailure(target.host, BmcOutcome.ERROR,
                             "the BMC offers no virtual CD/DVD device")
        if cd.inserted and cd.image:
            if cd.image == image_url:
                notes.append(f"{cd.identity}: {image_url} already inserted; ejected and "
                             "inserted again")
            else:
                notes.append(f"{cd.identity}: ejected {cd.image} (media already inserted)")
            cd.eject_media()
            cd.refresh()
        cd.insert_media(image_url, inserted=True, write_protected=True)
        cd.refresh()
        if cd.image != image_url:
            raise BmcFailure(target.host, BmcOutcome.ERROR,
                             f"{cd.identity}: inserted {image_url} but the BMC shows "
                             f"{cd.image!r}")
        system.set_system_boot_options(
            target=sushy.BootSource.CD, enabled=sushy.BootSourceOverrideEnabled.ONCE
        )
        device = str(cd.identity)
    state = power(target, PowerAction.CYCLE, settle_s=settle_s, poll_s=poll_s)
    return MediaResult(device, notes, state)


def call(target: BmcTarget, fn: Callable[[BmcTarget], Any]) -> Any:
    """``fn(target)`` with every failure a :class:`BmcFailure`."""
    try:
        return fn(target)
    except BmcFailure:
        raise
    except Exception as exc:
        raise _classify(exc, target) from None
