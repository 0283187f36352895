"""Enrollment from inventories, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from gpufleet.collect.inventory import load_inventory
from gpufleet.service.enroll import enroll
from gpufleet.service.fleet import Fleet
from gpufleet.service.hosts import list_hosts
from gpufleet.store.tables import Event, Pool

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
