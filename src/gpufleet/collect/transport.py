"""Transports: how the collection script reaches a host and how each failure is named.

A transport runs one script on one target and returns a :class:`RawResult`; it never raises
for a host-level failure (unreachable, auth, host key, timeout), it *reports* it, so one bad
host never spoils a sweep. :func:`run_many` fans out with bounded concurrency.

Transports are looked up by name in a registry (:func:`known_transports`,
:func:`get_transport_factory`): ``ssh`` and ``local`` are built in, others come from the
``gpufleet.transports`` entry point group.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol

from gpufleet.domain.events import CollectionOutcome
from gpufleet.errors import ConfigError

if TYPE_CHECKING:
    from gpufleet.collect.ssh_pool import SshConnections

#: Per-host result of one collection attempt (defined in the domain: the store types it too).
Outcome = CollectionOutcome


@dataclass(frozen=True)
class Target:
    """Where and how to reach one host."""

    name: str
    address: str
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    pinned_host_key: str | None = None  # OpenSSH public key line, pinned on first use
    #: SSH login password, in clear: opened from the sealed inventory variable only when the
    #: target is built for a run (service/core/pipeline.py); never shown, logged or stored.
    password: str | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class RawResult:
    """What came back from one host, before parsing."""

    host: str
    outcome: Outcome
    reason: str = ""
    output: str | None = None
    host_key: str | None = None  # the key the server presented (OpenSSH format)
    duration_s: float = 0.0


class Transport(Protocol):
    """Runs the collection script on one target."""

    name: str

    async def run(self, target: Target, script: str, timeout_s: float) -> RawResult:
        """Run ``script`` on ``target``; report failures in the result, never raise."""
        ...


async def run_many(
    transport: Transport,
    targets: Sequence[Target],
    script: str,
    *,
    forks: int = 200,
    timeout_s: float = 120.0,
    on_result: Callable[[RawResult], None] | None = None,
) -> list[RawResult]:
    """Run the script on every target, at most ``forks`` at once, results in target order."""
    sem = asyncio.Semaphore(max(1, forks))

    async def one(t: Target) -> RawResult:
        async with sem:
            start = time.monotonic()
            try:
                res = await transport.run(t, script, timeout_s)
            except Exception as exc:  # a transport bug must not sink the sweep
                res = RawResult(
                    t.name,
                    Outcome.ERROR,
                    f"{type(exc).__name__}: {exc}",
                    duration_s=time.monotonic() - start,
                )
        if on_result is not None:
            on_result(res)
        return res

    return list(await asyncio.gather(*(one(t) for t in targets)))


def fingerprint(key: str) -> str:
    """OpenSSH-style SHA256 fingerprint of a public key line (``ssh-ed25519 AAAA...``)."""
    blob = base64.b64decode(key.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


# --- the transport registry -------------------------------------------------------------------
#
# A host names its transport in the inventory variable ``gpufleet_transport`` (``ssh`` when
# absent). ``ssh`` and ``local`` are built in; any installed distribution adds more through
# the entry point group ``gpufleet.transports`` (the lab's ``sim`` transport arrives that way:
# the product never imports the lab). An entry point names a :class:`TransportPlugin`.

ENTRY_POINT_GROUP = "gpufleet.transports"


@dataclass(frozen=True)
class TransportOptions:
    """What a transport factory is given: the host variables it declared, and settings."""

    host_vars: Mapping[str, str]
    connect_timeout_s: float = 10.0
    #: The process's kept SSH connections (:mod:`gpufleet.collect.ssh_pool`, owned by the
    #: engine) and how long one stays kept after a run; None: connect per command.
    ssh_connections: SshConnections | None = None
    ssh_idle_s: float = 0.0


@dataclass(frozen=True)
class TransportPlugin:
    """How to build one kind of transport.

    ``host_vars`` are the inventory variables the factory reads (e.g. ``gpufleet_lab_dir``);
    hosts that differ in them get separate transport instances, hosts that agree share one.
    """

    factory: Callable[[TransportOptions], Transport]
    host_vars: tuple[str, ...] = ()
    description: str = ""


#: (transport name, values of its declared host variables): hosts with one key share a transport.
TransportKey = tuple[str, tuple[str | None, ...]]

_REGISTRY: dict[str, TransportPlugin] = {}
_entry_points_loaded = False


def register_transport(name: str, plugin: TransportPlugin) -> None:
    """Register (or replace) the transport called ``name``."""
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"transport name {name!r}: use letters, digits, '-' and '_'")
    _REGISTRY[name] = plugin


def unregister_transport(name: str) -> None:
    """Forget the transport called ``name`` (a plugin that is removed again, or a test's
    own transport once it is done); a name not registered is no error."""
    _REGISTRY.pop(name, None)


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _REGISTRY:
            continue  # registered directly (built-in or by a test): that one wins
        try:
            plugin = ep.load()
        except Exception as exc:
            raise ConfigError(
                f"transport plugin {ep.name} = {ep.value}: cannot load: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(plugin, TransportPlugin):
            raise ConfigError(
                f"transport plugin {ep.name} = {ep.value}: is a {type(plugin).__name__}, "
                "expected gpufleet.collect.transport.TransportPlugin"
            )
        _REGISTRY[ep.name] = plugin


def known_transports() -> list[str]:
    """Names of every registered transport (built-in and from entry points), sorted."""
    _load_entry_points()
    return sorted(_REGISTRY)


def get_transport_factory(name: str) -> TransportPlugin:
    """The plugin registered as ``name``; :class:`ConfigError` naming the known ones if none."""
    plugin = _REGISTRY.get(name)
    if plugin is None:
        _load_entry_points()
        plugin = _REGISTRY.get(name)
    if plugin is None:
        raise ConfigError(
            f"unknown transport {name!r}: use {', '.join(known_transports())} "
            f"(plugins register through the entry point group {ENTRY_POINT_GROUP!r})"
        )
    return plugin


def transport_key(name: str, host_vars: Mapping[str, str]) -> TransportKey:
    """Which transport instance a host with these inventory variables needs (checks ``name``)."""
    plugin = get_transport_factory(name)
    return name, tuple(host_vars.get(v) for v in plugin.host_vars)


def open_transport(
    key: TransportKey,
    *,
    connect_timeout_s: float = 10.0,
    ssh_connections: SshConnections | None = None,
    ssh_idle_s: float = 0.0,
) -> Transport:
    """Build the transport for ``key`` (see :func:`transport_key`); ``ssh_connections``: the
    connections an ``ssh`` transport keeps between runs, ``ssh_idle_s`` seconds each."""
    name, values = key
    plugin = get_transport_factory(name)
    given = {v: x for v, x in zip(plugin.host_vars, values, strict=True) if x is not None}
    return plugin.factory(
        TransportOptions(
            host_vars=given,
            connect_timeout_s=connect_timeout_s,
            ssh_connections=ssh_connections,
            ssh_idle_s=ssh_idle_s,
        )
    )


def _ssh(options: TransportOptions) -> Transport:
    from gpufleet.collect.ssh import SshTransport  # asyncssh is slow to import

    return SshTransport(
        connect_timeout_s=options.connect_timeout_s,
        connections=options.ssh_connections,
        idle_s=options.ssh_idle_s,
    )


def _local(options: TransportOptions) -> Transport:
    from gpufleet.collect.local import LocalTransport

    return LocalTransport()


register_transport("ssh", TransportPlugin(_ssh, description="OpenSSH hosts (asyncssh)"))
register_transport("local", TransportPlugin(_local, description="this machine, no network"))
