"""Real sshd "hosts" on loopback that answer the real collection script with chosen sections.

A test helper, not product code (it installs openssh-server with apt and creates a login user):
tests use it through the fixtures of tests/sshlab_fixtures.py; ``make bench`` imports it too.

Each lab host is one ``/usr/sbin/sshd`` listening on ``127.0.0.1:<port>`` with its own host key,
``authorized_keys`` and ``sshd_config``. ``SetEnv`` gives the session a private ``PATH`` and
``GPUFLEET_SYSROOT`` so that :func:`gpufleet.collect.script.remote_script`, run unchanged, finds
per-host fake tools and files that reproduce the sections the caller asked for.

Layout of one host directory (see :func:`materialize_host`)::

    bin/      fake tools: tiny sh scripts that cat data/ (only tools with a section exist)
    base/     symlinks to the few real utilities the script itself needs (sh, cat, grep ...);
              /usr/bin is NOT on PATH, so a tool without a section is truly absent (rc 127)
              even on a machine that has a real lspci, dmesg or nvidia-smi
    data/     <section>.out / .err / .rc served by the fake tools
    sysroot/  etc/os-release, proc/{meminfo,modules}, proc/sys/kernel/{hostname,osrelease},
              sys/class/dmi/id/* (a dmi file whose served value is empty is not written)
    run/      calls.log (one line per fake tool call), hang.pids; owned by the lab user

Round trip: a fake tool prints the section stdout plus one newline (as real tools do), so
``split_bundle`` of the script output gives back exactly the section's stdout, stderr and rc.
Limits, all from the script itself: file-backed sections (hostname, uname-r, os-release, meminfo,
modules) come back with rc != 0 meaning "file missing" (rc 1, "cannot read PATH"); ``dmi``
and ``kernel-xid`` always have rc 0 and no stderr; ``kernel-xid`` keeps only lines with
``NVRM: Xid``; ``nvidia-smi-q`` is empty when ``nvidia-smi-xml`` has rc 0; stderr is cut at
2 KiB; ``fabricmanager`` is served by ``systemctl is-active`` (rc 0 when "active", else 3).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import asyncssh

from gpufleet.collect.bundle import Section
from gpufleet.collect.sections import RECLAIM_REGISTRY, REGISTRY, SectionSpec, names
from gpufleet.collect.transport import Target

SSHD = "/usr/sbin/sshd"
PORT_LOCK = Path("/tmp/gpufleet-sshlab.ports.lock")
LAB_HOME = Path("/var/lib/gpufleetlab")
MODES = ("ok", "stopped", "hang", "wrong-key")
#: Real utilities the remote script (and the fake tools) need; everything else comes from bin/.
BASE_TOOLS = (
    "sh",
    "cat",
    "head",
    "tail",
    "grep",
    "mktemp",
    "mkdir",
    "rm",
    "timeout",
    "pgrep",
    "sleep",
    "printf",
    "echo",
    "stat",  # the inspection probe: when the nvidia module was loaded (issue 10)
    "date",
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# Hang mode: sessions that never answer. The pid is recorded so stop() can end them.
_HANG_COMMAND = f"{shutil.which('tail') or '/usr/bin/tail'} -f /dev/null"

#: Tools whose fake needs more than "serve the recorded output" (section -> body builder below);
#: every other registry entry is served generically from what it declares (files or tool).
_SPECIAL = ("kernel-xid", "fabricmanager")
#: The tool a lab host with variants switches its simulated software with (see add_variant).
SWITCH_TOOL = "gpufleet-lab-switch"


def served_by(spec: SectionSpec) -> str:
    """How a lab host serves a registry entry: ``file:PATH[,PATH]`` or ``tool:NAME [ARGS]``.

    Derived from the entry (its ``files``, else its ``tool``); an entry declaring neither
    cannot be served, which is an error here rather than a section silently missing.
    """
    if spec.files:
        return "file:" + ",".join(spec.files)
    if spec.tool:
        return f"tool:{spec.tool} {spec.args}".rstrip()
    raise ValueError(f"section {spec.name} declares no file or tool a lab host could serve")


class LabError(RuntimeError):
    """The ssh lab could not be set up or started (the message says what to fix)."""


# --------------------------------------------------------------------------- fake tools


def _emitted(text: str) -> str:
    # Real tools end their output with a newline; the script's framing strips exactly one.
    return text + "\n" if text else ""


def _write(path: Path, content: str, mode: int = 0o644) -> None:
    """Atomic write (a collection running during set_sections sees old or new, never half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(content, encoding="utf-8", newline="")
    tmp.chmod(mode)
    tmp.replace(path)


def _sq(text: str) -> str:
    """Single-quote for sh."""
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _tool_script(body: str, log: Path) -> str:
    cat = _real("cat")
    return (
        "#!/bin/sh\n"
        "# gpufleet ssh lab fake tool: serves recorded output from data/.\n"
        f'echo "${{0##*/}}${{*:+ $*}}" >>{_sq(str(log))} 2>/dev/null\n'
        # Builtins where possible and exec for the common case (rc 0): a fake tool should cost
        # about what the real one does, one process, or the lab inflates per-tool overhead.
        f'serve() {{ [ -s "$1.err" ] && {cat} "$1.err" >&2; read -r rc < "$1.rc"; '
        f'[ "$rc" = 0 ] && exec {cat} "$1.out"; {cat} "$1.out"; exit "$rc"; }}\n'
        f"{body}\n"
    )


def _real(tool: str) -> str:
    path = shutil.which(tool, path="/usr/bin:/bin:/usr/sbin:/sbin")
    if path is None:
        raise LabError(f"the lab needs '{tool}' on this machine")
    return path


def _special_tool(name: str, sections: Mapping[str, Section], data: Callable[[str], str]) -> str:
    """Fake tools that are not "print the recorded output" (see :data:`_SPECIAL`)."""
    if name == "kernel-xid":
        # The script greps dmesg for Xid lines; dmesg itself succeeds.
        return f"{_real('cat')} {data('kernel-xid.out')}\nexit 0"
    if name == "fabricmanager":
        state = sections["fabricmanager"].stdout.strip() or "inactive"
        # Behaves like systemctl: prints the state (unless --quiet), rc 0 only when active.
        return (
            'q=; [ "$1" = "--quiet" ] && { q=1; shift; }\n'
            'if [ "$1" = "is-active" ] && [ "$2" = "nvidia-fabricmanager" ]; then\n'
            f'  [ -n "$q" ] || echo {_sq(state)}\n'
            f"  exit {0 if state == 'active' else 3}\n"
            "fi\n"
            # remediation (issue 10): daemons stopped/started, reboot accepted (sshd stays up);
            # issue 24: a unit restarted, and then active
            'case "$1" in stop|start|reboot|restart) exit 0 ;;\n'
            '  is-active) echo active; exit 0 ;; esac\n'
            'echo "systemctl (gpufleet lab): unsupported: $*" >&2; exit 1'
        )
    raise LabError(f"no special fake tool for section {name}")


def _remedy_cases(remedy: Path) -> str:
    """nvidia-smi arguments of ``gpufleet remediate``, served from ``remedy/`` (see
    :meth:`SshLab.set_remediation`): compute apps (none by default), the reset (succeeds by
    default) and the verification query (the GPUs of ``remedy/verify``, else one A10G)."""
    cat = _real("cat")
    r = _sq(str(remedy))
    return (
        f"  --query-compute-apps=*) [ -f {r}/apps ] && {cat} {r}/apps; exit 0 ;;\n"
        f'  "-r"|"-r -i "*) if [ -f {r}/reset.rc ]; then {cat} {r}/reset.out; '
        f'read -r rc < {r}/reset.rc; exit "$rc"; fi; '
        'echo "GPU 00000000:00:1E.0 was successfully reset."; exit 0 ;;\n'
        f"  --query-gpu=index,pci.bus_id,uuid,name*) if [ -f {r}/verify ]; then "
        f"{cat} {r}/verify; else "
        'echo "0, 00000000:00:1E.0, GPU-a10g, NVIDIA A10G"; fi; exit 0 ;;\n'
    )


def _remedy_tools(remedy: Path) -> dict[str, str]:
    """fuser (the pids of ``remedy/fuser``; rc 1 when none, as the real one) and
    nvidia-bug-report.sh (writes a small file where asked)."""
    cat = _real("cat")
    r = _sq(str(remedy))
    return {
        "fuser": f"[ -s {r}/fuser ] || exit 1\n{cat} {r}/fuser; exit 0",
        "nvidia-bug-report.sh": (
            'f=nvidia-bug-report.log; [ "$1" = "--output-file" ] && f="$2"\n'
            'echo "gpufleet lab bug report" > "$f.gz" 2>/dev/null; exit 0'
        ),
    }


def materialize_host(
    host_dir: Path,
    sections: Mapping[str, Section],
    registry: Sequence[SectionSpec] = REGISTRY + RECLAIM_REGISTRY,
) -> dict[str, str]:
    """Write fake tools, data and sysroot files serving ``sections``; return the environment.

    The returned ``PATH`` and ``GPUFLEET_SYSROOT`` make the real remote script reproduce the
    sections (see the module docstring for the few limits). Calling it again replaces what a
    host serves; tools whose section disappeared are removed.
    """
    known = names(registry)
    unknown = sorted(set(sections) - set(known))
    if unknown:
        raise LabError(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(known)}")
    for name, sec in sections.items():
        if not 0 <= sec.rc <= 255:
            raise LabError(f"section '{name}': rc {sec.rc} is not an exit status (0..255)")
    host_dir = host_dir.resolve()
    bin_dir, base_dir, data_dir = host_dir / "bin", host_dir / "base", host_dir / "data"
    sysroot, run_dir = host_dir / "sysroot", host_dir / "run"
    for d in (host_dir, bin_dir, base_dir, data_dir, sysroot, run_dir):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)
    for tool in BASE_TOOLS:
        link = base_dir / tool
        if not link.is_symlink():
            link.symlink_to(_real(tool))
    log = run_dir / "calls.log"

    # Data files first, so a tool never appears before what it serves.
    for old in data_dir.iterdir():
        if old.name.split(".")[0] not in sections:
            old.unlink()
    for name, sec in sections.items():
        _write(data_dir / f"{name}.out", _emitted(sec.stdout))
        _write(data_dir / f"{name}.err", _emitted(sec.stderr))
        _write(data_dir / f"{name}.rc", f"{sec.rc}\n")

    def data(name: str) -> str:
        return _sq(str(data_dir / name))

    tools: dict[str, str] = {}
    by_tool: dict[str, list[SectionSpec]] = {}
    for spec in registry:
        served_by(spec)  # every entry is servable
        if spec.tool and not spec.files:
            by_tool.setdefault(spec.tool, []).append(spec)
    for tool, specs in by_tool.items():
        # A tool exists when its first section is served (no XML section: no nvidia-smi).
        if specs[0].name not in sections:
            continue
        if specs[0].name in _SPECIAL:
            tools[tool] = _special_tool(specs[0].name, sections, data)
        elif len(specs) == 1:
            tools[tool] = f"serve {data(specs[0].name)}"
        else:  # one tool, several sections told apart by their arguments (nvidia-smi)
            cases = "".join(f"  {_sq(sp.args)}) s={_sq(sp.name)} ;;\n" for sp in specs)
            if tool == "nvidia-smi":  # remediation (issue 10): holders, reset, verification
                cases += _remedy_cases(host_dir / "remedy")
            tools[tool] = (
                f'case "$*" in\n{cases}'
                f'  *) echo "{tool} (gpufleet lab): unsupported arguments: $*" >&2; exit 2 ;;\n'
                "esac\n"
                f'd={_sq(str(data_dir))}/"$s"\n'
                f'[ -f "$d.rc" ] || {{ echo "{tool} (gpufleet lab): nothing recorded for $*" >&2; '
                "exit 2; }\n"
                'serve "$d"'
            )
    if "nvidia-smi" in tools:  # remediation (issue 10): who has /dev/nvidia* open, bug report
        tools.update(_remedy_tools(host_dir / "remedy"))
    for old in bin_dir.iterdir():
        if old.name not in tools and old.name != SWITCH_TOOL:
            old.unlink()
    for tool, body in tools.items():
        _write(bin_dir / tool, _tool_script(body, log), 0o755)

    for spec in registry:
        served = sections.get(spec.name)
        if len(spec.files) == 1:
            texts = [_emitted(served.stdout)] if served is not None and served.rc == 0 else [""]
        else:  # dmi: one "name=value" line per file (name: the file's base name)
            pairs = dict(
                line.partition("=")[::2]
                for line in (served.stdout if served is not None and served.rc == 0 else "")
                .splitlines()
                if "=" in line
            )
            texts = [
                pairs[base] + "\n" if (base := rel.rsplit("/", 1)[-1]) in pairs else ""
                for rel in spec.files
            ]
        for rel, text in zip(spec.files, texts + [""] * len(spec.files), strict=False):
            path = sysroot / rel
            if text:
                _write(path, text)
            else:
                path.unlink(missing_ok=True)
    for d in (sysroot, *sysroot.rglob("*")):
        if d.is_dir():
            d.chmod(0o755)
    return {"PATH": f"{bin_dir}:{base_dir}", "GPUFLEET_SYSROOT": str(sysroot)}


# --------------------------------------------------------------------------- host setup


def ensure_openssh_server() -> None:
    """Install openssh-server with apt when ``/usr/sbin/sshd`` is missing; create /run/sshd."""
    if not Path(SSHD).exists():
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        cmd = ["apt-get", "install", "-y", "-qq", "openssh-server"]
        if subprocess.run(cmd, env=env, capture_output=True, check=False).returncode != 0:
            # The package lists may be missing on a fresh image.
            subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, check=False)
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if res.returncode != 0:
                raise LabError(f"cannot install openssh-server: {res.stderr.strip()[-400:]}")
    # Privilege-separation directory; nothing creates it without systemd.
    Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)


def ensure_lab_user(user: str) -> pwd.struct_passwd:
    """Create the dedicated login user once: shell /bin/sh, no dotfiles, unlocked (``*``)."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        res = subprocess.run(
            [
                "useradd",
                "-M",
                "-r",
                "-d",
                str(LAB_HOME),
                "-s",
                "/bin/sh",
                "-c",
                "gpufleet ssh lab",
                user,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        # rc 9: created meanwhile by a parallel test worker.
        if res.returncode not in (0, 9):
            raise LabError(f"useradd {user} failed: {res.stderr.strip()}") from None
        entry = pwd.getpwnam(user)
    home = Path(entry.pw_dir)
    if not home.is_dir():
        home.mkdir(mode=0o755, parents=True, exist_ok=True)
        os.chown(home, entry.pw_uid, entry.pw_gid)
    # useradd leaves the account locked ("!"); with UsePAM no sshd then refuses it.
    if _shadow_password(user).startswith("!"):
        for _ in range(20):  # usermod fails while another process holds the shadow lock
            if (
                subprocess.run(
                    ["usermod", "-p", "*", user], capture_output=True, check=False
                ).returncode
                == 0
            ):
                break
            time.sleep(0.1)
        else:
            raise LabError(f"cannot unlock user {user} (usermod -p '*')")
    return entry


#: The lab user's login password, set (chpasswd) when a host is added with ``password_auth``.
#: One fixed value: the lab user is shared by parallel labs, which must not overwrite each
#: other's. Only hosts added with ``password_auth`` accept passwords (127.0.0.1 only).
LAB_PASSWORD = "gpufleet-lab-Pw-1"


def set_lab_password(user: str, password: str = LAB_PASSWORD) -> None:
    """Give the lab ``user`` the login ``password`` (``chpasswd``; retried on the shadow lock)."""
    for _ in range(20):
        res = subprocess.run(
            ["chpasswd"], input=f"{user}:{password}\n", text=True, capture_output=True, check=False
        )
        if res.returncode == 0:
            return
        time.sleep(0.1)
    raise LabError(f"cannot set the password of {user} (chpasswd): {res.stderr.strip()}")


def _shadow_password(user: str) -> str:
    with contextlib.suppress(OSError):
        for line in Path("/etc/shadow").read_text().splitlines():
            parts = line.split(":")
            if parts[0] == user and len(parts) > 1:
                return parts[1]
    return ""


def _check_reachable(path: Path, uid: int) -> None:
    """The lab user must traverse every directory above the host files (no 0700 parents)."""
    for d in [path, *path.parents]:
        st = d.stat()
        if not st.st_mode & stat.S_IXOTH and st.st_uid != uid:
            raise LabError(
                f"{d} (mode {stat.S_IMODE(st.st_mode):o}) hides the lab from its login user; "
                "use a lab root whose parents are all world-searchable, e.g. under /tmp "
                "(not pytest's /tmp/pytest-of-root, which is 0700)"
            )


def _write_key(path: Path, alg: str = "ssh-ed25519") -> str:
    """A new private key (``alg``: ed25519 unless told) at ``path`` (0600); returns the
    OpenSSH public key line."""
    key = asyncssh.generate_private_key(alg)
    path.unlink(missing_ok=True)
    path.touch(mode=0o600)
    path.write_bytes(key.export_private_key("openssh"))
    path.chmod(0o600)
    public = key.export_public_key("openssh").decode().strip()
    _write(path.with_name(path.name + ".pub"), public + "\n")
    return public


@contextlib.contextmanager
def _port_lock() -> Iterator[None]:
    """Machine-wide lock over lab port hand-overs.

    Between closing a reservation and sshd binding, a port looks free; labs in parallel test
    workers pick ports and start sshd only under this lock, so none sees that gap.
    """
    with open(PORT_LOCK, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _reserve_port(first: int, taken: set[int]) -> tuple[int, socket.socket]:
    """Bind (without listening) the first free loopback port from ``first``.

    Holding the bound socket keeps other labs (parallel workers) off the port until sshd takes
    it, and a bound-but-not-listening port refuses connections: exactly a stopped host.
    """
    port = first
    while port < 65535:
        if port not in taken:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
            else:
                return port, s
        port += 1
    raise LabError(f"no free loopback port from {first}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is as good as gone.
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0] != "Z"
    return True


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def _descendants(pid: int) -> list[int]:
    """Children, grandchildren ... of ``pid`` (per-connection sshd processes and sessions)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _kill_and_wait(pids: list[int], timeout_s: float = 10.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while any(_pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in pids:
        if _pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- the lab


@dataclass
class _Host:
    name: str
    dir: Path
    port: int
    mode: str
    reservation: socket.socket | None
    host_key: str = ""
    password_auth: bool = False
    proc: subprocess.Popen[bytes] | None = None  # sshd -D, our child: we reap it (no zombie)

    @property
    def config(self) -> Path:
        return self.dir / "sshd_config"

    @property
    def pid_file(self) -> Path:
        return self.dir / "sshd.pid"


class SshLab:
    """A set of real sshd hosts on 127.0.0.1, one port each, serving chosen sections.

    ``root`` and all its parents must be searchable by the lab user (anything under /tmp is).
    Modes: ``ok``; ``stopped`` (the port is held but nothing listens: connection refused);
    ``hang`` (a ForceCommand that never answers: command timeout); ``wrong-key`` (the client
    key is not authorised: auth failed). Ports come from ``first_port`` upwards, skipping
    ports in use; parallel labs (pytest-xdist workers) coordinate through a lock file.
    """

    def __init__(self, root: Path, *, user: str = "gpufleetlab", first_port: int = 22000) -> None:
        ensure_openssh_server()
        self.root = root.resolve()
        self.user = user
        self.first_port = first_port
        self._pw = ensure_lab_user(user)
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        _check_reachable(self.root, self._pw.pw_uid)
        (self.root / "hosts").mkdir(mode=0o755, exist_ok=True)
        self.client_key = self.root / "client_key"
        self._client_pub = _write_key(self.client_key)
        # wrong-key hosts authorise this key instead, so the collector's key is refused.
        self._other_pub = _write_key(self.root / "other_key")
        self._hosts: dict[str, _Host] = {}
        atexit.register(self.stop)

    # -- building -------------------------------------------------------------------------

    def add_host(
        self,
        name: str,
        sections: Mapping[str, Section],
        *,
        mode: str = "ok",
        password_auth: bool = False,
    ) -> Target:
        """Add a host serving ``sections``; returns its target (start() makes it answer).

        ``password_auth``: the host also accepts the lab user's password (:data:`LAB_PASSWORD`,
        set with chpasswd) and logs each login (``Accepted password|publickey``, see
        :meth:`sshd_log`)."""
        if not _NAME.match(name):
            raise LabError(f"bad lab host name {name!r}")
        if name in self._hosts:
            raise LabError(f"lab host {name} exists")
        if mode not in MODES:
            raise LabError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
        d = self.root / "hosts" / name
        env = materialize_host(d, sections)
        os.chown(d / "run", self._pw.pw_uid, self._pw.pw_gid)
        with _port_lock():
            port, reservation = _reserve_port(
                self.first_port, {h.port for h in self._hosts.values()}
            )
        host = _Host(name, d, port, mode, reservation, password_auth=password_auth)
        if password_auth:
            set_lab_password(self.user)
        host.host_key = _write_key(d / "ssh_host_ed25519_key")
        _write(
            d / "authorized_keys",
            (self._other_pub if mode == "wrong-key" else self._client_pub) + "\n",
        )
        _write(host.config, self._sshd_config(host, env))
        self._hosts[name] = host
        return self._target(host)

    def _sshd_config(self, h: _Host, env: Mapping[str, str]) -> str:
        if self.user == "root":  # a root lab configures the machine (the init role's lab):
            # the system's tools after the fake ones
            env = {**env, "PATH": f"{env['PATH']}:/usr/sbin:/usr/bin:/sbin:/bin"}
        lines = [
            f"ListenAddress 127.0.0.1:{h.port}",
            "AddressFamily inet",
            f"HostKey {h.dir}/ssh_host_ed25519_key",
            f"PidFile {h.pid_file}",
            f"AuthorizedKeysFile {h.dir}/authorized_keys",
            "AuthenticationMethods " + ("any" if h.password_auth else "publickey"),
            "PubkeyAuthentication yes",
            "PasswordAuthentication " + ("yes" if h.password_auth else "no"),
            "KbdInteractiveAuthentication no",
            # A root lab (the init role's accounts are the system's own): keys only.
            "PermitRootLogin " + ("prohibit-password" if self.user == "root" else "no"),
            f"AllowUsers {self.user}",
            "UsePAM no",
            # The lab root lives in world-writable /tmp, which StrictModes would refuse.
            "StrictModes no",
            "PermitUserEnvironment no",
            # SetEnv overrides PATH, which is what points the script at the fake tools.
            "SetEnv " + " ".join(f'"{k}={v}"' for k, v in env.items()),
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "X11Forwarding no",
            "AllowTcpForwarding no",
            "AllowAgentForwarding no",
            "MaxStartups 100:30:200",
            "LoginGraceTime 60",
            # INFO logs "Accepted password|publickey for ...": which method logged in.
            "LogLevel " + ("INFO" if h.password_auth else "ERROR"),
        ]
        if self.user == "root":  # Ansible copies files over sftp (the lab PATH has no dd)
            lines.append("Subsystem sftp internal-sftp")
        if h.mode == "hang":
            # tail --pid ends by itself once the session's sshd is gone (client gave up).
            lines.append(
                f"ForceCommand echo $$ >>{h.dir}/run/hang.pids; exec {_HANG_COMMAND} --pid=$PPID"
            )
        return "\n".join(lines) + "\n"

    def _target(self, h: _Host) -> Target:
        return Target(h.name, "127.0.0.1", h.port, user=self.user, key_file=str(self.client_key))

    # -- running --------------------------------------------------------------------------

    def start(self) -> None:
        """Start every sshd not yet running (except stopped hosts); wait until each accepts."""
        self._start([h for h in self._hosts.values() if h.mode != "stopped" and h.proc is None])

    def _start(self, hosts: list[_Host]) -> None:
        with _port_lock():
            self._start_locked(hosts)

    def _start_locked(self, hosts: list[_Host], timeout_s: float = 60.0) -> None:
        for h in hosts:  # launch all first: they get ready in parallel
            self._launch(h)
        for h in hosts:
            self._wait_ready(h, timeout_s)

    def _launch(self, h: _Host) -> None:
        # The reservation goes just before sshd binds; a restarted host has none.
        if h.reservation is not None:
            h.reservation.close()
            h.reservation = None
        h.pid_file.unlink(missing_ok=True)
        # -D: stay our child so stop() reaps it; -f must be absolute because sshd re-executes
        # itself after chdir("/") for every connection.
        h.proc = subprocess.Popen(
            [SSHD, "-D", "-f", str(h.config), "-E", str(h.dir / "sshd.log")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # a Ctrl-C meant for the tests does not hit the hosts

    def _wait_ready(self, h: _Host, timeout_s: float) -> None:
        # The pid file is written after listen(); poll for it and for a TCP accept.
        assert h.proc is not None
        deadline = time.monotonic() + timeout_s
        while True:
            if h.proc.poll() is not None:
                rc = h.proc.returncode
                h.proc = None
                raise LabError(
                    f"{h.name}: sshd on 127.0.0.1:{h.port} exited {rc}: "
                    f"{self._log_tail(h) or '(no log)'}"
                )
            if h.pid_file.exists():
                try:
                    with socket.create_connection(("127.0.0.1", h.port), timeout=2.0):
                        return
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise LabError(
                    f"{h.name}: sshd on 127.0.0.1:{h.port} not ready after "
                    f"{timeout_s:.0f} s; log: {self._log_tail(h) or '(empty)'}"
                )
            time.sleep(0.02)

    def _log_tail(self, h: _Host) -> str:
        try:
            return (h.dir / "sshd.log").read_text(errors="replace")[-400:].strip()
        except OSError:
            return ""

    def _stop_host(self, h: _Host) -> None:
        if h.proc is not None:
            # Connections first, while the listener is alive to reap them; then the listener.
            _kill_and_wait(_descendants(h.proc.pid))
            h.proc.terminate()
            try:
                h.proc.wait(10)
            except subprocess.TimeoutExpired:
                h.proc.kill()
                h.proc.wait()
            h.proc = None
        hang_pids = h.dir / "run" / "hang.pids"
        with contextlib.suppress(OSError):
            # Orphaned hang sessions (their sshd already left); only if still ours.
            _kill_and_wait(
                [
                    int(p)
                    for p in hang_pids.read_text().split()
                    if p.isdigit() and _cmdline(int(p)).startswith(_HANG_COMMAND)
                ]
            )
            hang_pids.unlink()
        h.pid_file.unlink(missing_ok=True)

    def stop(self) -> None:
        """Stop every sshd (and sessions it left behind); safe to call repeatedly."""
        for h in self._hosts.values():
            self._stop_host(h)
            if h.reservation is not None:
                h.reservation.close()
                h.reservation = None

    def stop_host(self, name: str) -> None:
        """Stop one host's sshd (and its sessions): its port stays held (bound, not
        listening: connections are refused, no other lab takes it) until :meth:`start_host`."""
        h = self._host(name)
        with _port_lock():
            self._stop_host(h)
            if h.reservation is None:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", h.port))
                h.reservation = sock

    def start_host(self, name: str) -> None:
        """Start a stopped host's sshd again: same port, same host key, same sections."""
        h = self._host(name)
        if h.proc is None:
            self._start([h])

    def __enter__(self) -> SshLab:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- changing hosts -------------------------------------------------------------------

    def set_sections(self, name: str, sections: Mapping[str, Section]) -> None:
        """Change what a host answers from the next collection on (no restart)."""
        h = self._host(name)
        materialize_host(h.dir, sections)
        if (h.dir / "variants").is_dir():
            self._switchable(h)  # the host keeps switching by itself (add_variant)

    def _switchable(self, h: _Host) -> None:
        """Let the lab user rewrite what the host serves (data and sysroot files)."""
        for top in (h.dir / "data", h.dir / "sysroot"):
            for p in (top, *top.rglob("*")):
                os.chown(p, self._pw.pw_uid, self._pw.pw_gid)

    def add_variant(self, name: str, variant: str, sections: Mapping[str, Section]) -> None:
        """Give a host a second set of sections it can switch to *by itself*: the tool
        ``gpufleet-lab-switch VARIANT`` (on the host's PATH, run over SSH by a playbook as the
        lab user) copies the variant's data and sysroot files over what the host serves, so
        the next collection sees it (a simulated driver install). Each switch is logged in
        ``calls.log`` like every fake tool call (:meth:`calls`). The variant must use the
        same tools as the host (only the recorded output changes)."""
        h = self._host(name)
        if not _NAME.match(variant):
            raise LabError(f"bad variant name {variant!r}")
        vdir = h.dir / "variants" / variant
        materialize_host(vdir, sections)
        ours = sorted(p.name for p in (h.dir / "bin").iterdir() if p.name != SWITCH_TOOL)
        theirs = sorted(p.name for p in (vdir / "bin").iterdir())
        if ours != theirs:
            raise LabError(f"{name}: variant {variant} needs tools {theirs}, the host has {ours}")
        self._switchable(h)
        names = sorted(d.name for d in (h.dir / "variants").iterdir() if d.is_dir())
        cp = _real("cp")
        body = (
            'case "$1" in\n'
            + "".join(f"  {_sq(v)}) ;;\n" for v in names)
            + '  *) echo "gpufleet-lab-switch: unknown variant: $1" >&2; exit 2 ;;\n'
            "esac\n"
            f'v={_sq(str(h.dir / "variants"))}/"$1"\n'
            f'{cp} "$v"/data/* {_sq(str(h.dir / "data"))}/ || exit 1\n'
            f'{cp} -R "$v"/sysroot/. {_sq(str(h.dir / "sysroot"))}/ || exit 1\n'
            'echo "switched to $1"'
        )
        _write(h.dir / "bin" / SWITCH_TOOL, _tool_script(body, h.dir / "run" / "calls.log"), 0o755)

    def set_remediation(
        self,
        name: str,
        *,
        compute_apps: Sequence[str] = (),
        open_pids: Sequence[int] = (),
        reset_fails: str | None = None,
        verify: Sequence[str] | None = None,
    ) -> None:
        """What the host's GPUs look like to ``gpufleet remediate``: ``compute_apps`` lines
        (``pid, name, gpu_uuid``), pids with /dev/nvidia* open, a reset that fails with that
        message (rc 1), the verification's GPU lines (default: one A10G)."""
        remedy = self._host(name).dir / "remedy"
        remedy.mkdir(parents=True, exist_ok=True)
        remedy.chmod(0o755)
        _write(remedy / "apps", "".join(f"{line}\n" for line in compute_apps))
        _write(remedy / "fuser", " ".join(map(str, open_pids)) + ("\n" if open_pids else ""))
        if reset_fails is None:
            (remedy / "reset.rc").unlink(missing_ok=True)
            (remedy / "reset.out").unlink(missing_ok=True)
        else:
            _write(remedy / "reset.out", reset_fails + "\n")
            _write(remedy / "reset.rc", "1\n")
        if verify is None:
            (remedy / "verify").unlink(missing_ok=True)
        else:
            _write(remedy / "verify", "".join(f"{line}\n" for line in verify))

    def rotate_host_key(self, name: str, key_type: str = "ssh-ed25519") -> str:
        """Give a host a new host key and restart its sshd; returns the new public key.

        ``key_type`` (``ssh-rsa``, ``ecdsa-sha2-nistp256`` ...): the host then offers only a
        key of that type (the file keeps its name; sshd reads the type from the key)."""
        h = self._host(name)
        was_running = h.proc is not None
        h.host_key = _write_key(h.dir / "ssh_host_ed25519_key", key_type)
        if was_running:
            with _port_lock():  # keep the port ours while sshd restarts
                self._stop_host(h)
                self._start_locked([h])
        return h.host_key

    # -- looking ----------------------------------------------------------------------------

    def _host(self, name: str) -> _Host:
        try:
            return self._hosts[name]
        except KeyError:
            raise LabError(f"no lab host {name}") from None

    def targets(self) -> list[Target]:
        """Targets of every host, in the order they were added."""
        return [self._target(h) for h in self._hosts.values()]

    def host_public_key(self, name: str) -> str:
        """The host key the host presents now (OpenSSH ``ssh-ed25519 AAAA...``)."""
        return self._host(name).host_key

    def calls(self, name: str) -> list[str]:
        """Fake tool calls made on a host so far (``"nvidia-smi -q -x"``), oldest first."""
        try:
            return (self._host(name).dir / "run" / "calls.log").read_text().splitlines()
        except FileNotFoundError:
            return []

    def sshd_log(self, name: str) -> str:
        """The host's sshd log (logins only on ``password_auth`` hosts, else only errors)."""
        try:
            return (self._host(name).dir / "sshd.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def sshd_pids(self) -> list[int]:
        """Pids of this lab's running listener sshd processes (for leak checks)."""
        return [
            h.proc.pid for h in self._hosts.values() if h.proc is not None and h.proc.poll() is None
        ]
