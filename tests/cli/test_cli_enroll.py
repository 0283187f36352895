"""``gpufleet enroll`` with bad input, on SQLite and PostgreSQL (issue 6: A.4, A.7, B.12, C.14).

Every refusal is one line naming file:line, exit 2, no traceback, and nothing enrolled;
secrets from the inventory appear in no output, no event and no stored host variable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from tests.clitools import Cli, cli_for_backend, flat

from gpufleet.store.db import Database

PASSWORD = "s3cr3t-Pw-7781"
TOKEN = "tok-0a9f-ccdd"


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, "cli-enroll-test")
    c.env["GPUFLEET_SECRET_KEY"] = None
    c.env["GPUFLEET_SECRET_KEY_FILE"] = None
    yield c


def write(gf: Cli, name: str, text: str) -> Path:
    path = gf.tmp / name
    path.write_text(text)
    return path


def refused(gf: Cli, path: Path, line: int, *words: str) -> str:
    r = gf.run("enroll", "-i", str(path), code=2)
    out = flat(r.stdout + r.stderr)
    assert f"{path}:{line}:" in out, out
    for word in words:
        assert word in out, out
    assert "Traceback" not in out
    assert gf.json("hosts", "list") == []  # nothing enrolled
    return out


BAD = [
    (
        "typo.ini",
        "[gpu]\nh1\n[gpu:vars]\ngpufleet_gpu_cout=8\n",
        4,
        ("unknown variable gpufleet_gpu_cout", "did you mean gpufleet_gpu_count?"),
    ),
    ("col.csv", "name,address,gpu_count\nh1,10.0.0.1,8\n", 1, ("unknown CSV column 'gpu_count'",)),
    ("neg.ini", "[gpu]\nh1 gpufleet_gpu_count=-8\n", 2, ("gpufleet_gpu_count", "out of range")),
    ("nan.yml", "all:\n  hosts:\n    h1:\n      gpufleet_ib_rate_gbps: .nan\n", 4, ("finite",)),
    ("fabric.ini", "[gpu]\nh1 gpufleet_fabric=IB-HDR\n", 2, ("unknown fabric",)),
    ("bomb.ini", "[gpu]\ngpu-[1:99999999]\n", 2, ("more than 100000 hosts",)),
    ("quote.csv", 'name,address\nh1,"10.0.0.1\nh2,10.0.0.2\n', 2, ("never closed",)),
    (
        "dup.ini",
        "[gpu]\na ansible_host=10.9.0.1\nb ansible_host=10.9.0.1\n",
        3,
        ("hosts a (", ":2) and b (", ":3) are the same machine"),
    ),
    (
        "local.ini",
        "far ansible_host=192.0.2.7 gpufleet_transport=local\n",
        1,
        ("gpufleet_transport=local", "not this machine"),
    ),
]


@pytest.mark.parametrize(("name", "text", "line", "words"), BAD, ids=[b[0] for b in BAD])
def test_bad_inventories_exit_2_naming_file_and_line(
    gf: Cli, name: str, text: str, line: int, words: tuple[str, ...]
) -> None:
    refused(gf, write(gf, name, text), line, *words)


def test_duplicate_yaml_key_warns_and_strict_exits_1(gf: Cli) -> None:
    path = write(
        gf, "dup.yml", "all:\n  hosts:\n    h1:\n      ansible_user: a\n      ansible_user: b\n"
    )
    r = gf.run("enroll", "-i", str(path), "--strict", code=1)
    assert f"[WARNING]: {path}:5: Found duplicate mapping key 'ansible_user'" in r.stderr
    assert "nothing enrolled" in r.stderr and gf.json("hosts", "list") == []
    r = gf.run("enroll", "-i", str(path))
    assert f"[WARNING]: {path}:5:" in r.stderr and "Using last defined value only." in r.stderr
    assert [h["name"] for h in gf.json("hosts", "list")] == ["h1"]
    assert "--strict" in gf.run("enroll", "--help").stdout


SECRET_INI = f"""\
[gpu]
gpu-01 ansible_host=10.0.0.1 ansible_ssh_pass={PASSWORD}
gpu-02 ansible_host=10.0.0.2

[gpu:vars]
ansible_become_pass={PASSWORD}
api_token={TOKEN}
"""


def stored_vars(gf: Cli) -> str:
    url = (
        gf.global_args[gf.global_args.index("--db") + 1]
        if "--db" in gf.global_args
        else (f"sqlite:///{gf.tmp / 'home' / 'gpufleet.db'}")
    )
    db = Database(url)
    try:
        with db.engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT vars FROM hosts").all()
            events = conn.exec_driver_sql("SELECT message, data FROM events").all()
    finally:
        db.dispose()
    return json.dumps([[str(r[0]) for r in rows], [[str(x) for x in e] for e in events]])


def test_secret_without_key_is_refused_with_how_to(gf: Cli) -> None:
    out = refused(
        gf,
        write(gf, "pw.ini", SECRET_INI),
        2,
        "ansible_ssh_pass holds a secret",
        "GPUFLEET_SECRET_KEY",
        "GPUFLEET_SECRET_KEY_FILE",
    )
    assert PASSWORD not in out and TOKEN not in out


def test_secrets_never_shown_or_stored_in_clear(gf: Cli) -> None:
    keyfile = gf.tmp / "fleet.key"
    keyfile.write_bytes(Fernet.generate_key())
    gf.env["GPUFLEET_SECRET_KEY_FILE"] = str(keyfile)
    path = write(gf, "pw.ini", SECRET_INI)
    outputs = [gf.run("enroll", "-i", str(path)), gf.run("enroll", "-i", str(path), "--json")]
    assert gf.json("enroll", "-i", str(path))["unchanged"] == ["gpu-01", "gpu-02"]
    path.write_text(SECRET_INI.replace(PASSWORD, "n3w-" + PASSWORD))
    outputs.append(gf.run("enroll", "-i", str(path)))
    shown = [
        gf.run("hosts", "show", "gpu-01", "--json"),
        gf.run("hosts", "show", "gpu-01"),
        gf.run("hosts", "list", "--json"),
        gf.run("events", "--json"),
    ]
    stored = stored_vars(gf)
    assert stored.count("fernet:") == 5  # sealed: 3 secrets on gpu-01, 2 on gpu-02
    everything = " ".join(r.stdout + r.stderr for r in outputs + shown) + stored
    for secret in (PASSWORD, TOKEN, "n3w-"):
        assert secret not in everything
    host = json.loads(shown[0].stdout)
    updated = [e for e in host["events"] if e["kind"] == "updated"]
    assert len(updated) == 1 and updated[0]["data"]["vars"]["secrets_changed"] == [
        "ansible_become_pass",
        "ansible_ssh_pass",
    ]
    assert updated[0]["data"]["vars"]["after"]["ansible_ssh_pass"] == "<redacted>"
