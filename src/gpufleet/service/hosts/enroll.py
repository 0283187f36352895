"""Enroll hosts from an inventory: idempotent, history-preserving, fail closed.

Before anything is written, the whole inventory is checked (an error names file:line and
nothing is enrolled):

* one machine, one host: two hosts that reach the same address and port (or two
  ``gpufleet_transport=local`` hosts) are refused, in the inventory and against the hosts
  already enrolled;
* ``gpufleet_transport=local`` is refused for a host whose address is not this machine;
* secret variables (:func:`gpufleet.secrets.is_secret_var`) are sealed with the operator's
  key before they are stored, and shown as ``<redacted>`` in events; without a key an
  inventory holding a secret is refused with a message saying how to give one.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpufleet.collect.transport import Target
from gpufleet.domain.events import EventKind
from gpufleet.domain.health import Health
from gpufleet.domain.names import did_you_mean
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError, Conflict, InventoryError
from gpufleet.inventory import Inventory, InventoryHost
from gpufleet.secrets import HOW_TO_KEY, SEALED_PREFIX, SecretBox, is_secret_var, redact_vars
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.lifecycle import retrying
from gpufleet.store.tables import BaselineRow, Host, InventoryGroup, Pool

__all__ = ["EnrollReport", "enroll", "is_this_machine"]

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
_HOST_VARS = ("ansible_ssh_host", "ansible_host")
_PORT_VARS = ("ansible_ssh_port", "ansible_port")


@dataclass
class EnrollReport:
    """What an enrollment changed; ``warnings`` are the inventory's (file:line each)."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- this machine


def _bindable(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """True when ``ip`` is an address of this machine (the kernel lets us bind to it)."""
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.bind((str(ip), 0))
    except OSError:
        return False
    return True


def is_this_machine(address: str) -> bool:
    """True when ``address`` names this machine: localhost, 127.0.0.0/8, ::1, this
    hostname, or one of this machine's addresses (a name must resolve only to those)."""
    a = address.strip().strip("[]").rstrip(".").lower()
    if not a:
        return False
    if a in _LOOPBACK_NAMES:
        return True
    hostname = socket.gethostname().lower()
    if a in {hostname, hostname.split(".")[0], socket.getfqdn().lower()}:
        return True
    try:
        ip = ipaddress.ip_address(a.split("%")[0])
    except ValueError:
        ip = None
    if ip is not None:
        return ip.is_loopback or _bindable(ip)
    try:
        infos = socket.getaddrinfo(a, None)
    except (OSError, UnicodeError):
        return False
    addrs = {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos}
    return bool(addrs) and all(x.is_loopback or _bindable(x) for x in addrs)


# --------------------------------------------------------------------------- pre-checks


def _transport(vars_: dict[str, str]) -> str:
    return vars_.get("gpufleet_transport") or "ssh"


def _norm_address(address: str) -> str:
    a = address.strip().strip("[]").rstrip(".").lower()
    try:
        ip = ipaddress.ip_address(a)
    except ValueError:
        return "localhost" if a in _LOOPBACK_NAMES else a
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return "localhost" if ip.is_loopback else str(ip)


def _machine(transport: str, address: str, port: int) -> tuple[str, ...] | None:
    """What identifies the machine a host reaches; None when the transport does not say."""
    if transport == "local":
        return ("local",)
    if transport == "ssh":
        return ("ssh", _norm_address(address), str(port))
    return None


def _where(ih: InventoryHost) -> str:
    line = next((ih.var_lines[k] for k in (*_HOST_VARS, *_PORT_VARS) if k in ih.var_lines), None)
    return f"{ih.source}:{line or ih.line}"


def _reach(machine: tuple[str, ...]) -> str:
    return (
        "this machine (gpufleet_transport=local)"
        if machine == ("local",)
        else (f"{machine[1]} port {machine[2]}")
    )


def _check_inventory(inventory: Inventory, box: SecretBox | None) -> None:
    """Every check that needs no database; raises :class:`InventoryError` naming file:line."""
    src = inventory.source
    seen: dict[tuple[str, ...], InventoryHost] = {}
    for ih in inventory.hosts:
        if "/" in ih.name or ih.name in (".", ".."):
            raise InventoryError(
                src,
                ih.line,
                f"host name {ih.name!r}: a host name cannot contain '/' or be '.' or '..' "
                "(the API and the dashboard address a host by its name in the URL path)",
            )
        transport = _transport(ih.vars)
        if transport == "local" and not is_this_machine(ih.address):
            raise InventoryError(
                src,
                ih.var_lines.get("gpufleet_transport", ih.line),
                f"host {ih.name}: gpufleet_transport=local runs on this machine, but its "
                f"address {ih.address!r} is not this machine; use ssh (the default) or "
                "set ansible_host=localhost",
            )
        machine = _machine(transport, ih.address, ih.port)
        if machine is not None:
            first = seen.setdefault(machine, ih)
            if first is not ih:
                raise InventoryError(
                    src,
                    ih.var_lines.get("ansible_host", ih.line),
                    f"hosts {first.name} ({_where(first)}) and {ih.name} ({_where(ih)}) are the "
                    f"same machine: both reach {_reach(machine)}; enroll it under one name",
                )
        if box is None:
            secrets = [k for k, v in ih.vars.items() if v != "" and is_secret_var(k)]
            for key in sorted(secrets, key=lambda k: ih.var_lines.get(k, 0))[:1]:
                raise InventoryError(
                    src,
                    ih.var_lines.get(key),
                    f"host {ih.name}: variable {key} holds a secret, and secrets are only "
                    f"stored encrypted: {HOW_TO_KEY}",
                )


def _check_enrolled(inventory: Inventory, existing: dict[str, Host]) -> None:
    """Refuse a host that reaches the machine of an already enrolled host of another name."""
    names = set(inventory.names)
    taken: dict[tuple[str, ...], Host] = {}
    for h in existing.values():
        if h.name in names:
            continue  # its inventory entry replaces what is stored
        machine = _machine(_transport(h.vars or {}), h.address, h.port)
        if machine is not None:
            taken.setdefault(machine, h)
    for ih in inventory.hosts:
        machine = _machine(_transport(ih.vars), ih.address, ih.port)
        other = taken.get(machine) if machine is not None else None
        if other is not None:
            raise InventoryError(
                inventory.source,
                ih.var_lines.get("ansible_host", ih.line),
                f"host {ih.name} ({_where(ih)}) is the same machine as enrolled host "
                f"{other.name} (from {other.source or 'an earlier enroll'}): both reach "
                f"{_reach(machine or ())}; enroll it under one name",
            )


# --------------------------------------------------------------------------- enroll


def _sealed_vars(
    ih: InventoryHost, stored: dict[str, str], box: SecretBox | None
) -> dict[str, str]:
    """The host's variables as stored: secrets sealed (the stored token kept when the secret
    did not change, so re-enrolling stays idempotent)."""
    out: dict[str, str] = {}
    for key, value in ih.vars.items():
        if value == "" or not is_secret_var(key):
            out[key] = value
            continue
        assert box is not None  # _check_inventory refused secrets without a key
        old = stored.get(key)
        out[key] = old if old is not None and box.same(old, value) else box.seal(value)
    return out


def _wanted(
    ih: InventoryHost, stored_vars: dict[str, str], box: SecretBox | None
) -> dict[str, Any]:
    spec = ih.expected_spec()
    return {
        "address": ih.address,
        "port": ih.port,
        "user": ih.user,
        "key_file": ih.key_file,
        "groups": list(ih.groups),
        "vars": _sealed_vars(ih, stored_vars, box),
        "pool": ih.pool,
        "role": ih.role.value,
        "rack": spec.rack,
        "expected": spec.model_dump(exclude_none=True),
    }


def _change_data(key: str, before: Any, after: Any) -> dict[str, Any]:
    if key != "vars":
        return {"before": before, "after": after}
    before, after = dict(before or {}), dict(after or {})
    secrets = sorted(
        k for k in set(before) | set(after) if is_secret_var(k) and before.get(k) != after.get(k)
    )
    data: dict[str, Any] = {"before": redact_vars(before), "after": redact_vars(after)}
    if secrets:
        data["secrets_changed"] = secrets
    return data


def enroll(
    fleet: Fleet, inventory: Inventory, *, box: SecretBox | None = None, strict: bool = False
) -> EnrollReport:
    """Create or update a host per inventory entry; new hosts start ``enrolled``.

    ``box`` seals secret variables; when None, the operator's key comes from the fleet's
    settings (``GPUFLEET_SECRET_KEY`` / ``GPUFLEET_SECRET_KEY_FILE``). Raises
    :class:`InventoryError` (file:line) and enrolls nothing when a check of the module
    docstring fails. A ``gpufleet_baseline`` naming no baseline is a warning of the report
    (:func:`unknown_baselines`); with ``strict`` a ConfigError (exit 2), nothing enrolled.
    """
    if box is None:
        key = fleet.settings.secret_key_bytes()
        box = SecretBox(key) if key else None
    _check_inventory(inventory, box)  # before the transaction: may resolve names
    missing = unknown_baselines(fleet, inventory)
    if strict and missing:
        raise ConfigError("; ".join(missing) + "; nothing enrolled (--strict)")
    report = _enroll_once(fleet, inventory, box)
    report.warnings += missing
    return report


def unknown_baselines(fleet: Fleet, inventory: Inventory) -> list[str]:
    """One warning (file:line) per inventory host whose ``gpufleet_baseline`` names no
    baseline, with the nearest known names: its drift and validation would have no
    baseline to compare with."""
    named = {ih.baseline for ih in inventory.hosts if ih.baseline}
    if not named:
        return []
    with fleet.db.session() as s:
        known = set(s.scalars(select(BaselineRow.name)))
    out = []
    for ih in inventory.hosts:
        if ih.baseline and ih.baseline not in known:
            line = ih.var_lines.get("gpufleet_baseline", ih.line)
            where = f"{inventory.source or '<inventory>'}" + (f":{line}" if line else "")
            out.append(
                f"{where}: host {ih.name}: no baseline named '{ih.baseline}'"
                f"{did_you_mean(ih.baseline, known)} (gpufleet baseline create)"
            )
    return out


@retrying
def _enroll_once(fleet: Fleet, inventory: Inventory, box: SecretBox | None) -> EnrollReport:
    """One attempt of :func:`enroll` in one transaction. Another enroll adding the same
    hosts (or pools) meanwhile breaks a unique key: nothing of this attempt is written, it
    is a :class:`Conflict` (retryable, exit 6), retried on a fresh read (the hosts are then
    found and updated), and reported as one if it keeps happening."""
    try:
        return _enroll_tx(fleet, inventory, box)
    except IntegrityError as exc:
        raise Conflict(
            f"enroll {inventory.source}: another enroll wrote the same hosts or pools "
            f"meanwhile; nothing was written, retry"
        ) from exc


def _enroll_tx(fleet: Fleet, inventory: Inventory, box: SecretBox | None) -> EnrollReport:
    report = EnrollReport(warnings=list(inventory.warnings))
    now = fleet.now()
    with fleet.db.session() as s:
        existing = {h.name: h for h in s.scalars(select(Host))}
        _check_enrolled(inventory, existing)
        pools = {p.name: p for p in s.scalars(select(Pool))}
        for ih in inventory.hosts:
            host = existing.get(ih.name)
            wanted = _wanted(ih, dict(host.vars or {}) if host is not None else {}, box)
            if host is None:
                host = Host(
                    name=ih.name,
                    state=HostState.ENROLLED.value,
                    state_entered_at=now,
                    health="ok",
                    profiles=[],
                    source=inventory.source,
                    created_at=now,
                    updated_at=now,
                    **wanted,
                )
                s.add(host)
                s.flush()
                record_event(
                    s,
                    fleet,
                    EventKind.ENROLLED,
                    f"enrolled from {inventory.source}",
                    host=host,
                    data={"groups": wanted["groups"], "address": ih.address},
                )
                report.added.append(ih.name)
            else:
                changed = {
                    k: (getattr(host, k), v) for k, v in wanted.items() if getattr(host, k) != v
                }
                if changed:
                    for k, (_, v) in changed.items():
                        setattr(host, k, v)
                    host.source = inventory.source
                    host.updated_at = now
                    record_event(
                        s,
                        fleet,
                        EventKind.UPDATED,
                        "inventory changed: " + ", ".join(sorted(changed)),
                        host=host,
                        data={k: _change_data(k, b, a) for k, (b, a) in changed.items()},
                    )
                    report.updated.append(ih.name)
                else:
                    report.unchanged.append(ih.name)
            if ih.pool and ih.pool not in pools:
                pool = Pool(name=ih.pool, baseline=ih.baseline, expected=wanted["expected"])
                s.add(pool)
                pools[ih.pool] = pool
            elif ih.pool and ih.baseline and pools[ih.pool].baseline is None:
                pools[ih.pool].baseline = ih.baseline
        _store_groups(s, inventory)
    return report


def _store_groups(s: Session, inventory: Inventory) -> None:
    """Write the inventory's group definitions (children and non-secret own variables: a
    secret never leaves gpufleet, so it is not kept here either; hosts hold theirs sealed)
    for the Ansible dynamic inventory (issue 26 item 5). The last enroll naming a group
    writes it."""
    rows = {g.name: g for g in s.scalars(select(InventoryGroup))}
    for d in inventory.definitions:
        own = {
            k: v
            for k, v in d.vars.items()
            if not is_secret_var(k) and not v.startswith(SEALED_PREFIX)
        }
        row = rows.get(d.name)
        if row is None:
            s.add(InventoryGroup(name=d.name, children=list(d.children), vars=own,
                                 source=inventory.source))
        elif (row.children, row.vars, row.source) != (d.children, own, inventory.source):
            row.children, row.vars, row.source = list(d.children), own, inventory.source


def local_target() -> Target:
    """This machine, for ``gpufleet collect --local``."""
    return Target(socket.gethostname(), "localhost")


def ensure_local_host(fleet: Fleet) -> str:
    """Enroll this machine (once) so ``collect --local`` stores its facts; return its name."""
    t = local_target()
    now = fleet.now()
    with fleet.db.session() as s:
        host = s.scalar(select(Host).where(Host.name == t.name))
        if host is None:
            host = Host(
                name=t.name,
                address=t.address,
                port=22,
                groups=["local"],
                vars={"gpufleet_transport": "local"},
                expected={},
                state=HostState.ENROLLED,
                state_entered_at=now,
                health=Health.OK,
                profiles=[],
                source="local",
                created_at=now,
                updated_at=now,
            )
            s.add(host)
            s.flush()
            record_event(s, fleet, EventKind.ENROLLED, "enrolled by collect --local", host=host)
    return t.name
