"""Enrollment from inventories, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select

from gpufleet.errors import ConfigError, InventoryError
from gpufleet.inventory import load_inventory
from gpufleet.secrets import REDACTED, SecretBox, is_secret_var, redact_vars, secret_key_from_env
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.enroll import enroll, is_this_machine
from gpufleet.service.views.hosts import list_hosts, show_host
from gpufleet.store.tables import Event, Host, Pool

INI = """\
[gpu_h800]
gpu-[01:04] ansible_user=ops

[gpu_h800:vars]
gpufleet_gpu_count=8
gpufleet_gpu_model=H800
gpufleet_pool=train-h800
gpufleet_baseline=h800-2026q4

[infer]
inf-01 ansible_host=10.1.0.5 ansible_port=2222

[all:vars]
ansible_ssh_private_key_file=/etc/gpufleet/id_ed25519
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "hosts.ini"
    p.write_text(text)
    return p


def test_enroll_creates_hosts_groups_pools(fleet: Fleet, tmp_path: Path) -> None:
    rep = enroll(fleet, load_inventory(write(tmp_path, INI)))
    assert sorted(rep.added) == ["gpu-01", "gpu-02", "gpu-03", "gpu-04", "inf-01"]
    hosts = {h.name: h for h in list_hosts(fleet)}
    assert hosts["gpu-03"].state == "enrolled"
    assert hosts["gpu-03"].pool == "train-h800"
    assert hosts["inf-01"].address == "10.1.0.5"
    assert [h.name for h in list_hosts(fleet, group="gpu_h800")] == [
        "gpu-01",
        "gpu-02",
        "gpu-03",
        "gpu-04",
    ]
    assert [h.name for h in list_hosts(fleet, "group:infer")] == ["inf-01"]
    with fleet.db.session() as s:
        pool = s.scalar(select(Pool).where(Pool.name == "train-h800"))
        assert pool is not None and pool.baseline == "h800-2026q4"
        assert pool.expected["gpu_count"] == 8


def test_reenroll_is_idempotent_and_records_updates(fleet: Fleet, tmp_path: Path) -> None:
    path = write(tmp_path, INI)
    enroll(fleet, load_inventory(path))
    again = enroll(fleet, load_inventory(path))
    assert again.added == [] and again.updated == []
    assert len(again.unchanged) == 5
    write(tmp_path, INI.replace("10.1.0.5", "10.1.0.6"))
    third = enroll(fleet, load_inventory(path))
    assert third.updated == ["inf-01"]
    with fleet.db.session() as s:
        kinds = [
            e.kind
            for e in s.scalars(select(Event).where(Event.host_name == "inf-01").order_by(Event.id))
        ]
    assert kinds == ["enrolled", "updated"]


# ------------------------------------------------------------- one machine, one host (A.7)


def enroll_text(fleet: Fleet, tmp_path: Path, text: str, name: str = "hosts.ini") -> Path:
    path = tmp_path / name
    path.write_text(text)
    enroll(fleet, load_inventory(path))
    return path


def host_names(fleet: Fleet) -> list[str]:
    return [h.name for h in list_hosts(fleet)]


def test_same_address_and_port_twice_in_one_inventory_is_refused(
    fleet: Fleet, tmp_path: Path
) -> None:
    text = (
        "[gpu]\n"
        "gpu-01 ansible_host=10.0.0.1\n"
        "gpu-02 ansible_host=10.0.0.2\n"
        "gpu-01-old ansible_host=10.0.0.1 ansible_port=22\n"
    )
    with pytest.raises(InventoryError) as info:
        enroll_text(fleet, tmp_path, text)
    path = tmp_path / "hosts.ini"
    assert info.value.line == 4
    assert str(info.value).startswith(f"{path}:4: ")
    assert f"gpu-01 ({path}:2) and gpu-01-old ({path}:4) are the same machine" in str(info.value)
    assert "10.0.0.1 port 22" in str(info.value)
    assert host_names(fleet) == []  # nothing enrolled


def test_same_machine_spelt_differently_is_refused(fleet: Fleet, tmp_path: Path) -> None:
    text = "[gpu]\nlab-a ansible_host=127.0.0.1 ansible_port=2201\nlab-b ansible_host=localhost ansible_port=2201\nlab-c ansible_host=127.0.0.1 ansible_port=2202\n"  # noqa: E501
    with pytest.raises(InventoryError, match=r"lab-a .* and lab-b .* are the same machine"):
        enroll_text(fleet, tmp_path, text)
    # Different ports on one address are different sshd hosts: fine.
    enroll_text(
        fleet, tmp_path, text.replace("localhost ansible_port=2201", "localhost ansible_port=2203")
    )
    assert host_names(fleet) == ["lab-a", "lab-b", "lab-c"]


def test_same_machine_as_an_enrolled_host_is_refused(fleet: Fleet, tmp_path: Path) -> None:
    first = enroll_text(fleet, tmp_path, "[gpu]\ngpu-01 ansible_host=10.0.0.1\n", "a.ini")
    with pytest.raises(InventoryError) as info:
        enroll_text(fleet, tmp_path, "[gpu]\n\nnode7 ansible_host=10.0.0.1\n", "b.ini")
    msg = str(info.value)
    assert msg.startswith(f"{tmp_path / 'b.ini'}:3: ")
    assert f"host node7 ({tmp_path / 'b.ini'}:3) is the same machine as enrolled host gpu-01" in msg
    assert f"from {first}" in msg
    assert host_names(fleet) == ["gpu-01"]
    # Re-addressing the enrolled host itself is an update, not a duplicate.
    enroll_text(fleet, tmp_path, "[gpu]\ngpu-01 ansible_host=10.0.0.9\n", "a.ini")
    enroll_text(fleet, tmp_path, "[gpu]\nnode7 ansible_host=10.0.0.1\n", "b.ini")
    assert host_names(fleet) == ["gpu-01", "node7"]


def test_local_transport_only_for_this_machine(fleet: Fleet, tmp_path: Path) -> None:
    with pytest.raises(InventoryError) as info:
        enroll_text(
            fleet,
            tmp_path,
            "[gpu]\nfar ansible_host=192.0.2.44\n[gpu:vars]\ngpufleet_transport=local\n",
        )
    assert info.value.line == 4
    assert "host far: gpufleet_transport=local" in str(info.value)
    assert "'192.0.2.44' is not this machine" in str(info.value)
    with pytest.raises(InventoryError, match=r"'gpu-99\.example' is not this machine"):
        enroll_text(fleet, tmp_path, "gpu-99.example gpufleet_transport=local\n")
    assert host_names(fleet) == []
    for address in ("localhost", "127.0.0.5", "::1", socket.gethostname()):
        assert is_this_machine(address), address
    enroll_text(fleet, tmp_path, f"{socket.gethostname()} gpufleet_transport=local\n")
    assert host_names(fleet) == [socket.gethostname()]
    # ... and only once: a second local host is the same machine.
    with pytest.raises(InventoryError, match="same machine"):
        enroll_text(
            fleet, tmp_path, "me ansible_host=127.0.0.1 gpufleet_transport=local\n", "b.ini"
        )


# ------------------------------------------------------------------------- secrets (C.14)

PASSWORD = "hunter2-Zq9"
TOKEN = "tok-8c1f-secret"
SECRET_INI = f"""\
[gpu]
gpu-01 ansible_host=10.0.0.1 ansible_ssh_pass={PASSWORD}
gpu-02 ansible_host=10.0.0.2

[gpu:vars]
ansible_become_password={PASSWORD}
ansible_ssh_private_key_file=/etc/gpufleet/id_ed25519
vault_token={TOKEN}
"""


def all_stored_text(fleet: Fleet) -> str:
    """Everything the store holds about hosts and events, as text."""
    with fleet.db.session() as s:
        hosts = [
            [h.name, h.address, h.user, h.key_file, h.vars, h.expected, h.source]
            for h in s.scalars(select(Host))
        ]
        events = [[e.kind, e.message, e.data] for e in s.scalars(select(Event))]
    return json.dumps([hosts, events], default=str)


def test_secret_without_a_key_is_refused(fleet: Fleet, tmp_path: Path) -> None:
    assert fleet.settings.secret_key_bytes() is None
    with pytest.raises(InventoryError) as info:
        enroll_text(fleet, tmp_path, SECRET_INI)
    assert info.value.line == 2
    msg = str(info.value)
    assert "gpu-01: variable ansible_ssh_pass holds a secret" in msg
    assert "GPUFLEET_SECRET_KEY" in msg and "GPUFLEET_SECRET_KEY_FILE" in msg
    assert PASSWORD not in msg
    assert host_names(fleet) == []


def test_secrets_are_sealed_idempotent_and_redacted_in_events(fleet: Fleet, tmp_path: Path) -> None:
    box = SecretBox(Fernet.generate_key())
    path = tmp_path / "hosts.ini"
    path.write_text(SECRET_INI)
    rep = enroll(fleet, load_inventory(path), box=box)
    assert rep.added == ["gpu-01", "gpu-02"]
    stored = all_stored_text(fleet)
    assert PASSWORD not in stored and TOKEN not in stored
    with fleet.db.session() as s:
        h1 = s.scalar(select(Host).where(Host.name == "gpu-01"))
        assert h1 is not None
        sealed = dict(h1.vars)
    assert sealed["ansible_ssh_private_key_file"] == "/etc/gpufleet/id_ed25519"  # a path
    assert box.open(sealed["ansible_ssh_pass"]) == PASSWORD
    assert box.open(sealed["ansible_become_password"]) == PASSWORD
    assert box.open(sealed["vault_token"]) == TOKEN

    # Fernet tokens differ every time: re-enrolling must still be "unchanged".
    again = enroll(fleet, load_inventory(path), box=box)
    assert again.unchanged == ["gpu-01", "gpu-02"] and again.updated == []

    path.write_text(SECRET_INI.replace(f"ansible_ssh_pass={PASSWORD}", "ansible_ssh_pass=n3w-pw"))
    third = enroll(fleet, load_inventory(path), box=box)
    assert third.updated == ["gpu-01"]
    with fleet.db.session() as s:
        ev = s.scalars(
            select(Event).where(Event.host_name == "gpu-01", Event.kind == "updated")
        ).one()
        data = ev.data
    assert data["vars"]["secrets_changed"] == ["ansible_ssh_pass"]
    assert data["vars"]["before"]["ansible_ssh_pass"] == REDACTED
    assert data["vars"]["after"]["ansible_ssh_pass"] == REDACTED
    stored = all_stored_text(fleet)
    for secret in (PASSWORD, TOKEN, "n3w-pw"):
        assert secret not in stored
    shown = json.dumps(show_host(fleet, "gpu-01").events, default=str)
    assert "n3w-pw" not in shown and PASSWORD not in shown


def test_secret_key_from_the_environment(
    fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = Fernet.generate_key()
    keyfile = tmp_path / "key"
    keyfile.write_bytes(key + b"\n")
    assert secret_key_from_env({"GPUFLEET_SECRET_KEY_FILE": str(keyfile)}) == key
    assert secret_key_from_env({"GPUFLEET_SECRET_KEY": key.decode()}) == key
    assert secret_key_from_env({}) is None
    with pytest.raises(ConfigError, match="not a Fernet key"):
        SecretBox(b"too-short")
    other = SecretBox(Fernet.generate_key())
    with pytest.raises(ConfigError, match="cannot be decrypted with this key"):
        other.open(SecretBox(key).seal("x"))


def test_secret_variable_names() -> None:
    for name in (
        "ansible_ssh_pass",
        "ansible_password",
        "ansible_become_password",
        "ansible_become_pass",
        "vault_token",
        "API_KEY",
        "db_secret",
        "ansible_ssh_private_key_passphrase",
    ):
        assert is_secret_var(name), name
    for name in (
        "ansible_ssh_private_key_file",
        "ansible_private_key_file",
        "ansible_host",
        "ansible_host_key_checking",
        "gpufleet_gpu_count",
        "ssh_key_path",
        "note",
    ):
        assert not is_secret_var(name), name
    assert redact_vars({"ansible_ssh_pass": "x", "a": "b"}) == {
        "ansible_ssh_pass": REDACTED,
        "a": "b",
    }
