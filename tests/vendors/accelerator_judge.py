"""Run one registered validation check on a vendor inventory (issue 25: the checks the
product runs, ``gpufleet.domain.checks.accelerator``, not a second set beside them)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from gpufleet.domain.accelerators import Accelerator
from gpufleet.domain.checks import CHECKS, CheckContext
from gpufleet.domain.facts import FACTS_VERSION, HostFacts, PciDevice
from gpufleet.domain.spec import ExpectedSpec

NOW = datetime(2026, 12, 5, tzinfo=UTC)


def judge(
    check: str,
    accelerators: Sequence[Accelerator],
    spec: ExpectedSpec | None = None,
    pci: list[PciDevice] | None = None,
    **params: object,
) -> tuple[str, str]:
    """(status, message) of the check ``check`` on a host whose vendor tools reported
    ``accelerators`` (and whose lspci listed ``pci``, None: not collected)."""
    facts = HostFacts(
        facts_version=FACTS_VERSION,
        collected_at=NOW,
        accelerators=tuple(accelerators),
        pci_devices=pci,
    )
    r = CHECKS[check](facts, CheckContext(now=NOW, spec=spec or ExpectedSpec()), params)
    return r.status.value, r.message
