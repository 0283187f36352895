"""``gpufleet reimage`` drains first (issue 26, item 3), on SQLite and PostgreSQL, against the
real dynamic Redfish emulator (sushy-emulator) and kmock as the cluster (the API server's
eviction response: tests/export/kmock_eviction.py): a PodDisruptionBudget that blocks the
drain refuses the reimage (exit 6, the budget named, no media inserted); ``--no-drain``
reimages and the ``bmc`` event says the drain was skipped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.bmc.redfishlab import Emulator, serve_files
from tests.bmc.test_bmc_power import _enroll, gf  # noqa: F401 (gf: the fixture)
from tests.clitools import Cli, flat
from tests.export.kmock_eviction import serve_evictions
from tests.export.test_k8s_drain import _node, _pods, train_under_budget
from tests.export.test_k8s_sync import Kmock

from gpufleet.service.hosts.drain import KubeDrain

pytestmark = [pytest.mark.xdist_group("redfish"),
              pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning")]


@pytest.fixture
def cluster() -> Iterator[Kmock]:
    km = Kmock([_node("gpu-d")], setup=serve_evictions)
    yield km
    km.close()


def test_reimage_drains_first_no_drain_recorded(
    gf: Cli, dynamic_bmc: Emulator, tmp_path: Path, cluster: Kmock  # noqa: F811
) -> None:
    _enroll(gf, "gpu-d", dynamic_bmc, 5)
    kubeconfig = cluster.kubeconfig(tmp_path / "kubeconfig")
    api = KubeDrain(kubeconfig)
    train_under_budget(api, "gpu-d")
    gf.env["GPUFLEET_KUBECONFIG"] = str(kubeconfig)
    gf.env["GPUFLEET_KUBE_DRAIN_TIMEOUT"] = "0.5"
    images = tmp_path / "images"
    images.mkdir()
    (images / "gpu.iso").write_bytes(b"\0" * 4096)
    with serve_files(images) as base:
        r = gf.run("reimage", "gpu-d", "--image", f"{base}/gpu.iso", "--yes", code=6)
        assert "drain of node gpu-d blocked" in flat(r.stderr), r.stderr
        assert "train-pdb" in flat(r.stderr)
        assert not [e for e in gf.json("events", "--kind", "bmc")
                    if e["message"].startswith("reimage")]  # nothing was done
        done = gf.json("reimage", "gpu-d", "--image", f"{base}/gpu.iso", "--yes", "--no-drain")
        assert done["ok"], done
    assert _pods(api, "gpu-d") == ["train-0"]
    [ev] = [e for e in gf.json("events", "--kind", "bmc") if e["message"].startswith("reimage")]
    assert ev["data"]["drain"] == {"skipped": "--no-drain", "ok": None}
