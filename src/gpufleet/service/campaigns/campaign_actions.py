"""The actions a campaign runs on a wave's hosts: an Ansible playbook through ansible-runner,
a shell command over the SSH transport (or the nvidia-smi commands of a MIG layout), or a BMC
reimage. Each returns host -> (ok, note) and
never raises for one host's failure (:mod:`gpufleet.service.campaigns.campaign` records it)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from sqlalchemy import select

from gpufleet.collect.hostkeys import known_hosts_line, openssh_pin_options
from gpufleet.collect.transport import Outcome, RawResult
from gpufleet.domain.campaign import ActionKind
from gpufleet.domain.mig import apply_script
from gpufleet.domain.spec import Baseline
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError, GpufleetError
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.pipeline import Claimed, Pipeline, claim_hosts, claim_lease, holds_claim
from gpufleet.store.tables import BaselineRow, CampaignRow, Host

#: The playbooks gpufleet ships (``upgrade-driver.yml``, ``system-init.yml``): a ``--playbook``
#: name not found as a file is looked up here.
PLAYBOOKS_DIR = Path(str(resources.files("gpufleet") / "playbooks"))
#: The Ansible roles gpufleet ships (system_init, gpu_driver): on ANSIBLE_ROLES_PATH of every
#: campaign playbook run.
ROLES_DIR = PLAYBOOKS_DIR / "roles"
_RC_MARK = "gpufleet-campaign-rc="


def host_list(names: Any) -> str:
    """Host names as one selector (a comma is a union)."""
    return ",".join(sorted(set(names)))


def ansible_playbook(python: str | None = None, path: str | None = None) -> Path:
    """The ``ansible-playbook`` a playbook campaign runs: the one installed next to this
    Python (ansible-core, a dependency of gpufleet), else the first on ``PATH`` (``path``).
    None: a :class:`ConfigError` (exit 2) naming what to install; ``campaign create`` and
    ``run`` check it before anything is stored or touched (fail closed)."""
    here = Path(python or sys.executable).with_name("ansible-playbook")
    if here.is_file() and os.access(here, os.X_OK):
        return here
    found = shutil.which("ansible-playbook", path=path)
    if found:
        return Path(found)
    raise ConfigError(
        setting="ansible-playbook",
        cause=f"not found next to {python or sys.executable} nor on PATH: a --playbook "
        "campaign needs ansible-core (pip install 'ansible-core>=2.17', a dependency of "
        "gpufleet); nothing was run",
    )


def _target(fleet: Fleet, name: str) -> dict[str, Any]:
    with fleet.db.session() as s:
        row = s.scalar(select(BaselineRow).where(BaselineRow.name == name))
        if row is None:
            return {}
        b = Baseline.model_validate(row.spec | {"name": row.name, "status": row.status})
        return b.model_dump(mode="json")


def mig_action(fleet: Fleet, baseline: str) -> str:
    """Issue 26 item 7: the script a ``--mig`` campaign runs on each host, the nvidia-smi
    commands giving the GPUs the MIG layout ``baseline`` pins
    (:func:`gpufleet.domain.mig.apply_script`); stored as the campaign's action, so ``campaign
    show`` prints what will run. A :class:`ConfigError` when the baseline pins no layout."""
    pin = _target(fleet, baseline).get("mig") or {}
    if not pin:
        raise ConfigError(
            setting="--mig",
            cause=f"baseline {baseline} pins no MIG layout (baseline create --mig-config)",
        )
    return apply_script(pin)


def run_action(
    fleet: Fleet, camp: CampaignRow, names: list[str], action: str, *, rollback: bool
) -> dict[str, tuple[bool, str]]:
    """Run the campaign's action (or its rollback playbook) on ``names``; host -> (ok, note).
    Never raises for a host's failure: it is that host's result."""
    kind = ActionKind.PLAYBOOK if rollback else camp.action_kind
    try:
        if kind is ActionKind.PLAYBOOK:
            return run_playbook(fleet, camp, names, Path(action))
        if kind in (ActionKind.COMMAND, ActionKind.MIG):  # MIG: the script mig_action wrote
            return _run_command(fleet, camp, names, action)
        return _reimage(fleet, camp, names)
    except GpufleetError as exc:
        return {n: (False, str(exc)) for n in names}


def _known_hosts(fleet: Fleet, names: list[str], path: Path) -> None:
    """The pinned host keys as an OpenSSH known_hosts file: Ansible checks the same keys
    gpufleet pinned (StrictHostKeyChecking=yes), never trusting a new one on first use."""
    lines: list[str] = []
    with fleet.db.session() as s:
        for h in s.scalars(select(Host).where(Host.name.in_(names))):
            if (line := known_hosts_line(h.address, h.port, h.host_key)) is not None:
                lines.append(line)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def run_playbook(
    fleet: Fleet, camp: CampaignRow, names: list[str], playbook: Path
) -> dict[str, tuple[bool, str]]:
    """``ansible-runner`` with the gpufleet inventory of the wave's hosts (what ``gpufleet
    inventory --list --select HOSTS`` prints, computed here and served by a small script, so
    Ansible does not start gpufleet again), ``--limit`` of ``names``, the shipped roles on
    the roles path, and the campaign's target as extra variables (``gpufleet_campaign``,
    ``gpufleet_ticket``, ``gpufleet_target``)."""
    import ansible_runner  # type: ignore[import-untyped]

    from gpufleet.service.exports.ansible import inventory_list

    with fleet.db.session() as s:
        other = {h.name: t for h in s.scalars(select(Host).where(Host.name.in_(names)))
                 if (t := h.vars.get("gpufleet_transport") or "ssh") != "ssh"}
    refused = {n: (False, f"transport {t!r}: Ansible reaches hosts over SSH only, not this one "
                   "(a --command campaign runs through the host's own transport)")
               for n, t in other.items()}
    names = [n for n in names if n not in other]
    if not names:
        return refused
    target = _target(fleet, camp.target_baseline)
    with tempfile.TemporaryDirectory(prefix="gpufleet-campaign-") as tmp:
        d = Path(tmp)
        (d / "inventory").mkdir()
        listing = d / "inventory.json"
        listing.write_text(json.dumps(inventory_list(fleet, host_list(names))), encoding="utf-8")
        inv = d / "inventory" / "gpufleet"
        inv.write_text(
            "#!/bin/sh\n# gpufleet inventory of one campaign wave (gpufleet inventory --list)\n"
            f'[ "$1" = --list ] && exec cat {shlex.quote(str(listing))}\necho "{{}}"\n',
            encoding="utf-8",
        )
        inv.chmod(0o700)
        known = d / "known_hosts"
        _known_hosts(fleet, names, known)
        binary = ansible_playbook()
        forks = int(camp.options.get("forks", 10))
        env = {
            "ANSIBLE_ROLES_PATH": str(ROLES_DIR),
            "ANSIBLE_SSH_ARGS": (
                openssh_pin_options(str(known)) + " -o ControlMaster=auto -o ControlPersist=30s"
            ),
            "ANSIBLE_PIPELINING": "True",
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
            "PATH": f"{binary.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        }
        r = ansible_runner.run(
            private_data_dir=str(d),
            host_cwd=str(d),
            playbook=str(playbook),
            inventory=str(inv),
            limit=",".join(names),
            forks=forks,
            extravars={
                "gpufleet_campaign": camp.name,
                "gpufleet_ticket": camp.ticket,
                "gpufleet_target_baseline": camp.target_baseline,
                "gpufleet_target": target,
            },
            envvars=env,
            quiet=True,
            timeout=int(float(camp.options.get("timeout_s", 1800))),
        )
        stats: dict[str, dict[str, int]] = r.stats or {}
        out: dict[str, tuple[bool, str]] = {}
        failures = _failures(r)
        for name in names:
            if name in stats.get("dark", {}):
                out[name] = (False, f"unreachable: {failures.get(name, 'ssh')}")
            elif name in stats.get("failures", {}):
                out[name] = (False, failures.get(name, "a task failed"))
            elif name in stats.get("processed", {}):
                changed = stats.get("changed", {}).get(name, 0)
                out[name] = (True, f"playbook {playbook.name}: {changed} changed")
            else:
                out[name] = (False, f"not processed by the playbook ({r.status}, rc {r.rc}): "
                             f"{_tail(r)}")
        return refused | out


def _tail(r: Any) -> str:
    """The last lines ansible-playbook printed (why a run failed before any host ran)."""
    try:
        text = r.stdout.read()
    except Exception:
        return "no output"
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return " | ".join(lines[-4:])[-600:] or "no output"


def _failures(r: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    with contextlib.suppress(Exception):
        for ev in r.events:
            kind = ev.get("event")
            if kind in ("runner_on_failed", "runner_on_unreachable"):
                data = ev.get("event_data", {})
                res = data.get("res", {})
                msg = res.get("msg") or res.get("stderr") or kind
                out[data.get("host", "?")] = f"task {data.get('task', '?')}: {str(msg)[:300]}"
    return out


def _run_command(
    fleet: Fleet, camp: CampaignRow, names: list[str], command: str
) -> dict[str, tuple[bool, str]]:
    """``command`` over the SSH transport (claimed hosts, ``forks`` at once); ok when it
    exits 0."""
    forks = int(camp.options.get("forks", 10))
    timeout_s = float(camp.options.get("timeout_s", 1800))
    connect_s = fleet.settings.connect_timeout_s
    got = claim_hosts(
        fleet, host_list(names), None, lambda n: claim_lease(n, forks, timeout_s, connect_s),
        skip_states=(HostState.RETIRED, HostState.ALLOCATED),
    )
    out = {n: (False, "held by another worker (collecting or testing it)") for n in got.busy}
    out |= {n: (False, why) for n, why in got.refused}
    script = f"{command}\necho \"{_RC_MARK}$?\"\n"

    def apply(c: Claimed, raw: RawResult) -> tuple[str, bool, str]:
        with fleet.db.session() as s:
            host = s.get(Host, c.host_id, with_for_update=True)
            if host is not None and holds_claim(host, c.token):
                host.claim_token = None
                host.claimed_until = None
        if raw.outcome is not Outcome.OK or raw.output is None:
            return c.target.name, False, f"{raw.outcome.value}: {raw.reason}"
        lines = raw.output.rstrip("\n").splitlines()
        rc = lines[-1][len(_RC_MARK):] if lines and lines[-1].startswith(_RC_MARK) else "?"
        tail = " | ".join(lines[-4:-1])[-300:]
        if rc == "0":
            return c.target.name, True, f"command exited 0{': ' + tail if tail else ''}"
        return c.target.name, False, f"command exited {rc}{': ' + tail if tail else ''}"

    for host, ok, note in Pipeline(fleet, got, command=lambda _c: script, apply=apply,
                                   forks=forks, timeout_s=timeout_s).run():
        out[host] = (ok, note)
    return out


def _reimage(fleet: Fleet, camp: CampaignRow, names: list[str]) -> dict[str, tuple[bool, str]]:
    """BMC reimage (virtual media) with the target baseline's image, then the pinned SSH key
    is cleared (a reimaged host has a new one; the next collection pins it on first use)."""
    from gpufleet.service.hosts.bmc import reimage
    from gpufleet.service.hosts.operations import rekey

    out: dict[str, tuple[bool, str]] = {}
    for name in names:
        try:
            res = reimage(fleet, name, baseline=camp.target_baseline, ticket=camp.ticket,
                          drained={"by": f"campaign {camp.name}"})  # drained by its wave
        except GpufleetError as exc:
            out[name] = (False, str(exc))
            continue
        if res.ok:
            rekey(fleet, name, f"reimaged by campaign {camp.name} ({camp.ticket})",
                  ticket=camp.ticket)
        out[name] = (res.ok, "reimaged by virtual media" if res.ok else res.reason or "failed")
    return out
