"""Issue 26 item 7, on SQLite and PostgreSQL: a pool's baseline pins a MIG layout (a
mig-parted config file), ``drift`` shows the hosts whose layout differs, and a ``--mig``
campaign shows and runs the nvidia-smi commands on the lab, which records and simulates them
(lab/mig.py; the lab has the real capture of one H100 MIG layout), after which the hosts'
collected layout matches the pool's baseline; GFD's MIG labels follow the group's
``gpufleet_mig_strategy``."""

from __future__ import annotations

from pathlib import Path

from tests.labproof import prove_lab

from gpufleet.domain.campaign import ActionKind, CampaignStatus
from gpufleet.domain.pins import overlay_pins
from gpufleet.domain.spec import Baseline
from gpufleet.inventory import load_inventory
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import LabFleet
from gpufleet.lab.mig import LOG
from gpufleet.service.campaigns.campaign import CampaignSpec, create_campaign, run_campaign
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.baselines import (
    baseline_from_host,
    drift,
    list_pools,
    mig_config_pin,
    save_baseline,
    set_pool_baseline,
)
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.labels import lean_host_labels
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.summary import host_labels

CONFIG = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  h100-balanced:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
"""
BALANCED = "1g.10gb:2,2g.20gb:1,3g.40gb:1"


def _pool_pins_mig(fleet: Fleet, tmp_path: Path) -> tuple[str, Path]:
    """Three validated h100-8x hosts (MIG off), gpu-03 already in the H100 MIG layout; the
    pool's baseline ``h100-mig``: gpu-01's pins with the ``h100-balanced`` MIG layout."""
    lab = tmp_path / "lab"
    fl = enroll_lab(fleet, lab, 3, models=["h100-8x"], faults={})
    moved = [h.model_copy(update={"model": "h100-mig-8x"}) if h.name == "gpu-03" else h
             for h in fl.hosts]
    LabFleet(hosts=moved, seed=fl.seed).save(lab)
    prove_lab(fleet, fl, tmp_path)
    validate(fleet)
    (pool,) = {p.name for p in list_pools(fleet)}
    cfg = tmp_path / "mig-parted.yaml"
    cfg.write_text(CONFIG)
    pin = mig_config_pin(f"{cfg}:h100-balanced")
    assert pin == {"all": BALANCED}
    host = baseline_from_host(fleet, "gpu-01", "h100-mig")
    values, changes = overlay_pins(host.model_dump(), {"mig": pin})
    assert [(c.field, c.pinned) for c in changes] == [("mig", {"all": BALANCED})]
    save_baseline(fleet, Baseline.model_validate(values))
    set_pool_baseline(fleet, pool, "h100-mig")
    return pool, lab


def test_drift_shows_the_hosts_whose_mig_layout_differs(fleet: Fleet, tmp_path: Path) -> None:
    pool, _ = _pool_pins_mig(fleet, tmp_path)
    (p,) = drift(fleet).pools
    assert p.pool == pool and p.baseline == "h100-mig" and p.drifts
    mig = next(f for f in p.fields if f.field == "mig.all")
    assert mig.expected == BALANCED and mig.matching == 1
    assert mig.others == {"disabled": ["gpu-01", "gpu-02"]}
    assert f"mig.all {BALANCED} (baseline) on 1 host, disabled on 2" in p.describe()


def test_a_mig_campaign_shows_and_runs_the_commands_on_the_lab(
    fleet: Fleet, tmp_path: Path
) -> None:
    _, lab = _pool_pins_mig(fleet, tmp_path)
    view = create_campaign(fleet, CampaignSpec(
        name="mig-h100", target_baseline="h100-mig", selector="gpu-01,gpu-02",
        action_kind=ActionKind.MIG, action="mig", ticket="CHG-7", canary=1, waves="100%",
        pool_floor="0%", max_rack_share="100%",
    ))
    # the commands it will run are the campaign's action (campaign show prints them)
    assert view.action.splitlines()[2:] == [
        "set -e",
        "nvidia-smi -mig 1",
        "nvidia-smi mig -dci || true",
        "nvidia-smi mig -dgi || true",
        "nvidia-smi mig -cgi 3g.40gb,2g.20gb,1g.10gb,1g.10gb -C",
        ")",
    ]
    done = run_campaign(fleet, "mig-h100", no_drain=True)
    assert done.status is CampaignStatus.COMPLETED, done
    # the lab recorded each host's commands
    log = (lab / LOG).read_text().splitlines()
    commands = [c for c in view.action.splitlines() if c.startswith("nvidia-smi")]
    assert sorted(log) == sorted(f"gpu-0{i}: {c}" for i in (1, 2) for c in commands)
    assert {h.model for h in LabFleet.load(lab).hosts} == {"h100-mig-8x"}
    (p,) = drift(fleet).pools  # the campaign collected the hosts again
    assert not any(f.field.startswith("mig") for f in p.fields), p.describe()


def test_a_layout_the_lab_has_no_capture_of_fails_the_host(fleet: Fleet, tmp_path: Path) -> None:
    """A layout the lab cannot show (no capture) fails on the lab host, recorded, unchanged."""
    _, lab = _pool_pins_mig(fleet, tmp_path)
    save_baseline(fleet, Baseline(name="all-small", mig={"all": "1g.10gb:7"}))
    create_campaign(fleet, CampaignSpec(
        name="mig-small", target_baseline="all-small", selector="gpu-01",
        action_kind=ActionKind.MIG, action="mig", ticket="CHG-8", canary=1, waves="100%",
        pool_floor="0%", max_rack_share="100%",
    ))
    done = run_campaign(fleet, "mig-small", no_drain=True)
    assert done.status is not CampaignStatus.COMPLETED
    (row,) = [h for h in done.hosts if h.host == "gpu-01"]
    assert "no capture of MIG layout 1g.10gb:7 on lab model h100-8x" in (row.reason or "")
    assert LabFleet.load(lab).host("gpu-01").model == "h100-8x"
    assert "gpu-01: nvidia-smi mig -cgi " + ",".join(["1g.10gb"] * 7) + " -C" in (
        lab / LOG).read_text().splitlines()


def test_gfd_mig_labels_follow_the_groups_strategy(fleet: Fleet, tmp_path: Path) -> None:
    """``gpufleet_mig_strategy=mixed`` on the group: GFD's mixed-strategy labels from the
    collected layout, the same by the lean ``labels HOST`` read and the full path; single:
    the INVALID labels GFD gives a node with several profiles."""
    lab = tmp_path / "lab"
    enroll_lab(fleet, lab, 2, models=["h100-mig-8x"], faults={})
    inv = lab / "inventory.ini"
    text = inv.read_text()
    inv.write_text(text.replace("gpufleet_nvswitch=true\n",
                                "gpufleet_nvswitch=true\ngpufleet_mig_strategy=mixed\n"))
    enroll(fleet, load_inventory(inv))
    collect(fleet)
    (full,) = host_labels(fleet, "gpu-01")
    mig = {k: v for k, v in full.labels.items() if k.startswith("nvidia.com/mig")}
    assert mig["nvidia.com/mig.strategy"] == "mixed"
    assert mig["nvidia.com/mig-1g.10gb.count"] == "16"
    assert mig["nvidia.com/mig-3g.40gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"
    assert lean_host_labels(fleet.db.url, "gpu-01") == [full]
    inv.write_text(text.replace("gpufleet_nvswitch=true\n",
                                "gpufleet_nvswitch=true\ngpufleet_mig_strategy=single\n"))
    enroll(fleet, load_inventory(inv))
    (single,) = host_labels(fleet, "gpu-02")
    assert single.labels["nvidia.com/mig.strategy"] == "single"
    assert single.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-INVALID"
    assert single.labels["nvidia.com/gpu.count"] == "0"
