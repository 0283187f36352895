"""Ansible dynamic inventory (``gpufleet inventory --list`` / ``--host NAME``) and the small
executable inventory script Ansible runs (``gpufleet inventory script PATH``).

The groups and host variables are computed by :mod:`gpufleet.domain.ansible`; this module
reads the hosts, their latest facts and baselines in one short read transaction, and removes
secret variables (by name, and any sealed ``fernet:`` value) before anything is built.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from gpufleet.domain.accelerator_exports import accelerator_vars, short_model
from gpufleet.domain.accelerators import inventories_of, inventory_group
from gpufleet.domain.ansible import InventoryHost, host_vars, inventory
from gpufleet.domain.ansible_site import SiteGroup, own_vars
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.spec import ExpectedSpec
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError, LocalIOError
from gpufleet.secrets import SEALED_PREFIX, is_secret_var
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.select import is_explicit, nothing_matches, select_hosts
from gpufleet.service.hosts.vendor_exports import EXPORTS
from gpufleet.store.repo import (
    baseline_for_host,
    baseline_name_for_host,
    host_by_name,
    hosts_with_latest_facts,
)
from gpufleet.store.tables import Host, InventoryGroup


def public_vars(values: dict[str, str]) -> dict[str, str]:
    """The inventory variables that may leave gpufleet: secret names and sealed values
    dropped (a sealed value under an innocent name is still a secret)."""
    return {
        k: v
        for k, v in values.items()
        if not is_secret_var(k) and not str(v).startswith(SEALED_PREFIX)
    }


def site_groups(s: Session) -> dict[str, SiteGroup]:
    """The enrolled inventories' own groups (children, non-secret vars), by name."""
    return {
        g.name: SiteGroup(g.name, tuple(g.children), public_vars(dict(g.vars)))
        for g in s.scalars(select(InventoryGroup))
    }


def _read(
    fleet: Fleet, selector: str | None, *, merged: bool = False
) -> tuple[list[InventoryHost], dict[str, SiteGroup]]:
    """The hosts and the site's groups; ``merged``: each host keeps every variable it gets
    from the inventory (its groups' too), else only those its groups do not give it."""
    out: list[InventoryHost] = []
    with fleet.db.session() as s:
        site = site_groups(s)
        own_of = {} if merged else site
        rows = hosts_with_latest_facts(s, select_hosts(selector))
        for h, snap in rows:
            out.append(
                _inventory_host(
                    h,
                    HostFacts.model_validate(snap.facts) if snap else None,
                    baseline_name_for_host(s, h),
                    baseline_for_host(s, h),
                    own_of,
                )
            )
    if not out and is_explicit(selector):
        raise nothing_matches(selector)
    return out, site


def inventory_hosts(fleet: Fleet, selector: str | None = None) -> list[InventoryHost]:
    """The selected hosts as the inventory sees them, by name."""
    return _read(fleet, selector)[0]


def _accelerators(facts: HostFacts | None) -> dict[str, Any]:
    """The accelerator fields of :class:`InventoryHost`: group -> the host's variables for
    it, the count of every vendor's accelerators and their one model."""
    if facts is None:
        return {}
    inventories = [inv for inv in inventories_of(facts) if inv.count]
    groups = {
        g: accelerator_vars(inv, EXPORTS) for inv in inventories if (g := inventory_group(inv))
    }
    models = {short_model(m) for inv in inventories for m in inv.models()}
    return {
        "accelerators": groups,
        "accelerator_count": sum(inv.count for inv in inventories),
        "accelerator_model": models.pop() if len(models) == 1 else None,
    }


def _inventory_host(
    h: Host,
    facts: HostFacts | None,
    baseline_name: str | None,
    baseline: Any,
    site: dict[str, SiteGroup],
) -> InventoryHost:
    groups = tuple(h.groups or ())
    return InventoryHost(
        name=h.name,
        address=h.address,
        port=h.port,
        user=h.user,
        key_file=h.key_file,
        vars=own_vars(public_vars(dict(h.vars)), groups, site),
        groups=groups,
        state=HostState(h.state),
        pool=h.pool,
        rack=h.rack,
        profiles=list(h.profiles),
        facts=facts,
        baseline_name=baseline_name,
        baseline=baseline,
        spec=ExpectedSpec.model_validate(h.expected),
        health=str(h.health) if h.health else None,
        fault=str(h.fault) if h.fault else None,
        **_accelerators(facts),
    )


def inventory_list(fleet: Fleet, selector: str | None = None) -> dict[str, Any]:
    """Ansible's ``--list`` JSON for the selected hosts (default: every host), with the
    enrolled inventory's own groups, children and vars."""
    return inventory(*_read(fleet, selector))


def inventory_host(fleet: Fleet, name: str) -> dict[str, Any]:
    """Ansible's ``--host NAME`` JSON: the variables of one host, its inventory groups' ones
    included (what the host gets from the inventory; NotFound, exit 4)."""
    with fleet.db.session() as s:
        host_by_name(s, name)  # NotFound naming it
    [h] = _read(fleet, name, merged=True)[0]
    return host_vars(h)


def inventory_script(command: Sequence[str], fleet: Fleet, *, embed_db: bool = True) -> str:
    """The text of an executable inventory: ``command`` (how to run gpufleet) with this
    fleet's home and database, answering Ansible's ``--list`` and ``--host NAME``.

    A database URL holding a password is refused (the script would keep it in clear): give
    it to Ansible's environment as ``GPUFLEET_DATABASE_URL`` (or use ``~/.pgpass``) and
    write the script with ``embed_db=False``, which leaves the database to the environment.
    """
    settings = fleet.settings
    argv = [*command, "--home", str(Path(settings.home).resolve())]
    if embed_db and settings.database_url:
        url = make_url(settings.database_url)
        if url.password:
            raise ConfigError(
                setting="GPUFLEET_DATABASE_URL",
                cause="holds a password, which the inventory script would store in clear; "
                "give it to Ansible's environment instead (or use ~/.pgpass) and write the "
                "script with --no-db",
            )
        argv += ["--db", settings.database_url]
    quoted = " ".join(shlex.quote(a) for a in argv)
    return (
        "#!/bin/sh\n"
        "# Ansible dynamic inventory: the hosts of one gpufleet (written by\n"
        "# 'gpufleet inventory script'). Ansible runs it with --list (or --host NAME):\n"
        "#   ansible-inventory -i THIS_FILE --list\n"
        f'exec {quoted} inventory "$@"\n'
    )


def write_inventory_script(
    fleet: Fleet, path: Path, command: Sequence[str], *, embed_db: bool = True
) -> Path:
    """Write :func:`inventory_script` to ``path`` (mode 0755); the path written."""
    text = inventory_script(command, fleet, embed_db=embed_db)
    try:
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755)
    except OSError as exc:
        raise LocalIOError(path=str(path), cause=str(exc.strerror or exc)) from exc
    return path
