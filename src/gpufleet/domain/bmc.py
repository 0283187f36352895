"""The out-of-band controller (BMC) as gpufleet sees it over Redfish: what a read found, and
the pure decisions made from it (new SEL entries, identity and health cross-checks, how a
host that stopped answering SSH is described).

Fail closed: ``None`` means "the BMC did not say" (a Redfish service without the resource, or
one that could not be read); ``[]`` means "it said: there are none". A cross-check that has
nothing to compare never passes as a match, it is simply not made.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.domain.events import AlarmKind, AlarmSeverity, CollectionOutcome
from gpufleet.domain.identity import same_system_uuid, usable_system_id

SHORT = 128


class BmcOutcome(StrEnum):
    """How one read of (or one action on) a BMC ended."""

    OK = "ok"
    NOT_CONFIGURED = "not configured"  # no gpufleet_bmc_address, or no usable credentials
    AUTH_FAILED = "auth failed"  # the BMC refused the credentials (401/403)
    UNREACHABLE = "unreachable"  # connection refused, no route, name not found
    TIMEOUT = "timeout"
    TLS = "tls"  # the certificate could not be verified
    BAD_RESPONSE = "bad response"  # not Redfish (garbage JSON, required field missing)
    ERROR = "error"  # the BMC answered an error to a well-formed request


class PowerAction(StrEnum):
    """``gpufleet bmc power ACTION``."""

    ON = "on"
    OFF = "off"
    CYCLE = "cycle"
    RESET = "reset"

    @property
    def settles_to(self) -> str:
        """The Redfish ``PowerState`` the action ends in."""
        return "Off" if self is PowerAction.OFF else "On"


class BmcIdentity(BaseModel):
    """The ComputerSystem's identity as the BMC reports it."""

    model_config = ConfigDict(frozen=True)

    manufacturer: str | None = Field(default=None, max_length=SHORT)
    model: str | None = Field(default=None, max_length=SHORT)
    serial: str | None = Field(default=None, max_length=SHORT)
    uuid: str | None = Field(default=None, max_length=SHORT)
    bios_version: str | None = Field(default=None, max_length=SHORT)


class BmcGpu(BaseModel):
    """A Processor of ProcessorType GPU."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(max_length=SHORT)
    manufacturer: str | None = Field(default=None, max_length=SHORT)
    model: str | None = Field(default=None, max_length=SHORT)
    serial: str | None = Field(default=None, max_length=SHORT)
    health: str | None = Field(default=None, max_length=32)


class SelEntry(BaseModel):
    """One entry of the system event log (a Redfish LogEntry); ``key`` is unique per BMC:
    the log it came from and the entry's Id."""

    model_config = ConfigDict(frozen=True)

    key: str = Field(max_length=512)
    created: str | None = Field(default=None, max_length=64)
    severity: str | None = Field(default=None, max_length=32)  # OK, Warning, Critical
    message: str = Field(default="", max_length=4096)
    entry_type: str | None = Field(default=None, max_length=32)

    @property
    def critical(self) -> bool:
        return (self.severity or "").lower() == "critical"


class BmcReading(BaseModel):
    """What one successful read of a BMC found. ``gpus``/``sel`` are None when the BMC does
    not offer them (no Processors, no LogServices); ``sel_source`` names the log read
    (``System:<id>/<log>`` or ``Manager:<id>/<log>``)."""

    model_config = ConfigDict(frozen=True)

    system_id: str = Field(max_length=SHORT)
    identity: BmcIdentity
    power_state: str | None = Field(default=None, max_length=32)  # On, Off, PoweringOn...
    health: str | None = Field(default=None, max_length=32)  # the system's own Status.Health
    health_rollup: str | None = Field(default=None, max_length=32)
    gpus: list[BmcGpu] | None = None
    sel: list[SelEntry] | None = None
    sel_source: str | None = Field(default=None, max_length=SHORT)

    @property
    def worst_health(self) -> str | None:
        """Critical over Warning over OK, from the health and its rollup."""
        values = [v for v in (self.health, self.health_rollup) if v]
        for level in ("Critical", "Warning", "OK"):
            if any(v.lower() == level.lower() for v in values):
                return level
        return values[0] if values else None


def new_sel_entries(entries: Iterable[SelEntry], seen: Iterable[str]) -> list[SelEntry]:
    """The entries not read before (``seen``: the keys of every entry an earlier read saw)."""
    known = set(seen)
    return [e for e in entries if e.key not in known]


@dataclass(frozen=True)
class Finding:
    """A cross-check result: an alarm to open (``open``) or the reason one may close."""

    kind: AlarmKind
    severity: AlarmSeverity
    message: str
    open: bool = True
    data: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class InBand:
    """What gpufleet knows about the machine without the BMC: the serial and UUID the
    inventory declares (``gpufleet_bmc_serial`` / ``gpufleet_bmc_uuid``), the identity pinned
    at the first good BMC read, the GPU serials nvidia-smi reported in-band and the DMI
    system serial / UUID the OS reported (``/sys/class/dmi/id``)."""

    serial: str | None = None
    uuid: str | None = None
    pinned: BmcIdentity | None = None
    gpu_serials: frozenset[str] | None = None
    #: The system serial / UUID the host's OS reads from DMI (its latest facts), when known.
    dmi_serial: str | None = None
    dmi_uuid: str | None = None


def _norm(value: str | None) -> str:
    return (value or "").strip().lower()


def identity_findings(host: str, reading: BmcReading, known: InBand) -> list[Finding]:
    """Does the machine behind this BMC look like ``host``? Each comparison is made only when
    both sides are known; no mismatch closes the identity alarm (``open=False``)."""
    got = reading.identity
    problems: list[str] = []
    if known.serial and got.serial and _norm(known.serial) != _norm(got.serial):
        problems.append(f"inventory says serial {known.serial}, the BMC says {got.serial}")
    if known.uuid and got.uuid and _norm(known.uuid) != _norm(got.uuid):
        problems.append(f"inventory says UUID {known.uuid}, the BMC says {got.uuid}")
    dmi_serial, bmc_serial = usable_system_id(known.dmi_serial), usable_system_id(got.serial)
    if dmi_serial and bmc_serial and dmi_serial != bmc_serial:
        problems.append(
            f"the host reports DMI serial {known.dmi_serial} in-band, the BMC says {got.serial}"
        )
    if same_system_uuid(known.dmi_uuid, got.uuid) is False:
        problems.append(
            f"the host reports DMI UUID {known.dmi_uuid} in-band, the BMC says {got.uuid}"
        )
    pin = known.pinned
    if pin is not None:
        for what, before, now in (("serial", pin.serial, got.serial), ("UUID", pin.uuid, got.uuid)):
            if before and now and _norm(before) != _norm(now):
                problems.append(f"the BMC's system {what} was {before}, it is now {now}")
    if known.gpu_serials and reading.gpus:
        bmc = {_norm(g.serial) for g in reading.gpus if g.serial}
        inband = {_norm(s) for s in known.gpu_serials if s}
        if bmc and inband and not bmc & inband:
            problems.append(
                "none of the BMC's GPU serials ("
                + ", ".join(sorted(g.serial for g in reading.gpus if g.serial))
                + ") is among the GPUs the host reports in-band"
            )
    if problems:
        return [
            Finding(
                AlarmKind.BMC_IDENTITY,
                AlarmSeverity.CRITICAL,
                f"inventory says {host}, the BMC at that address is serial {got.serial or '?'} "
                f"(UUID {got.uuid or '?'}): " + "; ".join(problems)
                + ": wrong cable or wrong inventory",
                data={"bmc": got.model_dump(), "problems": problems},
            )
        ]
    return [
        Finding(AlarmKind.BMC_IDENTITY, AlarmSeverity.CRITICAL, "BMC identity matches", False)
    ]


def health_findings(host: str, reading: BmcReading, new_sel: Sequence[SelEntry]) -> list[Finding]:
    """BMC health Critical opens a ``bmc-health`` alarm (closed by a later read that says
    otherwise); new Critical SEL entries open a ``bmc-sel`` alarm, which only an operator
    closes (``bmc sel-ack``): a fault never clears by dropping out of the log."""
    out: list[Finding] = []
    worst = reading.worst_health
    if worst == "Critical":
        out.append(
            Finding(
                AlarmKind.BMC_HEALTH,
                AlarmSeverity.CRITICAL,
                f"{host}: BMC reports health Critical (health {reading.health}, rollup "
                f"{reading.health_rollup})",
                data={"health": reading.health, "rollup": reading.health_rollup},
            )
        )
    elif worst is not None:
        out.append(
            Finding(AlarmKind.BMC_HEALTH, AlarmSeverity.CRITICAL, f"BMC health {worst}", False)
        )
    critical = [e for e in new_sel if e.critical]
    if critical:
        first = critical[0]
        more = f" (+{len(critical) - 1} more)" if len(critical) > 1 else ""
        out.append(
            Finding(
                AlarmKind.BMC_SEL,
                AlarmSeverity.CRITICAL,
                f"{host}: new critical BMC event log entry: {first.message}"
                f" [{first.created or 'no time'}]{more}",
                data={"entries": [e.model_dump() for e in critical], "source": reading.sel_source},
            )
        )
    return out


_SSH_DOWN = {
    CollectionOutcome.UNREACHABLE,
    CollectionOutcome.TIMEOUT,
}


def diagnose(
    ssh_outcome: CollectionOutcome | None,
    bmc_outcome: BmcOutcome,
    reading: BmcReading | None,
) -> str | None:
    """The first step of the NotReady runbook: a host whose last collection could not reach
    it over SSH, described by what its BMC says. None when SSH was fine (or never tried)."""
    if ssh_outcome not in _SSH_DOWN:
        return None
    if bmc_outcome is not BmcOutcome.OK or reading is None:
        return (
            f"SSH {ssh_outcome} and BMC {bmc_outcome}: machine, power or rack network "
            "down (check PDU, cabling, management network)"
        )
    power = reading.power_state or "unknown"
    if power.lower() == "off":
        return "SSH down, BMC says power Off: powered off (power it on: gpufleet bmc power on)"
    if power.lower() == "on" and reading.worst_health in ("OK", None):
        return (
            "SSH down but BMC says On, health OK: OS hung or host network down "
            "(look at the console / SEL before rebooting)"
        )
    return (
        f"SSH down, BMC says power {power}, health {reading.worst_health}: hardware fault "
        "likely (read the SEL)"
    )


#: What to do about a host SSH cannot reach, by what its BMC says (issue 24, item 2): the
#: recommended step and the command that takes it. ``escalate`` when no BMC answers (someone
#: must look at the machine, its power and its network on site).
UNREACHABLE_STEPS: dict[str, str] = {
    "power-cycle": "gpufleet remediate {host} --action power-cycle",
    "power-on": "gpufleet bmc power on {host}",
    "service-request": "read the SEL (gpufleet bmc status {host}), then a service request",
    "escalate": "check the machine, its power and its network on site",
}


def unreachable_step(bmc_outcome: BmcOutcome | None, reading: BmcReading | None) -> str:
    """The recommended step for an unreachable host: power-cycle through the BMC when it says
    On with healthy hardware (the OS hung or the host network is down), power-on when it says
    Off, a service request when it reports a hardware fault, escalate without a BMC answer."""
    if bmc_outcome is not BmcOutcome.OK or reading is None:
        return "escalate"
    power = (reading.power_state or "").lower()
    if power == "off":
        return "power-on"
    if power == "on" and reading.worst_health in ("OK", None):
        return "power-cycle"
    return "service-request"
