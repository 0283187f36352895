"""The rungs of the remediation ladder that reach past the GPU (issue 24, item 8): restart a
named service in-band (kubelet, containerd, nvidia-fabricmanager, nvidia-persistenced, the
device plugin's container) and power-cycle the machine through its BMC when the in-band
reboot fails or the host does not answer at all.

Each returns a :class:`Step` that ``remediate`` records like the others. The BMC rung goes
through :func:`gpufleet.service.hosts.bmc.power` (so the identity guard,
:mod:`gpufleet.service.hosts.bmc_guard`, applies: an open ``bmc-identity`` alarm refuses it
unless overridden) and then waits for SSH to answer again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpufleet.collect.transport import Outcome, RawResult, Transport, run_many
from gpufleet.domain.bmc import PowerAction
from gpufleet.domain.remediation import SERVICES, Action, alive_script, read_restart, restart_script
from gpufleet.errors import ConfigError, IdentityMismatch, UsageError
from gpufleet.service.core.engine import engine
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.pipeline import Claimed


@dataclass
class Step:
    """One rung climbed: what ran and how it ended."""

    action: str
    outcome: str  # ok, failed, refused
    detail: str
    gpus: list[int] = field(default_factory=list)
    bug_report: str | None = None


#: Outcomes of an in-band step that mean the host could not be reached at all.
NOT_REACHED = frozenset(
    {Outcome.UNREACHABLE, Outcome.AUTH_FAILED, Outcome.HOST_KEY_CHANGED}
)


def check_service(service: str | None) -> str:
    """The service ``restart-service`` needs (UsageError naming the choices otherwise)."""
    if not service:
        raise UsageError("--action restart-service needs --service (" + ", ".join(SERVICES) + ")")
    if service not in SERVICES:
        raise UsageError(f"--service {service}: not one of " + ", ".join(SERVICES))
    return service


def _run(c: Claimed, tr: Transport, script: str, timeout_s: float) -> RawResult:
    return engine().run(run_many(tr, [c.target], script, forks=1, timeout_s=timeout_s))[0]


def restart_service(c: Claimed, tr: Transport, service: str, timeout_s: float) -> Step:
    """Restart ``service`` on the host and verify it runs again."""
    r = _run(c, tr, restart_script(service), timeout_s)
    if r.outcome is not Outcome.OK:
        return Step(Action.RESTART_SERVICE.value, "failed",
                    f"restart {service}: {r.outcome.value}: {r.reason}")
    ok, detail = read_restart(service, r.output or "")
    return Step(Action.RESTART_SERVICE.value, "ok" if ok else "failed", detail)


def wait_back(c: Claimed, tr: Transport, wait_s: float,
              sleep: Callable[[float], None] = time.sleep) -> bool:
    """Poll until the host answers again (True) or ``wait_s`` passed."""
    deadline = time.monotonic() + wait_s
    while True:
        r = _run(c, tr, alive_script(), min(30.0, max(wait_s, 1.0)))
        if r.outcome is Outcome.OK and "@@alive" in (r.output or ""):
            return True
        if time.monotonic() >= deadline:
            return False
        sleep(min(5.0, max(0.0, deadline - time.monotonic())))


def has_bmc(vars_: dict[str, str]) -> bool:
    """The host has a BMC address configured."""
    from gpufleet.service.hosts.bmc import ADDRESS

    return bool(vars_.get(ADDRESS))


def power_cycle(
    fleet: Fleet, c: Claimed, tr: Transport, wait_s: float, why: str,
    override_identity: str | None = None,
) -> Step:
    """Power-cycle the machine through its BMC (``why``: what made the ladder climb here),
    then wait for SSH to answer again."""
    from gpufleet.service.hosts import bmc

    name = c.target.name
    step = Action.POWER_CYCLE.value
    try:
        res = bmc.power(fleet, name, PowerAction.CYCLE, override_identity=override_identity)
    except IdentityMismatch as exc:
        return Step(step, "refused", f"{why}; {exc}")
    except ConfigError as exc:
        return Step(step, "failed", f"{why}; no usable BMC: {exc}")
    if not res.ok:
        return Step(step, "failed", f"{why}; BMC power cycle failed: {res.reason}")
    done = f"{why}; power cycled through the BMC (power {res.power_state})"
    if wait_back(c, tr, wait_s):
        return Step(step, "ok", f"{done}; the host answers again")
    return Step(step, "failed", f"{done}; the host did not answer within {wait_s:.0f} s")
