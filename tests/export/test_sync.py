"""``gpufleet sync`` / ``sync status``: drift between gpufleet, Kubernetes and Slurm, on
SQLite and PostgreSQL.

Kubernetes is **kmock** (PyPI), an in-memory API emulator, because no real kube-apiserver can
be installed here (see tests/export/test_k8s_sync.py for what that does and does not prove);
Slurm is the real slurmctld/slurmd lab of tests/slurmlab.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.export.conftest import slurm_lab_fleet
from tests.export.test_k8s_sync import FOREIGN_TAINT, Kmock, _node
from tests.export.test_slurm_lab import node as sinfo_node
from tests.export.test_slurm_lab import quarantine
from tests.slurmlab import SlurmLab

from gpufleet.collect.slurm import SlurmClient
from gpufleet.domain.sync import Cause, Target
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.k8s import KubeNodes
from gpufleet.service.exports.sync import Systems, sync_round, sync_status

pytestmark = [
    pytest.mark.xdist_group("slurm"),
    pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning"),
]

BOTH = (Target.K8S, Target.SLURM)


@pytest.fixture
def cluster() -> Iterator[Kmock]:
    km = Kmock([_node("gpu-01", "8", team="llm"), _node("gpu-02", "8", team="llm"),
                _node("gpu-03", "8")])
    yield km
    km.close()


def _taint_keys(n: dict[str, Any]) -> list[str]:
    return [t["key"] for t in n["spec"].get("taints") or []]


def test_hand_resume_and_hand_untaint_show_in_status_and_next_sync_corrects_them(
    fleet: Fleet, tmp_path: Path, slurm: SlurmLab, cluster: Kmock
) -> None:
    slurm_lab_fleet(fleet, tmp_path / "lab")
    systems = Systems(k8s_api=KubeNodes(cluster.kubeconfig(tmp_path / "kubeconfig")),
                      slurm=SlurmClient(conf=slurm.conf))
    api = systems.kube(fleet)
    quarantine(fleet, "gpu-02", "Xid 79 on GPU 3")
    first = sync_round(fleet, BOTH, systems)
    assert first.ok, first
    assert "drain gpu-02" in first.results[1].changed
    assert "gpufleet.io/quarantined" in _taint_keys(api.list_nodes()["gpu-02"])
    clean = sync_status(fleet, BOTH, systems)
    assert clean.ok and clean.disagreements == []

    # By hand: an operator resumes the Slurm node, removes gpufleet's taint and edits a label.
    slurm.run("scontrol", "update", "nodename=gpu-02", "state=resume")
    slurm.wait_idle(["gpu-02"])
    api.patch_node("gpu-02", {"metadata": {"labels": {"gpufleet.io/state": "available"}},
                              "spec": {"taints": [dict(FOREIGN_TAINT)]}})
    before = api.list_nodes()

    st = sync_status(fleet, BOTH, systems)
    assert st.ok
    got = {(d.host, d.target, d.cause, d.next_sync) for d in st.disagreements}
    assert got == {
        ("gpu-02", Target.SLURM, Cause.BY_HAND,
         "drain with reason 'gpufleet:quarantined:fatal_xid Xid 79 on GPU 3'"),
        ("gpu-02", Target.K8S, Cause.BY_HAND,
         "add taint gpufleet.io/quarantined=fatal_xid:NoSchedule"),
        ("gpu-02", Target.K8S, Cause.BY_HAND, "set label gpufleet.io/state=quarantined"),
    }, st.disagreements
    whats = " | ".join(d.what for d in st.disagreements)
    assert "resumed by hand while quarantined" in whats
    assert "removed by hand" in whats
    # status writes nothing
    assert api.list_nodes() == before
    assert slurm.node_states()["gpu-02"] == "idle"

    fix = sync_round(fleet, BOTH, systems)
    assert fix.ok and fix.results[1].changed == ["drain gpu-02"]
    [k8s_change] = fix.results[0].changed
    assert k8s_change.startswith("gpu-02: ")
    n2 = api.list_nodes()["gpu-02"]
    assert _taint_keys(n2) == ["dedicated", "gpufleet.io/quarantined"]
    assert n2["metadata"]["labels"]["gpufleet.io/state"] == "quarantined"
    assert n2["metadata"]["labels"]["team"] == "llm"
    assert sinfo_node(slurm, "gpu-02")["reason"] == "gpufleet:quarantined:fatal_xid Xid 79 on GPU 3"
    assert sync_status(fleet, BOTH, systems).disagreements == []


def test_a_failing_target_never_stops_the_other(
    fleet: Fleet, tmp_path: Path, cluster: Kmock
) -> None:
    slurm_lab_fleet(fleet, tmp_path / "lab")
    broken = SlurmClient(bin_dir=tmp_path / "no-slurm-here")
    systems = Systems(k8s_api=KubeNodes(cluster.kubeconfig(tmp_path / "kubeconfig")),
                      slurm=broken)
    r = sync_round(fleet, (Target.SLURM, Target.K8S), systems)
    assert not r.ok
    k8s, slurm_res = sorted(r.results, key=lambda x: x.target.value)
    assert slurm_res.errors and "not found" in slurm_res.errors[0]
    assert k8s.ok and len(k8s.changed) == 3  # Kubernetes synced all the same
    st = sync_status(fleet, (Target.SLURM, Target.K8S), systems)
    assert not st.ok and st.errors[0].startswith("slurm: ")  # unreadable never "agrees"


def test_loop_stops_cleanly_on_sigterm(tmp_path: Path, cluster: Kmock) -> None:
    home = tmp_path / "home"
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    fleet = Fleet.open(home=home, url=url, actor="pytest")
    try:
        slurm_lab_fleet(fleet, tmp_path / "lab")
    finally:
        fleet.db.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update(GPUFLEET_HOME=str(home), GPUFLEET_DATABASE_URL=url,
               GPUFLEET_KUBECONFIG=str(cluster.kubeconfig(tmp_path / "kubeconfig")),
               GPUFLEET_SYNC_TARGETS="k8s", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "gpufleet.cli.main", "sync", "--every", "0.3s"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # two rounds: the first changes, the second not
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if sum("k8s: ok" in ln for ln in lines) >= 2:
                break
        assert sum("k8s: ok" in ln for ln in lines) >= 2, "".join(lines)
        assert "k8s: ok, 3 change(s)" in "".join(lines)
        assert "k8s: ok, 0 change(s)" in "".join(lines)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "".join(lines) + out
    assert "SIGTERM: stopping after this round" in out
    assert "stopped after" in out
    status = subprocess.run([*cmd[:4], "status", "--json"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert '"disagreements": []' in status.stdout
    env.pop("GPUFLEET_SYNC_TARGETS")
    none = subprocess.run([*cmd[:4], "--once"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert none.returncode == 2 and "GPUFLEET_SYNC_TARGETS" in none.stdout + none.stderr
