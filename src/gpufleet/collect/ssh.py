"""SSH transport (asyncssh): one connection per host, the script on stdin, failures named.

The script is sent on stdin to ``sh -c 'eval "$(cat)"'`` (see :data:`~gpufleet.collect.local.
SH_COMMAND`): that command line means the same to bash, dash, zsh, csh and fish login shells,
works with a plain sshd (no sftp, no temp files) and no tool can swallow the script.

Host keys are trusted on first use: with no pinned key any key is accepted and returned in
:attr:`RawResult.host_key`; with a pinned key (or an operator's expected ``SHA256:``
fingerprint, see :mod:`gpufleet.collect.hostkeys`) any other key ends the connection during key
exchange, before authentication, so nothing runs on the host. The client offers every host key
type (the pinned one first), so a host that now has only a key of another type is seen as a
changed key, not as "no matching host key type".

Errors become outcomes here and nowhere else (the ``except`` chain in :meth:`SshTransport.run`):

- pinned key or expected fingerprint differs, key type included (HostKeyNotVerifiable)
  -> HOST_KEY_CHANGED
- pinned key's type no longer offered (KeyExchangeFailed) -> HOST_KEY_CHANGED
- connect phase over ``connect_timeout_s``, or the whole run over ``timeout_s`` -> TIMEOUT
- publickey (and the password, when the host has one) refused (PermissionDenied) -> AUTH_FAILED
- DNS failure, refused, no route, reset or closed before login -> UNREACHABLE
- more than ``max_output_bytes`` of output -> BAD_OUTPUT
- client key unreadable, session refused, connection lost mid-run -> ERROR
- unreadable or invalid ~/.ssh/config -> ERROR
- script exits non-zero, output truncated or garbage -> OK (the bundle parser decides)
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import asyncssh
from asyncssh.public_key import get_default_public_key_algs

from gpufleet.collect.hostkeys import is_fingerprint_pin
from gpufleet.collect.local import MAX_OUTPUT_BYTES, SH_COMMAND, exit_note, size_text
from gpufleet.collect.ssh_pool import PoolKey, SshConnections, pool_key
from gpufleet.collect.transport import Outcome, RawResult, Target, fingerprint

_ERRNO_TEXT = {
    errno.ECONNREFUSED: "Connection refused",
    errno.EHOSTUNREACH: "No route to host",
    errno.ENETUNREACH: "Network is unreachable",
    errno.ECONNRESET: "Connection reset by peer",
}


def openssh_line(key: asyncssh.SSHKey) -> str:
    """``ssh-ed25519 AAAA...`` without a comment."""
    return " ".join(key.export_public_key("openssh").decode().split()[:2])


#: Preferred ciphers, fastest first; the rest of asyncssh's defaults stay as fallbacks.
_CIPHERS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes128-ctr",
    "aes256-ctr",
)


#: Host key types in OpenSSH's order of preference (the key ``ssh`` itself would pin); the rest
#: of asyncssh's public-key algorithms follow. No certificate types: no CA is trusted.
_HOST_KEY_ALGS = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "rsa-sha2-512",
    "rsa-sha2-256",
)


def _host_key_algs(pinned: asyncssh.SSHKey | None) -> list[str]:
    """The pinned key's algorithms first, then every other type: a host whose pinned type is
    gone still completes key exchange and shows its new key, which :class:`_KeyCheck` refuses."""
    first = [a.decode() for a in pinned.sig_algorithms] if pinned is not None else []
    rest = [*_HOST_KEY_ALGS, *(a.decode() for a in get_default_public_key_algs())]
    return list(dict.fromkeys([*first, *rest]))


class _KeyCheck(asyncssh.SSHClient):
    """Decides on host keys not in the (pinned) trusted set and remembers what was offered."""

    def __init__(self, pinned: asyncssh.SSHKey | None, expected: str | None = None) -> None:
        self.pinned = pinned
        #: An operator's expected SHA256 fingerprint (``hosts rekey --fingerprint``).
        self.expected = expected
        self.offered: asyncssh.SSHKey | None = None

    @property
    def pin(self) -> str | None:
        """The fingerprint a key must have; None: trust on first use."""
        if self.expected is not None:
            return self.expected
        return self.pinned.get_fingerprint("sha256") if self.pinned is not None else None

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        self.offered = key
        if self.expected is not None:
            return bool(key.get_fingerprint("sha256") == self.expected)
        return self.pinned is None  # trust on first use; a pinned host must match exactly


class _TooLarge(Exception):
    pass


class _Stale(Exception):
    """A kept connection that cannot open a session: dropped, the host connected again."""


def host_key_pin(target: Target) -> tuple[asyncssh.SSHKey | None, str | None]:
    """The target's pin: (pinned public key, None) or (None, expected ``SHA256:`` fingerprint),
    (None, None) to trust on first use. A pinned key that is not an OpenSSH public key raises
    ``asyncssh.KeyImportError`` or ``ValueError``."""
    pin = target.pinned_host_key
    if not pin:
        return None, None
    if is_fingerprint_pin(pin):
        return None, pin
    return asyncssh.import_public_key(pin), None


def auth_methods(target: Target) -> tuple[str, ...]:
    """Keys first; the inventory's password only for a host that has one."""
    return ("publickey", "password") if target.password is not None else ("publickey",)


def connect_options(
    target: Target,
    check: _KeyCheck,
    client_keys: list[asyncssh.SSHKey] | None,
    ssh_config: tuple[str, ...],
) -> dict[str, Any]:
    """The ``asyncssh.connect`` keywords of every gpufleet SSH connection (the one home of
    gpufleet's host-key, authentication and algorithm choices): ``check`` decides on host
    keys, ``client_keys`` None leaves asyncssh's defaults (agent, ``~/.ssh/id_*``)."""
    pinned = check.pinned
    methods = auth_methods(target)
    return {
        # No ansible_user: as Ansible (OpenSSH) would, the User of the matching ~/.ssh/config
        # entry, else the local user; () = not given.
        "username": target.user if target.user else (),
        "client_factory": lambda: check,
        # The pinned key steers algorithm choice; others go to _KeyCheck.
        "known_hosts": ([pinned] if pinned else [], [], []),
        "server_host_key_algs": _host_key_algs(pinned),
        "client_keys": client_keys if client_keys is not None else (),
        # None: asyncssh's defaults (agent, ~/.ssh/id_*); else only that key.
        "agent_path": None if client_keys is not None else (),
        # ~/.ssh/config supplies what the inventory leaves out (User, IdentityFile, ProxyJump
        # ...); what the inventory says wins.
        "config": ssh_config,
        # Keys first; the inventory's password (opened from the sealed variable) only when a
        # host has one and no key is accepted.
        "preferred_auth": methods,
        "password": target.password,
        "password_auth": target.password is not None,
        "kbdint_auth": False,
        "gss_auth": False,
        "gss_kex": False,
        # AES-GCM runs in OpenSSL (AES-NI); compression only costs CPU on the management
        # networks we collect over.
        "encryption_algs": _CIPHERS,
        "compression_algs": None,
    }


@dataclass
class SshTransport:
    """Runs the collection script over SSH with asyncssh, one host at a time per command.

    With ``connections`` (the process's, :mod:`gpufleet.collect.ssh_pool`) a connection left
    by an earlier command to the same host (same address, user and keys; the host key it was
    opened with must pass this command's pin) is used again, and a command that ended
    normally leaves its connection there for ``idle_s`` seconds. A
    kept connection that turns out broken before the command was sent (the server closed
    it, the channel cannot be opened within ``connect_timeout_s``) is dropped and the host
    connected again, once; a command that failed after it was sent is never sent again."""

    connect_timeout_s: float = 10.0
    max_output_bytes: int = MAX_OUTPUT_BYTES
    #: OpenSSH client config files to read; ``()``: ``~/.ssh/config`` when it exists.
    ssh_config: tuple[str, ...] = ()
    #: Connections kept between commands (None: one connection per command, closed after).
    connections: SshConnections | None = None
    #: Seconds a connection stays kept after a command (0: closed after it).
    idle_s: float = 0.0
    name: str = field(default="ssh", init=False)
    _keys: dict[str, list[asyncssh.SSHKey]] = field(default_factory=dict, init=False, repr=False)

    async def close(self) -> None:
        """Nothing of its own is kept (the kept connections are the process's); present so
        callers can treat every transport alike."""

    async def __aenter__(self) -> SshTransport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _client_keys(self, key_file: str) -> list[asyncssh.SSHKey]:
        # Loaded once per file, not per host: 200 hosts share one key file.
        if key_file not in self._keys:
            self._keys[key_file] = [asyncssh.read_private_key(key_file)]
        return self._keys[key_file]

    async def run(self, target: Target, script: str, timeout_s: float) -> RawResult:
        """Run ``script`` on ``target`` within ``timeout_s`` (connecting included)."""
        start = time.monotonic()
        where = f"{target.address}:{target.port}"
        who = f"{target.user or '(user from ~/.ssh/config or local user)'}@{target.address}"

        def result(
            outcome: Outcome,
            reason: str = "",
            output: str | None = None,
            host_key: str | None = None,
        ) -> RawResult:
            return RawResult(
                target.name,
                outcome,
                reason,
                output=output,
                host_key=host_key,
                duration_s=time.monotonic() - start,
            )

        try:
            pinned, expected = host_key_pin(target)
        except (asyncssh.KeyImportError, ValueError) as exc:
            return result(Outcome.ERROR, f"pinned host key is not an OpenSSH public key: {exc}")
        try:
            client_keys: list[asyncssh.SSHKey] | None = (
                self._client_keys(target.key_file) if target.key_file else None
            )
        except (OSError, asyncssh.KeyImportError) as exc:
            return result(Outcome.ERROR, f"cannot load client key {target.key_file}: {exc}")

        methods = auth_methods(target)
        check = _KeyCheck(pinned, expected)
        pool = self.connections if self.idle_s > 0 else None
        key: PoolKey | None = None
        if pool is not None and pool.usable_here():
            key = pool_key(
                target.name,
                target.address,
                target.port,
                target.user,
                client_keys,
                target.password,
                self.ssh_config,
            )
        phase = "connect"
        conn: asyncssh.SSHClientConnection | None = None
        key_text: str | None = None
        try:
            async with asyncio.timeout(timeout_s):
                kept = (
                    pool.take(key, lambda shown: _trusted(shown, pinned, expected))
                    if pool is not None and key is not None
                    else None
                )
                while True:
                    phase = "connect"
                    if kept is not None:
                        conn, key_text = kept
                    else:
                        async with asyncio.timeout(min(self.connect_timeout_s, timeout_s)):
                            conn = await asyncssh.connect(
                                target.address,
                                target.port,
                                **connect_options(target, check, client_keys, self.ssh_config),
                                # a kept connection: a dead peer is noticed while it waits
                                keepalive_interval=60 if key is not None else 0,
                            )
                        if pool is not None and key is not None:
                            pool.opened()
                        server_key = conn.get_server_host_key()
                        key_text = openssh_line(server_key) if server_key is not None else None
                    phase = "command"
                    try:
                        out, status, err = await self._exec(
                            conn, script, self.connect_timeout_s if kept is not None else None
                        )
                    except _Stale:
                        assert pool is not None
                        pool.dropped += 1
                        conn.abort()
                        conn, kept = None, None
                        continue  # connect again, once (a fresh connection is never stale)
                    break
                if pool is not None and key is not None:
                    pool.put(key, conn, key_text, self.idle_s)
                    conn = None  # kept: not closed below
        except TimeoutError:
            if phase == "connect" and self.connect_timeout_s < timeout_s:
                limit = self.connect_timeout_s
            else:
                limit = timeout_s
            what = "connecting" if phase == "connect" else "command still running"
            return result(
                Outcome.TIMEOUT, f"no answer within {limit:.0f} s ({what})", host_key=key_text
            )
        except _TooLarge:
            return result(
                Outcome.BAD_OUTPUT,
                f"output exceeds {size_text(self.max_output_bytes)}",
                host_key=key_text,
            )
        except asyncssh.HostKeyNotVerifiable as exc:
            if check.pin is not None and check.offered is not None:
                kind = "expected" if expected is not None else "pinned"
                return result(
                    Outcome.HOST_KEY_CHANGED,
                    f"host key changed: {kind} {check.pin}, offered "
                    f"{check.offered.get_fingerprint('sha256')} "
                    f"({check.offered.get_algorithm()}); refusing to run",
                    host_key=openssh_line(check.offered),
                )
            return result(Outcome.ERROR, f"host key not verifiable: {exc.reason}")
        except asyncssh.KeyExchangeFailed as exc:
            if check.pin is not None:
                what = f" ({pinned.algorithm.decode()})" if pinned is not None else ""
                return result(
                    Outcome.HOST_KEY_CHANGED,
                    f"host key changed: pinned {check.pin}{what} not offered any more "
                    f"({exc.reason}); refusing to run",
                )
            return result(Outcome.UNREACHABLE, f"{where}: key exchange failed: {exc.reason}")
        except asyncssh.PermissionDenied:
            return result(
                Outcome.AUTH_FAILED,
                f"{who}: Permission denied ({','.join(methods)})",
                host_key=key_text or _offered(check),
            )
        except asyncssh.DisconnectError as exc:
            if phase == "connect":
                return result(
                    Outcome.UNREACHABLE,
                    f"{where}: closed by server: {exc.reason}",
                    host_key=_offered(check),
                )
            return result(
                Outcome.ERROR,
                f"connection lost while the script ran: {exc.reason}",
                host_key=key_text,
            )
        except asyncssh.ChannelOpenError as exc:
            return result(Outcome.ERROR, f"{who}: session refused: {exc.reason}", host_key=key_text)
        except asyncssh.ConfigParseError as exc:
            return result(Outcome.ERROR, f"OpenSSH client config: {exc}")
        except socket.gaierror as exc:
            return result(Outcome.UNREACHABLE, f"cannot resolve {target.address}: {exc.strerror}")
        except OSError as exc:
            text = _ERRNO_TEXT.get(exc.errno or 0) or exc.strerror or str(exc)
            if phase == "connect":
                return result(Outcome.UNREACHABLE, f"connect to {where}: {text}")
            return result(Outcome.ERROR, f"{where}: {text} while the script ran", host_key=key_text)
        finally:
            if conn is not None:
                conn.abort()  # nothing left to say; never wait on a wedged peer
        return result(
            Outcome.OK,
            exit_note(status, err),
            output=out.decode("utf-8", errors="replace"),
            host_key=key_text,
        )

    async def _exec(
        self, conn: asyncssh.SSHClientConnection, script: str, kept_s: float | None = None
    ) -> tuple[bytes, int | None, bytes]:
        """Run ``script`` over ``conn``. ``kept_s``: ``conn`` was kept from an earlier command;
        a session it cannot open within that many seconds (the peer is gone, the server
        closed it) raises :class:`_Stale`, before anything was sent."""
        if kept_s is None:
            proc = await conn.create_process(SH_COMMAND, encoding=None)
        else:
            try:
                async with asyncio.timeout(kept_s):
                    proc = await conn.create_process(SH_COMMAND, encoding=None)
            except (TimeoutError, asyncssh.Error, OSError, EOFError) as exc:
                raise _Stale from exc
        proc.stdin.write(script.encode())
        proc.stdin.write_eof()

        async def out() -> bytes:
            chunks: list[bytes] = []
            size = 0
            while chunk := await proc.stdout.read(1 << 16):
                size += len(chunk)
                if size > self.max_output_bytes:
                    raise _TooLarge
                chunks.append(chunk)
            return b"".join(chunks)

        async def err() -> bytes:
            # Drained so stderr cannot stall the shared channel window; only the tail is kept.
            tail = b""
            while chunk := await proc.stderr.read(1 << 16):
                tail = (tail + chunk)[-4096:]
            return tail

        stdout, stderr = await asyncio.gather(out(), err())
        completed = await proc.wait(check=False)
        status: int | None = completed.exit_status
        return stdout, status, stderr


def _trusted(shown: str | None, pinned: asyncssh.SSHKey | None, expected: str | None) -> bool:
    """Whether a kept connection's host key (``shown``, verified when it was opened) passes
    the run's pin as :class:`_KeyCheck` would: the pinned key itself, the expected
    fingerprint, or anything on first use."""
    if expected is not None:
        return shown is not None and fingerprint(shown) == expected
    if pinned is not None:
        return shown is not None and shown == openssh_line(pinned)
    return True


def _offered(check: _KeyCheck) -> str | None:
    with contextlib.suppress(Exception):
        if check.offered is not None:
            return openssh_line(check.offered)
    return None
