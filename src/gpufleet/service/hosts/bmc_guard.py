"""The BMC never acts on the wrong machine (issue 24, item 7).

While a host has an open ``bmc-identity`` alarm (``gpufleet bmc status`` found the machine
behind its BMC is not the one the inventory or the host itself says: wrong cable or wrong
inventory), every action through that BMC (power, boot override, reimage, the remediation
ladder's power cycle) is refused with :class:`~gpufleet.errors.IdentityMismatch` (exit 5,
the alarm named). An operator who has checked may pass ``--override-identity --reason
TEXT``: the action goes ahead and the override is recorded as a ``bmc`` event with actor,
reason and the alarm.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.events import AlarmKind, EventKind
from gpufleet.errors import ConfigError, IdentityMismatch
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.store.tables import Alarm, Host


def identity_alarm(s: Session, host: Host) -> Alarm | None:
    """The host's open ``bmc-identity`` alarm, if any."""
    return s.scalar(
        select(Alarm)
        .where(
            Alarm.host_id == host.id,
            Alarm.kind == AlarmKind.BMC_IDENTITY,
            Alarm.closed_at.is_(None),
        )
        .order_by(Alarm.id)
        .limit(1)
    )


def check_override(override_reason: str | None) -> str | None:
    """A given override needs a reason that is not blank (ConfigError otherwise)."""
    if override_reason is not None and not override_reason.strip():
        raise ConfigError("--override-identity needs --reason TEXT (why the BMC is right)")
    return override_reason.strip() if override_reason is not None else None


def guard(
    s: Session, fleet: Fleet, host: Host, action: str, override_reason: str | None = None
) -> dict[str, Any] | None:
    """Refuse ``action`` through ``host``'s BMC while its identity alarm is open, unless
    ``override_reason`` (recorded here, in the caller's transaction). Returns what the
    override recorded (None: no alarm open, nothing to override)."""
    reason = check_override(override_reason)
    alarm = identity_alarm(s, host)
    if alarm is None:
        return None
    if reason is None:
        raise IdentityMismatch(host.name, action, f"#{alarm.id}: {alarm.message}")
    data: dict[str, Any] = {
        "action": "override-identity", "for": action, "reason": reason, "alarm": alarm.id,
    }
    record_event(
        s, fleet, EventKind.BMC,
        f"{action} through the BMC despite open bmc-identity alarm #{alarm.id}: {reason}",
        host=host, data=data,
    )
    return data
