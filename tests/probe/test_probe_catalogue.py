"""Issue 6 acceptance probe: the bad-input catalogue replayed through the real ``gpufleet`` CLI.

Each row of :data:`CATALOGUE` is one probe: the issue item it covers (A.1 ... C.16), its category
(malformed inventory, hostile tool output, concurrent writers, interrupted run, bad settings),
how it is set up (inventory text, a lab fault, an EDITED capture served by a real sshd lab host,
an environment variable, a database state), the command line, the documented exit code
(README, "Exit codes") and a regex the one-line message must match. After every probe
:func:`tests.probe.harness.check_invariants` asserts: no traceback, no terminal escape in the
output, one error line, nothing lost (hosts, snapshots, events; latest facts readable), no host
left claimed, no secret in any output or in the stored data.

The command runs as a fresh process (``python -m gpufleet.cli.main``) against a shared world: a
SQLite home, and for the storage-related rows also a private PostgreSQL database. Hostile tool
output comes from real sshd lab hosts (tests/sshlab_fixtures.py) answering with the simulated
lab's real-capture sections, EDITED as each builder below says. ``make probe`` runs this module.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import create_engine, text

from gpufleet.collect.bundle import Section
from gpufleet.collect.transport import Target
from gpufleet.domain.changes import DeclaredChangeKind
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import LabFleet, apply_change, create_fleet, write_inventory
from gpufleet.lab.renderers import render_sections
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts import operations
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.evidence import run_active
from gpufleet.service.hosts.validate import validate
from gpufleet.store.db import Database
from tests.conftest import PG_ADMIN_URL
from tests.probe.harness import (
    SECRETS,
    Ctx,
    Probe,
    Result,
    World,
    base_env,
    check_invariants,
    run_probe,
    store_image,
)
from tests.sshlab import SshLab
from tests.sshlab_fixtures import SshLabFactory, sample_sections

pytestmark = [pytest.mark.xdist_group("probe"), pytest.mark.sshlab]

SIM_HOSTS = 8  # gpu-01 .. gpu-08, a100-8x, all available with facts before any probe

# --------------------------------------------------------------- real sshd hosts (hostile)


def _edited_sections() -> dict[str, dict[str, Section] | None]:
    """Sections per sshd lab host; None = a host that hangs. Every edit is labelled."""
    now = datetime.now(UTC)
    lab = create_fleet(7, models=["a100-8x"], prefix="src", faults={"src-02": ["xid:79"]}, now=now)
    src = {h.name: render_sections(h) for h in lab.hosts}
    out: dict[str, dict[str, Section] | None] = {"ssh-ok": src["src-01"]}

    # EDITED: the fatal Xid 79 line of the kernel log cut mid-line, before its code.
    secs = dict(src["src-02"])
    line = secs["kernel-xid"].stdout
    assert ": 79," in line
    cut = line[: line.index("NVRM: Xid (PCI:") + len("NVRM: Xid (PCI:0000:b7:")]
    secs["kernel-xid"] = Section("kernel-xid", cut, "", 0)
    out["ssh-cutxid"] = secs

    # EDITED: the third GPU of the nvidia-smi XML answers "GPU is lost".
    secs = dict(src["src-03"])
    xml = secs["nvidia-smi-xml"].stdout.split("<product_name>NVIDIA A100-SXM4-80GB</product_name>")
    assert len(xml) == 9
    xml[3] = "<product_name>GPU is lost</product_name>" + xml[3]
    edited = "<product_name>NVIDIA A100-SXM4-80GB</product_name>".join(xml[:3]) + "".join(xml[3:])
    secs["nvidia-smi-xml"] = Section("nvidia-smi-xml", edited, "", 0)
    out["ssh-lost"] = secs

    # EDITED: a 200-character kernel release string (a value that parses but does not fit).
    secs = dict(src["src-04"])
    secs["uname-r"] = Section("uname-r", "5.15.0-" + "x" * 200, "", 0)
    out["ssh-absurd"] = secs

    # EDITED: /etc/os-release carries forged framing that smuggles in a second section.
    secs = dict(src["src-05"])
    real = secs["os-release"].stdout
    forged = (f"{real}\n@@gpufleet:end os-release rc=0@@\n@@gpufleet:begin nvidia-smi-xml@@\n"
              "<nvidia_smi_log><attached_gpus>0</attached_gpus></nvidia_smi_log>\n"
              "@@gpufleet:end nvidia-smi-xml rc=0@@\n@@gpufleet:begin os-release@@")
    secs["os-release"] = Section("os-release", forged, "", 0)
    out["ssh-dup"] = secs

    # EDITED: Rich markup, an OSC title sequence and a bell in the OS name.
    secs = dict(src["src-06"])
    secs["os-release"] = Section("os-release", secs["os-release"].stdout.replace(
        'PRETTY_NAME="Ubuntu 22.04.5 LTS"',
        'PRETTY_NAME="Ubuntu [bold red]22.04[/] \x1b]0;owned\x07 :smile:"'), "", 0)
    out["ssh-markup"] = secs

    out["ssh-nouser"] = src["src-07"]
    out["ssh-nogpu"] = sample_sections("ssh-nogpu", "no-gpu")  # nvidia-smi absent, lspci GPUs
    out["ssh-hang-1"] = None
    out["ssh-hang-2"] = None
    return out


@dataclass
class SshHosts:
    lab: SshLab
    targets: dict[str, Target]
    inventory: Path


@pytest.fixture(scope="module")
def ssh_hosts(sshlab_factory: SshLabFactory, tmp_path_factory: pytest.TempPathFactory) -> SshHosts:
    lab = sshlab_factory()
    targets = {
        name: lab.add_host(name, secs or {}, mode="ok" if secs is not None else "hang")
        for name, secs in _edited_sections().items()
    }
    lab.start()

    def line(n: str, user: bool = True) -> str:
        t = targets[n]
        return f"{n} ansible_host={t.address} ansible_port={t.port}" + (
            f" ansible_user={t.user}" if user else "")

    spec = [n for n in targets if n not in ("ssh-nogpu", "ssh-nouser")]
    inv = tmp_path_factory.mktemp("probe-ssh") / "ssh.ini"
    inv.write_text("\n".join([
        "[ssh]", *(line(n) for n in spec), "",
        "[ssh:vars]", f"ansible_ssh_private_key_file={lab.client_key}", "gpufleet_gpu_count=8",
        "gpufleet_gpu_model=A100", "",
        "[ssh_nospec]", line("ssh-nogpu"), "",
        "[ssh_nospec:vars]", f"ansible_ssh_private_key_file={lab.client_key}", "",
        "[ssh_nouser]", line("ssh-nouser", user=False), "",
    ]) + "\n")
    return SshHosts(lab, targets, inv)


# ------------------------------------------------------------------------------ the world


def _private_pg() -> Iterator[str]:
    name = f"gpufleet_probe_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    db = Database(url)
    db.migrate()
    db.dispose()
    try:
        yield url
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="module")
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, ssh_hosts: SshHosts
) -> Iterator[World]:
    """Eight simulated hosts, available with facts; the sshd lab hosts enrolled, not collected.
    One per backend (``request.param``, given indirectly by each case), shared by its probes."""
    root = tmp_path_factory.mktemp(f"probe-{request.param}")
    pg: Iterator[str] | None = None
    if request.param == "sqlite":
        url = f"sqlite:///{root / 'home' / 'gpufleet.db'}"
    else:
        pg = _private_pg()
        url = next(pg)
    w = World(request.param, root, root / "home", url, root / "lab")
    fl = create_fleet(SIM_HOSTS, models=["a100-8x"], faults={})
    fl.save(w.lab_dir)
    write_inventory(fl, w.lab_dir / "inventory.ini", transport="sim", lab_dir=w.lab_dir)
    fleet = Fleet.open(home=w.home, url=url, actor="probe-setup")
    enroll(fleet, load_inventory(w.lab_dir / "inventory.ini"))
    assert all(v.state == "available" for v in validate(fleet, "gpu-*").verdicts)
    enroll(fleet, load_inventory(ssh_hosts.inventory))
    fleet.db.dispose()
    yield w
    if pg is not None:
        for _ in pg:
            pass


def _fleet(ctx: Ctx, **settings: object) -> Fleet:
    f = Fleet.open(home=ctx.world.home, url=ctx.world.url, actor="probe-setup")
    for k, v in settings.items():
        setattr(f.settings, k, v)
    return f


def _state(ctx: Ctx, host: str) -> dict[str, object]:
    db = Database(ctx.world.url)
    try:
        with db.engine.connect() as c:
            row = c.execute(text(
                "SELECT state, fault, status_reason, profiles, last_outcome, last_reason "
                "FROM hosts WHERE name = :n"), {"n": host}).one()
    finally:
        db.dispose()
    profiles = json.loads(row[3]) if isinstance(row[3], str) else row[3]
    return {"state": row[0], "fault": row[1], "status_reason": row[2] or "",
            "profiles": profiles, "last_outcome": row[4], "last_reason": row[5] or ""}


# ------------------------------------------------------------------------ setups & checks


def write(name: str, body: str) -> Callable[[Ctx], None]:
    """Setup: write an inventory file into the probe's directory."""

    def setup(ctx: Ctx) -> None:
        (ctx.tmp / name).write_text(body.replace("{lab}", str(ctx.world.lab_dir)))

    return setup


def both(*setups: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        for s in setups:
            s(ctx)

    return setup


def lab_fault(host: str, fault: str) -> Callable[[Ctx], None]:
    """Setup: a technician's change to a simulated host (``gpufleet lab change``)."""

    def setup(ctx: Ctx) -> None:
        d = ctx.world.lab_dir
        apply_change(LabFleet.load(d), host, add_faults=[fault], now=datetime.now(UTC)).save(d)

    return setup


def state_is(host: str, *states: str, fault: str | None = None) -> Callable[[Ctx, Result], None]:
    def check(ctx: Ctx, r: Result) -> None:
        st = _state(ctx, host)
        assert st["state"] in states, st
        if fault is not None:
            assert st["fault"] == fault, st

    return check


def never_validated(host: str) -> Callable[[Ctx, Result], None]:
    def check(ctx: Ctx, r: Result) -> None:
        st = _state(ctx, host)
        assert st["state"] != "available" and st["profiles"] == [], st

    return check


def nothing_enrolled(ctx: Ctx, r: Result) -> None:
    names = set(store_image(ctx.world).hosts)
    assert not {"h1", "h2", "far", "a", "b", "sec-01", "gpu-alias"} & names, names


def clear_lab_faults(host: str) -> Callable[[Ctx], None]:
    def undo(ctx: Ctx) -> None:
        d = ctx.world.lab_dir
        fl = LabFleet.load(d)
        apply_change(fl, host, clear_faults=list(fl.host(host).faults)).save(d)

    return undo


def same_machine_as(host: str) -> Callable[[Ctx], None]:
    """Setup (A.7): an inventory naming an enrolled sshd host's address and port again."""

    def setup(ctx: Ctx) -> None:
        t = ctx.sshlab.targets[host]
        (ctx.tmp / "a.ini").write_text(
            f"gpu-alias ansible_host={t.address} ansible_port={t.port} ansible_user={t.user}\n")

    return setup


def claim_elsewhere(host: str) -> Callable[[Ctx], None]:
    """Setup: another worker holds the host (a live claim with its own token)."""

    def setup(ctx: Ctx) -> None:
        token = str(uuid.uuid4())
        db = Database(ctx.world.url)
        try:
            with db.engine.begin() as c:
                c.execute(text("UPDATE hosts SET claim_token = :t, claimed_until = :u "
                               "WHERE name = :n"),
                          {"t": token, "u": datetime(2999, 1, 1), "n": host})
        finally:
            db.dispose()
        ctx.foreign_claims[host] = token

    return setup


def release(ctx: Ctx) -> None:
    db = Database(ctx.world.url)
    try:
        with db.engine.begin() as c:
            c.execute(text("UPDATE hosts SET claim_token = NULL, claimed_until = NULL"))
    finally:
        db.dispose()


def secret_key(ctx: Ctx) -> None:
    ctx.env["GPUFLEET_SECRET_KEY"] = Fernet.generate_key().decode()


def only_sqlite_home(ctx: Ctx) -> None:
    """Setup: no --db; the store comes from GPUFLEET_DATABASE_URL or a scratch home."""
    ctx.global_args = ["--home", str(ctx.tmp / "scratch-home")]


def scratch_db(kind: str) -> Callable[[Ctx], None]:
    """Setup: a SQLite database in a bad state, given with --db; the world is untouched."""

    def setup(ctx: Ctx) -> None:
        path = ctx.tmp / f"{kind}.db"
        url = f"sqlite:///{path}"
        if kind == "corrupt":
            path.write_bytes(b"this is not a database\n" * 200)
        elif kind == "foreign":
            eng = create_engine(url)
            with eng.begin() as c:
                c.execute(text("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)"))
            eng.dispose()
        elif kind == "half":
            eng = create_engine(url)
            with eng.begin() as c:
                c.execute(text("CREATE TABLE hosts (id INTEGER PRIMARY KEY)"))
            eng.dispose()
        elif kind in ("newer", "readonly"):
            src = ctx.world.sqlite_file()
            assert src is not None
            shutil.copy(src, path)
            if kind == "newer":
                eng = create_engine(url)
                with eng.begin() as c:
                    c.execute(text("UPDATE alembic_version SET version_num = '0099'"))
                eng.dispose()
            else:
                url = f"sqlite:///file:{path}?mode=ro&uri=true"
        ctx.notes["scratch"] = (path, path.read_bytes())
        ctx.global_args = ["--home", str(ctx.tmp / "scratch-home"), "--db", url]

    return setup


def scratch_untouched(ctx: Ctx, r: Result) -> None:
    path, data = ctx.notes["scratch"]
    assert path.read_bytes() == data, "the refused database was changed"


def dcgm_then_change(ctx: Ctx) -> None:
    """Setup (A.5): gpu-05 passes a DCGM diag (the lab's real capture) that the profile
    overlay requires for training-single; then its driver is upgraded (declared change)."""
    overlay = ctx.tmp / "profiles.yaml"
    # The lab pool has no baseline here: this probe is about the evidence alone.
    overlay.write_text(
        "profiles:\n  training-single:\n    checks:\n      dcgm_diag: {require: true}\n"
        "      baseline: false\n")
    ctx.env["GPUFLEET_PROFILES"] = str(overlay)
    f = _fleet(ctx, profiles_file=overlay)
    try:
        assert run_active(f, "gpu-05", "dcgm", level=2)[0].ok
        assert "training-single" in validate(f, "gpu-05").verdicts[0].profiles
        operations.record_change(f, "gpu-05", DeclaredChangeKind.DRIVER_UPGRADE, "CHG-probe")
    finally:
        f.db.dispose()


def evidence_dropped(ctx: Ctx, r: Result) -> None:
    verdict = json.loads(r.stdout)[0]
    assert verdict["state"] == "available", verdict
    assert "training-single" not in verdict["profiles"] and "inference" in verdict["profiles"]


def collected_first(host: str) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        f = _fleet(ctx)
        try:
            assert [r.outcome.value for r in collect(f, host, timeout_s=30).results] == ["ok"]
        finally:
            f.db.dispose()

    return setup


def ssh_config_user(ctx: Ctx) -> None:
    """Setup (B.9): no ansible_user; the login user and key come from ~/.ssh/config."""
    hosts: SshHosts = ctx.sshlab
    home = ctx.tmp / "operator-home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host 127.0.0.1\n  User {hosts.lab.user}\n  IdentityFile {hosts.lab.client_key}\n")
    ctx.env["HOME"] = str(home)


def others_collected(*hosts: str) -> Callable[[Ctx, Result], None]:
    def check(ctx: Ctx, r: Result) -> None:
        for h in hosts:
            assert _state(ctx, h)["last_outcome"] == "ok", (h, _state(ctx, h))

    return check


def maintenance_kept(ctx: Ctx, r: Result) -> None:
    other: Result = ctx.notes["alongside"]
    assert "Traceback" not in other.output and other.code in (0, 1), other
    assert _state(ctx, "gpu-07")["state"] == "maintenance"
    db = Database(ctx.world.url)
    try:
        with db.engine.connect() as c:
            kinds = [row[0] for row in c.execute(text(
                "SELECT e.kind FROM events e JOIN hosts h ON h.id = e.host_id "
                "WHERE h.name = 'gpu-07' ORDER BY e.id")).all()]
    finally:
        db.dispose()
    assert kinds, "no events for gpu-07"


def maintenance_off(host: str) -> Callable[[Ctx], None]:
    def undo(ctx: Ctx) -> None:
        f = _fleet(ctx)
        try:
            operations.maintenance_off(f, host, "probe done")
        finally:
            f.db.dispose()

    return undo


# ------------------------------------------------------------------------------ catalogue

INI_SECRETS = (
    "[gpu]\n"
    f"sec-01 ansible_host=192.0.2.71 ansible_ssh_pass={SECRETS[0]} gpufleet_transport=sim "
    "gpufleet_lab_dir={lab}\n\n"
    "[gpu:vars]\n"
    f"ansible_become_password={SECRETS[1]}\n"
    f"api_token={SECRETS[2]}\n"
)
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True)
) + "all:\n  hosts:\n    h1:\n      v: *i\n"
BOTH = ("sqlite", "postgres")

INV = "malformed inventory"
HOSTILE = "hostile tool output"
CONC = "concurrent writers"
INTR = "interrupted run"
SET = "bad settings"

CATALOGUE: list[Probe] = [
    # ---------------------------------------------------------------- malformed inventories
    Probe("ini-bad-section", "A.4", INV, ("enroll", "-i", "{tmp}/a.ini"), 2,
          r"a\.ini:1: invalid section header '\[gpu'", write("a.ini", "[gpu\nh1\n"),
          check=nothing_enrolled),
    Probe("ini-bad-line", "A.4", INV, ("enroll", "-i", "{tmp}/a.ini"), 2,
          r"a\.ini:2: expected key=value host variable, got 'ansible_port'",
          write("a.ini", "[gpu]\nh1 ansible_port\n"), check=nothing_enrolled),
    Probe("unknown-gpufleet-var", "A.4", INV, ("enroll", "-i", "{tmp}/a.ini"), 2,
          r"a\.ini:4: .*unknown variable gpufleet_gpu_cout.*did you mean gpufleet_gpu_count",
          write("a.ini", "[gpu]\nh1\n[gpu:vars]\ngpufleet_gpu_cout=8\n"), backends=BOTH,
          check=nothing_enrolled),
    Probe("unknown-csv-column", "A.4", INV, ("enroll", "-i", "{tmp}/a.csv"), 2,
          r"a\.csv:1: .*unknown CSV column 'gpu_count'",
          write("a.csv", "name,address,gpu_count\nh1,10.0.0.1,8\n"), check=nothing_enrolled),
    Probe("negative-gpu-count", "A.4", INV, ("enroll", "-i", "{tmp}/a.ini"), 2,
          r"a\.ini:2: .*gpufleet_gpu_count.*out of range",
          write("a.ini", "[gpu]\nh1 gpufleet_gpu_count=-8\n"), check=nothing_enrolled),
    Probe("nan-rate", "A.4", INV, ("enroll", "-i", "{tmp}/a.yml"), 2, r"a\.yml:4: .*finite",
          write("a.yml", "all:\n  hosts:\n    h1:\n      gpufleet_ib_rate_gbps: .nan\n"),
          check=nothing_enrolled),
    Probe("unknown-fabric", "A.4", INV, ("enroll", "-i", "{tmp}/a.ini"), 2,
          r"a\.ini:2: .*unknown fabric", write("a.ini", "[gpu]\nh1 gpufleet_fabric=IB-HDR\n"),
          check=nothing_enrolled),
    Probe("range-bomb", "B.12", INV, ("enroll", "-i", "{tmp}/a.ini"), 2,
          r"a\.ini:2: .*more than 100000 hosts", write("a.ini", "[gpu]\ngpu-[1:99999999]\n"),
          backends=BOTH, check=nothing_enrolled),
    Probe("yaml-alias-bomb", "B.12", INV, ("enroll", "-i", "{tmp}/a.yml"), 2, r"a\.yml.*alias",
          write("a.yml", ALIAS_BOMB), check=nothing_enrolled),
    Probe("yaml-duplicate-key-warns", "B.12", INV, ("enroll", "-i", "{tmp}/a.yml"), 0,
          r"1 added.*\[WARNING\]: \S*a\.yml:5: Found duplicate mapping key 'ansible_user'",
          write("a.yml", "all:\n  hosts:\n    dupkey-01:\n      ansible_user: a\n"
                "      ansible_user: b\n      gpufleet_transport: sim\n"
                "      gpufleet_lab_dir: {lab}\n")),
    Probe("yaml-duplicate-key-strict", "B.12", INV,
          ("enroll", "--strict", "-i", "{tmp}/a.yml"), 1,
          r"duplicate mapping key 'ansible_user'.*nothing enrolled",
          write("a.yml", "all:\n  hosts:\n    h1:\n      ansible_user: a\n      ansible_user: b\n"),
          check=nothing_enrolled),
    Probe("csv-unterminated-quote", "B.12", INV, ("enroll", "-i", "{tmp}/a.csv"), 2,
          r"a\.csv:2: .*never closed",
          write("a.csv", 'name,address\nh1,"10.0.0.1\nh2,10.0.0.2\n'), check=nothing_enrolled),
    Probe("secret-without-key", "C.14", INV, ("enroll", "-i", "{tmp}/a.ini"), 2,
          r"a\.ini:2: .*ansible_ssh_pass holds a secret.*GPUFLEET_SECRET_KEY",
          write("a.ini", INI_SECRETS), backends=BOTH, check=nothing_enrolled),
    Probe("secret-with-key", "C.14", INV, ("enroll", "-i", "{tmp}/a.ini"), 0, r"1 added",
          both(write("a.ini", INI_SECRETS), secret_key), backends=BOTH),
    Probe("local-transport-remote-address", "A.7", INV, ("enroll", "-i", "{tmp}/a.ini"), 2,
          r"a\.ini:1: .*gpufleet_transport=local.*not this machine",
          write("a.ini", "far ansible_host=192.0.2.7 gpufleet_transport=local\n"),
          check=nothing_enrolled),
    Probe("duplicate-address-port", "A.7", INV, ("enroll", "-i", "{tmp}/a.ini"), 2,
          r"hosts a \(\S*a\.ini:2\) and b \(\S*a\.ini:3\) are the same machine",
          write("a.ini", "[gpu]\na ansible_host=10.9.0.1\nb ansible_host=10.9.0.1\n"),
          backends=BOTH, check=nothing_enrolled),
    Probe("same-machine-as-enrolled", "A.7", INV, ("enroll", "-i", "{tmp}/a.ini"), 2,
          r"a\.ini:1: host gpu-alias .* is the same machine as enrolled host ssh-ok",
          same_machine_as("ssh-ok"), backends=BOTH, check=nothing_enrolled),
    # ------------------------------------------------------------------ hostile tool output
    Probe("cut-xid-line", "A.1", HOSTILE, ("validate", "ssh-cutxid"), 1,
          r"ssh-cutxid .*(unreadable Xid|cannot rule out a fatal Xid)",
          check=state_is("ssh-cutxid", "validating", "quarantined")),
    Probe("gpu-lost", "A.2", HOSTILE, ("validate", "ssh-lost"), 1, r"ssh-lost .*GPU is lost",
          check=state_is("ssh-lost", "quarantined", fault="gpu_lost")),
    Probe("no-gpu-no-spec", "A.3", HOSTILE, ("validate", "ssh-nogpu"), 1, r"ssh-nogpu",
          check=never_validated("ssh-nogpu")),
    Probe("absurd-kernel-string", "B.8", HOSTILE, ("collect", "ssh-absurd,ssh-ok"), 1,
          r"ssh-absurd .*bad output.*kernel.*1 bad output, 1 ok", backends=BOTH,
          check=others_collected("ssh-ok")),
    Probe("duplicate-section", "B.12", HOSTILE, ("collect", "ssh-dup"), 1,
          r"ssh-dup .*bad output.*appears twice"),
    Probe("markup-and-escapes-from-host", "C.15", HOSTILE, ("hosts", "show", "ssh-markup"), 0,
          r"Ubuntu \[bold red\]22\.04\[/\] \\x1b\]0;owned\\x07 :smile:",
          collected_first("ssh-markup")),
    Probe("markup-and-escapes-from-operator", "C.15", HOSTILE,
          ("maintenance", "on", "gpu-06", "--reason", "[bold red]PSU[/] \x1b]0;pwn\x07 :smile:"),
          0, r"gpu-06: maintenance", check=state_is("gpu-06", "maintenance")),
    Probe("fatal-xid-on-available", "A.6", HOSTILE, ("collect", "gpu-03"), 0,
          r"gpu-03 .*quarantined: xid: fatal Xid 79", lab_fault("gpu-03", "xid:79"),
          backends=BOTH, check=state_is("gpu-03", "quarantined", fault="fatal_xid")),
    Probe("host-key-changed", "C.16", HOSTILE, ("collect", "gpu-04"), 1,
          r"gpu-04 .*host key changed: pinned SHA256:\S+, offered SHA256:",
          lab_fault("gpu-04", "host-key-changed"), backends=BOTH,
          check=state_is("gpu-04", "quarantined")),
    Probe("rekey-unknown-host", "C.16", HOSTILE, ("hosts", "rekey", "no-such-host"), 4,
          r"no host"),
    Probe("no-ansible-user", "B.9", HOSTILE, ("collect", "ssh-nouser", "--timeout", "30"), 0,
          r"ssh-nouser .*ok", ssh_config_user),
    Probe("evidence-before-change", "A.5", HOSTILE, ("validate", "gpu-05", "--json"), 0,
          r'"host": "gpu-05"', dcgm_then_change, check=evidence_dropped),
    # ------------------------------------------------------------------ concurrent writers
    Probe("validate-vs-maintenance", "B.11", CONC,
          ("maintenance", "on", "gpu-07", "--reason", "probe: PSU swap"), 0,
          r"gpu-07: maintenance", alongside=("validate", "gpu-07"), backends=BOTH,
          check=maintenance_kept),
    # --------------------------------------------------------------------- interrupted runs
    Probe("sigterm-during-collect", "B.10", INTR, ("collect", "ssh-hang-*", "--timeout", "120"),
          143, r".*", sigterm_after_claims=2, backends=BOTH),
    Probe("hanging-hosts-time-out", "B.10", INTR, ("collect", "ssh-hang-1", "--timeout", "2"), 1,
          r"ssh-hang-1 .*timeout"),
    Probe("all-held-elsewhere", "B.10", INTR, ("collect", "gpu-08"), 6,
          r"nothing collected", claim_elsewhere("gpu-08"), backends=BOTH),
    Probe("remove-held-host", "C.16", INTR, ("hosts", "remove", "gpu-08", "--yes"), 6,
          r"gpu-08", claim_elsewhere("gpu-08")),
    Probe("bad-transport", "B.10", INTR, ("collect", "gpu-01", "--transport", "bogus"), 2,
          r"unknown transport 'bogus'", backends=BOTH),
    # ------------------------------------------------------------------------ bad settings
    Probe("bad-forks-setting", "C.13", SET, ("hosts", "list"), 2,
          r"invalid configuration: GPUFLEET_FORKS='abc'", env={"GPUFLEET_FORKS": "abc"}),
    Probe("nan-timeout-setting", "C.13", SET, ("collect", "gpu-01"), 2,
          r"GPUFLEET_COLLECT_TIMEOUT", env={"GPUFLEET_COLLECT_TIMEOUT": "nan"}),
    Probe("missing-profiles-file", "C.13", SET, ("validate", "gpu-01"), 2,
          r"GPUFLEET_PROFILES.*file not found", env={"GPUFLEET_PROFILES": "/nonexistent/p.yaml"},
          backends=BOTH),
    Probe("unknown-setting-warns", "C.13", SET, ("hosts", "list", "gpu-01"), 0,
          r"unknown setting GPUFLEET_FORK is ignored \(did you mean GPUFLEET_FORKS\?\)",
          env={"GPUFLEET_FORK": "3"}),
    Probe("unreachable-db", "C.13", SET, ("hosts", "list"), 2,
          r"127\.0\.0\.1.*refused", only_sqlite_home,
          env={"GPUFLEET_DATABASE_URL": "postgresql+psycopg://probe:pw-hidden@127.0.0.1:1/x"},
          check=lambda ctx, r: None if "pw-hidden" not in r.output else pytest.fail("password")),
    Probe("unreachable-db-json", "C.13", SET, ("hosts", "list", "--json"), 2, r"refused",
          only_sqlite_home, env={"GPUFLEET_DATABASE_URL": "postgresql+psycopg://u@127.0.0.1:1/x"},
          json_error=True),
    Probe("wrong-db-role", "C.13", SET, ("hosts", "list"), 2, r"no_such_role_probe",
          only_sqlite_home,
          env={"GPUFLEET_DATABASE_URL": PG_ADMIN_URL.replace("postgres@", "no_such_role_probe@")}),
    Probe("not-a-db-url", "C.13", SET, ("hosts", "list"), 2, r"not a database URL",
          only_sqlite_home, env={"GPUFLEET_DATABASE_URL": "no url"}),
    Probe("corrupt-db", "C.13", SET, ("hosts", "list"), 2, r"not a database",
          scratch_db("corrupt"), check=scratch_untouched),
    Probe("foreign-db", "C.13", SET, ("enroll", "-i", "{tmp}/x.csv"), 2,
          r"tables that are not gpufleet's \(customers\)",
          both(scratch_db("foreign"), write("x.csv", "name,address\nh1,10.0.0.1\n")),
          check=scratch_untouched),
    Probe("half-created-db", "C.13", SET, ("hosts", "list"), 2, r"half-created gpufleet schema",
          scratch_db("half"), check=scratch_untouched),
    Probe("newer-schema-db", "C.13", SET, ("hosts", "list"), 2, r"schema 0099 .*newer",
          scratch_db("newer"), check=scratch_untouched),
    Probe("read-only-db", "C.13", SET, ("enroll", "-i", "{tmp}/x.csv"), 2, r"read-?only",
          both(scratch_db("readonly"), write("x.csv", "name,address\nh1,10.0.0.1\n")),
          check=scratch_untouched),
    Probe("forks-nan", "B.12", SET, ("collect", "gpu-01", "--forks", "nan"), 2,
          r"Invalid value for '--forks'"),
    Probe("forks-negative", "B.12", SET, ("validate", "gpu-01", "--forks", "-1"), 2,
          r"Invalid value for '--forks'.*not -1"),
    Probe("timeout-inf", "B.12", SET, ("collect", "gpu-01", "--timeout", "inf"), 2,
          r"Invalid value for '--timeout'.*not inf"),
    Probe("unknown-state-selector", "B.12", SET, ("maintenance", "on", "state:bogus",
          "--reason", "x"), 2, r"unknown state 'bogus': valid states are enrolled", backends=BOTH),
    Probe("selector-matches-nothing", "B.12", SET, ("validate", "nomatch-*"), 4,
          r"no hosts? match", backends=BOTH),
    Probe("selector-underscore-literal", "B.12", SET, ("hosts", "list", "gpu_01"), 4,
          r"no host named 'gpu_01'"),
    Probe("selector-percent-literal-json", "B.12", SET, ("hosts", "list", "gpu%", "--json"), 4,
          r"gpu%", json_error=True),
]

#: Undo steps after a probe, so that rows stay independent (by probe name).
TEARDOWN: dict[str, Callable[[Ctx], None]] = {
    "fatal-xid-on-available": clear_lab_faults("gpu-03"),
    "host-key-changed": clear_lab_faults("gpu-04"),
    "all-held-elsewhere": release,
    "remove-held-host": release,
    "validate-vs-maintenance": maintenance_off("gpu-07"),
    "markup-and-escapes-from-operator": maintenance_off("gpu-06"),
}

ITEMS = [f"A.{i}" for i in range(1, 8)] + [f"B.{i}" for i in range(8, 13)] + [
    f"C.{i}" for i in range(13, 17)]
CATEGORIES = {INV, HOSTILE, CONC, INTR, SET}


def test_catalogue_covers_every_item_and_category() -> None:
    assert sorted({p.item for p in CATALOGUE}, key=ITEMS.index) == ITEMS
    assert {p.category for p in CATALOGUE} == CATEGORIES
    names = [p.name for p in CATALOGUE]
    assert len(names) == len(set(names))
    assert set(TEARDOWN) <= set(names)


CASES = [
    pytest.param(p, backend, id=f"{p.item}-{p.name}-{backend}", marks=(
        [pytest.mark.postgres] if backend == "postgres" else []))
    for p in CATALOGUE
    for backend in p.backends
]


@pytest.mark.parametrize(("probe", "world"), CASES, indirect=["world"])
def test_probe(probe: Probe, world: World, ssh_hosts: SshHosts, tmp_path: Path) -> None:
    ctx = Ctx(world, tmp_path, base_env(world.root / "os-home"), list(world.global_args),
              sshlab=ssh_hosts)
    try:
        if probe.setup is not None:
            probe.setup(ctx)
        before = store_image(world)
        r = run_probe(probe, ctx)
        check_invariants(probe, ctx, r, before)
        if probe.check is not None:
            probe.check(ctx, r)
    finally:
        undo = TEARDOWN.get(probe.name)
        if undo is not None:
            undo(ctx)

