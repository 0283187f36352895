"""``gpufleet remediate HOST --action ...`` and ``gpufleet pool health-policy``."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import typer

from gpufleet.cli.common import boundary, console, lit, open_fleet, print_json
from gpufleet.domain.remediation import Action
from gpufleet.errors import UsageError
from gpufleet.i18n import N_, _, reason_text, state_name

#: A remediation step's outcomes (``ok``, ``failed``, ``refused``), marked for display.
STEP_OUTCOMES = (N_("ok"), N_("failed"), N_("refused"))


@boundary
def remediate_cmd(
    host: str = typer.Argument(..., help="Host name."),
    action: Action = typer.Option(
        ..., "--action",
        help="restart-service, reset-gpu, reboot, power-cycle (BMC) or service-request.",
    ),
    service: str | None = typer.Option(
        None, "--service", help="restart-service: kubelet, containerd, nvidia-fabricmanager, "
        "nvidia-persistenced or device-plugin.",
    ),
    override_identity: bool = typer.Option(
        False, "--override-identity",
        help="Power-cycle through the BMC even while its bmc-identity alarm is open "
        "(needs --reason; recorded).",
    ),
    gpu: int | None = typer.Option(None, "--gpu", help="GPU index (default: the unusable ones)."),
    ticket: str | None = typer.Option(None, "--ticket", help="Service request id (RMA-123)."),
    eta: str | None = typer.Option(
        None, "--eta", help="Expected back (ISO time; local unless zoned)."
    ),
    reason: str | None = typer.Option(None, "--reason", help="A note for the audit log."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds per in-band step."),
    reboot_wait: float = typer.Option(
        900.0, "--reboot-wait", help="Seconds to wait for a rebooted host to answer again."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    no_drain: bool = typer.Option(
        False, "--no-drain",
        help="Act without draining first: Slurm jobs, Kubernetes pods (recorded).",
    ),
    drain_timeout: str = typer.Option(
        "30m", "--drain-timeout", help="Slurm: how long to wait for running jobs (30m, 2h)."
    ),
) -> None:
    """Run one rung of the remediation ladder on a host, record it, send the host to
    validation (service-request: to maintenance with the ticket and ETA). A reboot that
    fails in-band, or a host that does not answer, is power-cycled through its BMC when it
    has one. Where work runs in Slurm (GPUFLEET_SYNC_TARGETS has slurm) the node is
    drained and its jobs waited for first, and where a Kubernetes cluster is configured its
    pods are evicted: exit 6 with what blocked when the jobs outlast --drain-timeout or a
    disruption budget holds a pod. Exit 1 when the step was refused or failed."""
    if override_identity and (reason is None or not reason.strip()):
        raise UsageError("--override-identity needs --reason TEXT (why the BMC is right)")
    from gpufleet.cli.common import when
    from gpufleet.domain.leases import parse_duration
    from gpufleet.service.health import remediation

    fleet = open_fleet()
    rep = remediation.remediate(
        fleet,
        host,
        action,
        gpu=gpu,
        ticket=ticket,
        eta=when(eta, "--eta"),  # as maintenance on --eta / hosts eta read it
        reason=reason,
        timeout_s=timeout,
        reboot_wait_s=reboot_wait,
        service=service,
        override_identity=reason if override_identity else None,
        no_drain=no_drain,
        drain_timeout=parse_duration(drain_timeout, "--drain-timeout"),
    )
    print_report(asdict(rep), as_json)


def print_report(rep: dict[str, Any], as_json: bool) -> None:
    """Print a remediation's report (``RemediationReport`` as a dict: the same in remote mode,
    where it comes from the run); exit 1 when it did not end ok."""
    if as_json:
        print_json(rep)
    else:
        host = lit(rep["host"])
        for st in rep["steps"]:
            outcome = _(st["outcome"])
            detail = reason_text(st["detail"])
            console.print(f"{host}: {lit(st['action'])} {lit(outcome)}: {lit(detail)}")
        console.print(_("{host} is now {state}").format(host=host,
                                                          state=lit(state_name(rep["state"]))))
    if not rep["ok"]:
        raise typer.Exit(1)


@boundary
def pool_health_policy_cmd(
    pool: str = typer.Argument(..., help="Pool name."),
    gpu_fault: str | None = typer.Option(None, "--gpu-fault", help="host (default) or partial."),
    holders: str | None = typer.Option(None, "--holders", help="refuse (default) or stop."),
    fallback_reboot: str | None = typer.Option(
        None, "--fallback-reboot", help="on (default) or off: reboot when a GPU reset fails."
    ),
    auto_remediate: list[str] | None = typer.Option(
        None, "--auto-remediate", help="A rule whose alarm runs reset-gpu (repeatable)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Show or set a pool's health policy."""
    if fallback_reboot not in (None, "on", "off"):
        raise UsageError(f"--fallback-reboot: 'on' or 'off', not {fallback_reboot!r}")
    from gpufleet.service.hosts import gpu_health

    policy = gpu_health.set_pool_health_policy(
        open_fleet(),
        pool,
        gpu_fault=gpu_fault,
        holders=holders,
        fallback_reboot=None if fallback_reboot is None else fallback_reboot == "on",
        auto_remediate=auto_remediate or None,
    )
    if as_json:
        print_json(policy.as_json())
    else:
        for k, v in policy.as_json().items():
            console.print(f"{k:16} {lit(v)}")
