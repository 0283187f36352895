"""The hosts' BMCs over Redfish: enroll (``bmc set``), read (``bmc status``), power, reimage
by virtual media, acknowledge SEL faults.

``bmc status`` is a run of the pipeline (``service/core/pipeline.py``, through
:mod:`gpufleet.service.hosts.bmc_reads`) that takes none of the hosts' collection claims (a
BMC read must work while a collection, or a hung SSH, holds the host): *load* (one short
transaction: the selected hosts, their BMC settings, the SEL cursor and what is known
in-band), *run* (on the engine's loop, no transaction open: at most ``forks`` BMCs at once,
each Redfish read in a thread, within ``timeout`` per request and ``deadline`` in all),
*apply* (one short transaction per host in the engine's database executor: a ``bmc_reads``
row, alarms opened or closed by the domain's cross-checks). One BMC that refuses, times out
or answers garbage is reported for its host; the others are read.

Credentials: the password is the host's sealed ``gpufleet_bmc_password`` (opened only here,
only with the operator's key), a file named by ``gpufleet_bmc_password_file``, or
``GPUFLEET_BMC_PASSWORD``; it is never stored in clear, printed, put in an event or returned.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.collect.redfish import (
    BmcFailure,
    BmcTarget,
    MediaResult,
    boot_from_media,
    call,
)
from gpufleet.collect.redfish import power as redfish_power
from gpufleet.domain.bmc import (
    BmcIdentity,
    BmcOutcome,
    BmcReading,
    Finding,
    InBand,
    PowerAction,
    diagnose,
    health_findings,
    identity_findings,
    new_sel_entries,
)
from gpufleet.domain.changes import DeclaredChangeKind
from gpufleet.domain.events import AlarmKind, CollectionOutcome, EventKind
from gpufleet.domain.facts import DmiIdentity, HostFacts
from gpufleet.domain.spec import Baseline
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError, InvalidTransition, NotFound
from gpufleet.logs import hide, ids
from gpufleet.secrets import SEALED_PREFIX, SecretBox, redact_vars
from gpufleet.service.core.alarms import close_alarms, raise_alarm
from gpufleet.service.core.engine import engine
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.pipeline import check_forks, check_timeout
from gpufleet.service.core.select import select_hosts
from gpufleet.service.hosts import bmc_guard
from gpufleet.service.hosts.baselines import get_baseline
from gpufleet.service.hosts.bmc_reads import read_all
from gpufleet.service.hosts.drain import DrainApi, drain_first
from gpufleet.service.hosts.operations import REIMAGE_HINT, record_change
from gpufleet.store.repo import baseline_for_host, host_by_name
from gpufleet.store.tables import BmcRead, FactSnapshot, GpuRow, Host

ADDRESS = "gpufleet_bmc_address"
USERNAME = "gpufleet_bmc_username"
PASSWORD = "gpufleet_bmc_password"
PASSWORD_FILE = "gpufleet_bmc_password_file"
SYSTEM = "gpufleet_bmc_system"
CA_BUNDLE = "gpufleet_bmc_ca_bundle"
INSECURE = "gpufleet_bmc_insecure"
SERIAL = "gpufleet_bmc_serial"
UUID = "gpufleet_bmc_uuid"

_TRUE = {"1", "true", "yes", "on", "y"}
#: The longest deadline of one BMC's read (a day; GPUFLEET_BMC_DEADLINE has the same bound).
MAX_DEADLINE_S = 86_400

log = logging.getLogger(__name__)


def _password(host: Host, fleet: Fleet) -> str:
    v = host.vars
    sealed = v.get(PASSWORD)
    if sealed:
        if not sealed.startswith(SEALED_PREFIX):
            raise ConfigError(
                f"{host.name}: {PASSWORD} is stored unencrypted; set it again with "
                "'gpufleet bmc set' (or enroll again) with GPUFLEET_SECRET_KEY set"
            )
        key = fleet.settings.secret_key_bytes()
        if key is None:
            raise ConfigError(
                f"{host.name}: {PASSWORD} is stored encrypted and no secret key is set: set "
                "GPUFLEET_SECRET_KEY (or GPUFLEET_SECRET_KEY_FILE) to the key it was sealed with"
            )
        try:
            return SecretBox(key).open(sealed)
        except ConfigError as exc:
            raise ConfigError(f"{host.name}: {PASSWORD}: {exc}") from None
    path = v.get(PASSWORD_FILE)
    if path:
        try:
            text = Path(path).expanduser().read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"{host.name}: {PASSWORD_FILE}={path}: cannot read it "
                f"({getattr(exc, 'strerror', None) or type(exc).__name__})"
            ) from None
        if not text:
            raise ConfigError(f"{host.name}: {PASSWORD_FILE}={path} is empty")
        return text
    if fleet.settings.bmc_password is not None:
        return fleet.settings.bmc_password.get_secret_value()
    raise ConfigError(
        f"{host.name}: no BMC password ({PASSWORD} via 'gpufleet bmc set --password-file', "
        f"{PASSWORD_FILE}, or GPUFLEET_BMC_PASSWORD)"
    )


def bmc_target(host: Host, fleet: Fleet, timeout_s: float | None = None,
               deadline_s: float | None = None) -> BmcTarget:
    """How to reach ``host``'s BMC; :class:`ConfigError` naming the host and the variable
    when it has none or its credentials cannot be opened. ``deadline_s`` bounds the whole
    exchange (None: each request only); every answer's body is capped
    (``bmc_max_body_bytes``)."""
    v = host.vars
    address = v.get(ADDRESS)
    if not address:
        raise ConfigError(f"{host.name}: no BMC ({ADDRESS} not set)")
    username = v.get(USERNAME)
    if not username:
        raise ConfigError(f"{host.name}: {USERNAME} not set")
    verify: bool | str = True
    if v.get(INSECURE, "").lower() in _TRUE:
        verify = False
    elif v.get(CA_BUNDLE):
        verify = str(Path(v[CA_BUNDLE]).expanduser())
    password = _password(host, fleet)
    hide(password)  # never in a log line, whoever logs it (gpufleet.logs)
    return BmcTarget(
        host=host.name,
        address=address,
        username=username,
        password=password,
        verify=verify,
        system_id=v.get(SYSTEM) or None,
        timeout_s=timeout_s if timeout_s is not None else fleet.settings.bmc_timeout_s,
        deadline_s=deadline_s,
        max_body_bytes=fleet.settings.bmc_max_body_bytes,
    )


# --- bmc set ----------------------------------------------------------------------------------


def set_bmc(
    fleet: Fleet,
    name: str,
    *,
    address: str | None = None,
    username: str | None = None,
    password: str | None = None,
    password_file: str | None = None,
    system: str | None = None,
    ca_bundle: str | None = None,
    insecure: bool | None = None,
    serial: str | None = None,
    uuid: str | None = None,
) -> dict[str, str]:
    """Set ``name``'s BMC variables (None: unchanged). A password is sealed with the
    operator's key (refused without one); the ``bmc`` event and the returned variables show
    it redacted."""
    changes: dict[str, str] = {}
    for var, value in (
        (ADDRESS, address), (USERNAME, username), (PASSWORD_FILE, password_file),
        (SYSTEM, system), (CA_BUNDLE, ca_bundle), (SERIAL, serial), (UUID, uuid),
    ):
        if value is not None:
            changes[var] = value
    if insecure is not None:
        changes[INSECURE] = "true" if insecure else "false"
    if ca_bundle and not Path(ca_bundle).expanduser().is_file():
        raise ConfigError(f"--ca-bundle {ca_bundle}: not a file")
    if password is not None:
        key = fleet.settings.secret_key_bytes()
        if key is None:
            raise ConfigError(
                "a BMC password is stored only encrypted: set GPUFLEET_SECRET_KEY (or "
                "GPUFLEET_SECRET_KEY_FILE) first"
            )
        changes[PASSWORD] = SecretBox(key).seal(password)
    if not changes:
        raise ConfigError("bmc set: nothing to set (give --address, --username, ...)")
    with fleet.db.session() as s:
        h = host_by_name(s, name, for_update=True)
        before = redact_vars({k: h.vars.get(k, "") for k in changes})
        new_vars = dict(h.vars)
        new_vars.update(changes)
        h.vars = new_vars
        h.updated_at = fleet.now()
        after = redact_vars(changes)
        record_event(s, fleet, EventKind.BMC, "BMC settings changed: " + ", ".join(sorted(after)),
                     host=h, data={"action": "set", "before": before, "after": after})
        return after


# --- bmc status -------------------------------------------------------------------------------


@dataclass
class BmcStatus:
    """One host's ``bmc status`` line."""

    host: str
    outcome: str
    reason: str | None = None
    power_state: str | None = None
    health: str | None = None
    identity: dict[str, Any] | None = None
    gpus: list[dict[str, Any]] | None = None
    sel_new: list[dict[str, Any]] = field(default_factory=list)
    sel_source: str | None = None
    ssh: str | None = None
    diagnosis: str | None = None
    alarms: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.outcome == BmcOutcome.OK.value

    def as_json(self) -> dict[str, Any]:
        return {
            "host": self.host, "outcome": self.outcome, "reason": self.reason,
            "power_state": self.power_state, "health": self.health, "identity": self.identity,
            "gpus": self.gpus, "sel_new": self.sel_new, "sel_source": self.sel_source,
            "ssh": self.ssh, "diagnosis": self.diagnosis, "alarms": self.alarms,
        }


@dataclass
class _Job:
    host_id: int
    name: str
    target: BmcTarget | None
    refused: str | None
    ssh: CollectionOutcome | None
    seen: list[str] | None
    known: InBand


def _inband(s: Session, h: Host) -> InBand:
    pinned: BmcIdentity | None = None
    first = s.scalar(
        select(BmcRead).where(BmcRead.host_id == h.id, BmcRead.outcome == BmcOutcome.OK)
        .order_by(BmcRead.read_at, BmcRead.id).limit(1)
    )
    if first is not None and first.reading:
        pinned = BmcIdentity.model_validate(first.reading.get("identity") or {})
    serials: frozenset[str] | None = None
    dmi: DmiIdentity | None = None
    if h.latest_snapshot_id is not None:
        got = [x for x in s.scalars(select(GpuRow.serial).where(
            GpuRow.snapshot_id == h.latest_snapshot_id)) if x]
        serials = frozenset(got) if got else None
        snap = s.get(FactSnapshot, h.latest_snapshot_id)
        dmi = HostFacts.model_validate(snap.facts).dmi if snap is not None else None
    return InBand(serial=h.vars.get(SERIAL) or None, uuid=h.vars.get(UUID) or None,
                  pinned=pinned, gpu_serials=serials,
                  dmi_serial=dmi.serial if dmi else None, dmi_uuid=dmi.uuid if dmi else None)


def _load(fleet: Fleet, selector: str | None, timeout_s: float,
          deadline_s: float | None = None) -> list[_Job]:
    jobs: list[_Job] = []
    with fleet.db.session() as s:
        hosts = list(s.scalars(select_hosts(selector)))
        if selector and not hosts:
            raise NotFound(f"no hosts match selector '{selector}'")
        for h in hosts:
            if h.state is HostState.RETIRED:
                continue
            target: BmcTarget | None = None
            refused: str | None = None
            try:
                target = bmc_target(h, fleet, timeout_s, deadline_s)
            except ConfigError as exc:
                refused = str(exc)
            last = s.scalar(
                select(BmcRead).where(BmcRead.host_id == h.id, BmcRead.sel_seen.is_not(None))
                .order_by(BmcRead.read_at.desc(), BmcRead.id.desc()).limit(1)
            )
            jobs.append(_Job(h.id, h.name, target, refused, h.last_outcome,
                             list(last.sel_seen or []) if last else None, _inband(s, h)))
    return jobs


def _apply_findings(s: Session, fleet: Fleet, h: Host, findings: list[Finding]) -> list[str]:
    opened: list[str] = []
    for f in findings:
        if f.open:
            raise_alarm(s, fleet, h, f.kind, f.severity, f.message, data=dict(f.data))
            opened.append(f"{f.kind}: {f.message}")
        elif f.kind is not AlarmKind.BMC_SEL:  # a SEL fault never closes by itself
            close_alarms(s, fleet, h, f.kind, f.message)
    return opened


def _apply(fleet: Fleet, job: _Job, reading: BmcReading | None,
           failure: BmcFailure | None) -> BmcStatus:
    with fleet.db.session() as s:
        h = s.get(Host, job.host_id, with_for_update=True)
        if h is None:  # removed while we read
            return BmcStatus(job.name, BmcOutcome.ERROR.value, "host removed during the read")
        now = fleet.now()
        if reading is None:
            assert failure is not None
            outcome = failure.outcome
            s.add(BmcRead(host_id=h.id, read_at=now, outcome=outcome,
                          reason=failure.reason, reading=None, sel_new=[], sel_seen=None))
            return BmcStatus(job.name, outcome.value, failure.reason, ssh=_ssh(job),
                             diagnosis=diagnose(job.ssh, outcome, None))
        new = new_sel_entries(reading.sel or [], job.seen or [])
        seen = sorted(set(job.seen or []) | {e.key for e in reading.sel or []})
        findings = identity_findings(h.name, reading, job.known)
        findings += health_findings(h.name, reading, new)
        s.add(BmcRead(
            host_id=h.id, read_at=now, outcome=BmcOutcome.OK, reason=None,
            power_state=reading.power_state, health=reading.worst_health,
            reading=reading.model_dump(mode="json", exclude={"sel"}),
            sel_new=[e.model_dump(mode="json") for e in new],
            sel_seen=seen if reading.sel is not None else job.seen,
        ))
        opened = _apply_findings(s, fleet, h, findings)
        return BmcStatus(
            job.name, BmcOutcome.OK.value, None, reading.power_state, reading.worst_health,
            reading.identity.model_dump(), [g.model_dump() for g in reading.gpus]
            if reading.gpus is not None else None,
            [e.model_dump() for e in new], reading.sel_source, _ssh(job),
            diagnose(job.ssh, BmcOutcome.OK, reading), opened,
        )


def _ssh(job: _Job) -> str | None:
    return job.ssh.value if job.ssh is not None else None


def bmc_status(
    fleet: Fleet,
    selector: str | None = None,
    *,
    forks: int | None = None,
    timeout_s: float | None = None,
    on_result: Callable[[BmcStatus], None] | None = None,
    deadline_s: float | None = None,
) -> list[BmcStatus]:
    """Read every selected host's BMC (at most ``forks`` at once, ``timeout_s`` per request,
    ``deadline_s`` for one BMC's whole read), store each read with history and apply the
    cross-checks; each is reported (``on_result``) as it finishes, a BMC past its deadline
    as ``timeout``. Hosts without a BMC, or whose credentials cannot be opened, are
    reported (``not configured``) and not read."""
    forks = check_forks(forks if forks is not None else fleet.settings.bmc_forks, "--forks")
    timeout = check_timeout(timeout_s if timeout_s is not None else fleet.settings.bmc_timeout_s,
                            "--timeout")
    deadline = check_timeout(
        deadline_s if deadline_s is not None else fleet.settings.bmc_deadline_s, "--deadline")
    if deadline > MAX_DEADLINE_S:
        raise ConfigError(f"--deadline must be at most {MAX_DEADLINE_S} seconds, not {deadline:g}")
    jobs = _load(fleet, selector, timeout, deadline)
    out: list[BmcStatus] = []

    def done(st: BmcStatus) -> None:
        out.append(st)
        if on_result:
            on_result(st)

    runnable = [j for j in jobs if j.target is not None]
    for j in jobs:
        if j.target is None:
            done(BmcStatus(j.name, BmcOutcome.NOT_CONFIGURED.value, j.refused, ssh=_ssh(j)))
    if runnable:
        engine().run(read_all(
            fleet, runnable, forks, deadline,
            lambda job, reading, failure: _apply(fleet, job, reading, failure), done,
        ))
    out.sort(key=lambda st: st.host)
    return out


def bmc_history(fleet: Fleet, name: str, limit: int = 20) -> list[dict[str, Any]]:
    """The host's last ``limit`` BMC reads, newest first."""
    with fleet.db.session() as s:
        h = host_by_name(s, name)
        rows = s.scalars(select(BmcRead).where(BmcRead.host_id == h.id)
                         .order_by(BmcRead.read_at.desc(), BmcRead.id.desc()).limit(limit))
        return [
            {"read_at": r.read_at, "outcome": r.outcome, "reason": r.reason,
             "power_state": r.power_state, "health": r.health, "sel_new": r.sel_new}
            for r in rows
        ]


# --- power, reimage, sel-ack --------------------------------------------------------------------


@dataclass
class BmcAction:
    """What a one-host BMC action did: ``ok``, the power state reached, notes, or why not."""

    host: str
    action: str
    ok: bool
    power_state: str | None = None
    reason: str | None = None
    notes: list[str] = field(default_factory=list)
    state: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"host": self.host, "action": self.action, "ok": self.ok,
                "power_state": self.power_state, "reason": self.reason, "notes": self.notes,
                "state": self.state}


def _target_for(fleet: Fleet, name: str, *, force: bool, verb: str,
                forceable: bool = True, override_identity: str | None = None
                ) -> tuple[BmcTarget, int]:
    with fleet.db.session() as s:
        h = host_by_name(s, name)
        if h.state is HostState.ALLOCATED and not (force and forceable):
            how = "any state but allocated (release it first" + (
                ", or --force)" if forceable else ")")
            raise InvalidTransition(h.name, h.state, verb, [how])
        target = bmc_target(h, fleet)
        bmc_guard.guard(s, fleet, h, verb, override_identity)  # issue 24: never the wrong one
        return target, h.id


def _action_deadline(target: BmcTarget, settle_s: float) -> BmcTarget:
    """``target`` bounded for an action: it waits for the power to settle (twice for a
    cycle done as off, on) on top of its requests."""
    return replace(target, deadline_s=2 * (settle_s + 2 * target.timeout_s))


def _record(fleet: Fleet, host_id: int, message: str, data: dict[str, Any]) -> None:
    with fleet.db.session() as s:
        h = s.get(Host, host_id)
        if h is not None:
            record_event(s, fleet, EventKind.BMC, message, host=h, data=data)


def power(fleet: Fleet, name: str, action: PowerAction, *, force: bool = False,
          settle_s: float | None = None, override_identity: str | None = None) -> BmcAction:
    """Power ``name`` on/off/cycle/reset through its BMC, wait for the state to settle;
    refused (:class:`InvalidTransition`) for an allocated host unless ``force``, and while
    its ``bmc-identity`` alarm is open unless ``override_identity`` (the reason,
    :mod:`gpufleet.service.hosts.bmc_guard`). Recorded as a ``bmc`` event, failed or not."""
    target, host_id = _target_for(fleet, name, force=force, verb=f"power {action}",
                                  override_identity=override_identity)
    settle = settle_s if settle_s is not None else fleet.settings.bmc_settle_s
    target = _action_deadline(target, settle)
    try:
        state = call(target, lambda t: redfish_power(t, action, settle_s=settle))
    except BmcFailure as exc:
        log.warning("power %s of %s failed: BMC %s: %s", action, name, exc.outcome, exc.reason,
                    extra=ids(host=name))
        _record(fleet, host_id, f"power {action} failed: BMC {exc.outcome}: {exc.reason}",
                {"action": f"power-{action}", "ok": False, "outcome": exc.outcome.value,
                 "forced": force})
        return BmcAction(name, f"power {action}", False, reason=str(exc))
    _record(fleet, host_id, f"power {action}: {state}",
            {"action": f"power-{action}", "ok": True, "power_state": state, "forced": force})
    return BmcAction(name, f"power {action}", True, power_state=state)


def image_for(fleet: Fleet, name: str, image: str | None, baseline: str | None) -> str:
    """The OS image URL for a reimage: ``image``, else the named baseline's (or the host's
    baseline's) ``os_image_url``; ConfigError when none is known."""
    if image:
        if not image.startswith(("http://", "https://")):
            raise ConfigError(f"--image {image}: an http(s) URL the BMC can fetch")
        return image
    if baseline:
        b: Baseline | None = get_baseline(fleet, baseline)
    else:
        with fleet.db.session() as s:
            b = baseline_for_host(s, host_by_name(s, name))
    if b is None or not b.os_image_url:
        which = f"baseline '{b.name}'" if b else f"{name} (no baseline)"
        raise ConfigError(f"{which} names no os_image_url: give --image URL")
    return b.os_image_url


def reimage(fleet: Fleet, name: str, *, image: str | None = None, baseline: str | None = None,
            settle_s: float | None = None, ticket: str | None = None,
            override_identity: str | None = None, no_drain: bool = False,
            drain_timeout: timedelta | None = None, drained: dict[str, Any] | None = None,
            drain_api: DrainApi | None = None) -> BmcAction:
    """Insert the image as virtual media, one-time boot from it, power-cycle, record a
    ``reimage`` change (the host goes back to validation; its SSH host key will change:
    ``hosts rekey``). Refused for allocated hosts. ``ticket`` (a campaign's) is carried by
    the ``bmc`` event and the change. Issue 26: the host is drained first wherever work runs
    (:func:`~gpufleet.service.hosts.drain.drain_first`; blocked: :class:`DrainBlocked`,
    nothing done) unless ``no_drain``, or ``drained`` says the caller drained it (a
    campaign's wave); recorded on the ``bmc`` event (``drain``)."""
    url = image_for(fleet, name, image, baseline)
    target, host_id = _target_for(fleet, name, force=False, verb="reimage", forceable=False,
                                  override_identity=override_identity)
    if drained is None:
        drained = drain_first(fleet, name, "reimage", why=f"reimage: {url}", no_drain=no_drain,
                              slurm_timeout=drain_timeout, api=drain_api)
    settle = settle_s if settle_s is not None else fleet.settings.bmc_settle_s
    target = _action_deadline(target, settle)
    try:
        res: MediaResult = call(target, lambda t: boot_from_media(t, url, settle_s=settle))
    except BmcFailure as exc:
        log.warning("reimage of %s failed: BMC %s: %s", name, exc.outcome, exc.reason,
                    extra=ids(host=name))
        _record(fleet, host_id, f"reimage failed: BMC {exc.outcome}: {exc.reason}",
                {"action": "reimage", "ok": False, "image": url, "outcome": exc.outcome.value,
                 "ticket": ticket, "drain": drained})
        return BmcAction(name, "reimage", False, reason=str(exc))
    _record(fleet, host_id, f"reimage: {url} on {res.device}, one-time boot, power cycled "
            f"({res.power_state})", {"action": "reimage", "ok": True, "image": url,
                                     "device": res.device, "notes": res.notes,
                                     "ticket": ticket, "drain": drained})
    state = record_change(fleet, name, DeclaredChangeKind.REIMAGE, ticket,
                          f"by virtual media: {url}")
    return BmcAction(name, "reimage", True, power_state=res.power_state,
                     notes=[*res.notes, REIMAGE_HINT], state=str(state))


def sel_ack(fleet: Fleet, name: str, reason: str) -> int:
    """An operator's audited acknowledgement of the host's BMC event-log fault: closes its
    ``bmc-sel`` alarm (the only way one closes); how many were open."""
    if not reason.strip():
        raise ConfigError("bmc sel-ack: --reason is required")
    with fleet.db.session() as s:
        h = host_by_name(s, name, for_update=True)
        n = close_alarms(s, fleet, h, AlarmKind.BMC_SEL, reason)
        record_event(s, fleet, EventKind.BMC, f"SEL fault acknowledged: {reason}", host=h,
                     data={"action": "sel-ack", "closed": n, "reason": reason})
        return n
