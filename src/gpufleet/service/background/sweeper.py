"""The periodic sweep (worker schedule, ``gpufleet sweep``, the first chunk of a queued
validation run): reservations start and leases expire
(:func:`gpufleet.service.allocation.lease_sweep.sweep_leases`), then the hosts' deadlines fire
(:func:`gpufleet.service.hosts.deadlines.sweep_deadlines`)."""

from __future__ import annotations

from gpufleet.service.allocation.lease_sweep import sweep_leases
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.deadlines import sweep_deadlines


def sweep(fleet: Fleet) -> list[str]:
    """Fire every deadline and expiry; returns the host names touched (leases first)."""
    return sweep_leases(fleet) + sweep_deadlines(fleet)
