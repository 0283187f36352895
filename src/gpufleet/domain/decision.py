"""What validation says should happen to a host (:class:`Decision`).

Its own module so that the store's tables (a column of this type) load without the
profiles and checks behind :mod:`gpufleet.domain.profiles`, which re-exports it."""

from __future__ import annotations

from enum import StrEnum

from gpufleet.domain.states import Event


class Decision(StrEnum):
    """What validation says should happen to the host."""

    AVAILABLE = "available"
    QUARANTINE = "quarantine"
    STAY_VALIDATING = "stay_validating"

    @property
    def event(self) -> Event:
        """The lifecycle event the validate service fires for this decision."""
        return _DECISION_EVENTS[self]


_DECISION_EVENTS = {
    Decision.AVAILABLE: Event.VALIDATION_PASSED,
    Decision.QUARANTINE: Event.HARDWARE_FAULT,
    Decision.STAY_VALIDATING: Event.VALIDATION_FAILED,
}
