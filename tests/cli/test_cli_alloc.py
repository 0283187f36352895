"""The allocation commands end to end on SQLite and PostgreSQL: exit codes and JSON shapes of
allocate, leases, capacity, capacity check, hosts eta and maintenance on --eta."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, "alice")
    lab = c.tmp / "lab"
    c.run("lab", "create", "--hosts", "3", "--model", "h100-8x", "--dir", str(lab))
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    c.run("validate")
    yield c


CHECK_KEYS = {
    "ok",
    "requested",
    "headroom",
    "needed",
    "allocatable",
    "missing",
    "model",
    "profile",
    "message",
    "held",
    "frees",
    "cuda",
    "k8s",  # issue 26: capacity check --k8s (null without it)
}


def test_capacity_check_exit_codes_and_json_shape(gf: Cli) -> None:
    ok = gf.json(
        "capacity",
        "check",
        "--gpus",
        "16",
        "--model",
        "H100",
        "--profile",
        "inference",
        "--headroom",
        "10%",
    )
    assert set(ok) == CHECK_KEYS and ok["ok"] is True and ok["needed"] == 18
    assert ok["allocatable"] == 24
    no = gf.json("capacity", "check", "--gpus", "32", "--model", "H100", code=1)
    assert set(no) == CHECK_KEYS and no["ok"] is False and no["missing"] == 8
    assert "not enough capacity for 32 GPUs H100" in no["message"]
    r = gf.run("capacity", "check", "--gpus", "16", "--headroom", "ten", code=2)
    assert "--headroom 'ten'" in flat(r.stderr)
    gf.run("capacity", "check", code=2)  # --gpus is required


def test_cuda_gate_exit_codes_and_the_reason(gf: Cli) -> None:
    """Issue 26 (seed 001): an image built for CUDA 12.4 on a node whose driver serves 12.2
    is refused with the reason; a malformed --cuda is a usage error."""
    lab = str(gf.tmp / "lab")
    gf.run("lab", "change", "gpu-02", "--driver", "535.154.05", "--dir", lab)
    gf.run("validate")  # collects first: the changed driver is re-validated
    no = gf.json("capacity", "check", "--gpus", "24", "--cuda", "12.4", code=1)
    assert no["ok"] is False and no["allocatable"] == 16 and no["cuda"] == "12.4"
    assert "gpu-02: driver 535.154.05 serves CUDA up to 12.2" in no["message"]
    r = gf.run("capacity", "check", "--gpus", "24", "--cuda", "12.4", code=1)
    assert "gpu-02: driver 535.154.05 serves CUDA up to 12.2" in flat(r.stderr)
    assert gf.json("capacity", "check", "--gpus", "24", "--cuda", "12.2")["ok"] is True
    r = gf.run("capacity", "check", "--gpus", "8", "--cuda", "twelve", code=2)
    assert "--cuda 'twelve'" in flat(r.stderr)
    refused = gf.json("allocate", "--gpus", "8", "--cuda", "12.4", "--selector", "gpu-02",
                      "--owner", "a", "--purpose", "p", "--for", "1h", code=1)
    assert refused["granted"] is False
    assert "gpu-02: driver 535.154.05 serves CUDA up to 12.2" in refused["reason"]
    got = gf.json("allocate", "--gpus", "8", "--cuda", "12.4", "--owner", "a",
                  "--purpose", "p", "--for", "1h")
    assert got["granted"] is True and got["lease"]["hosts"] != ["gpu-02"]


def test_allocate_leases_capacity_and_release(gf: Cli) -> None:
    got = gf.json(
        "allocate",
        "--gpus",
        "16",
        "--model",
        "H100",
        "--owner",
        "team-a",
        "--purpose",
        "llm pretrain",
        "--for",
        "72h",
    )
    assert got["granted"] is True
    lease = got["lease"]
    assert set(lease) >= {
        "id",
        "owner",
        "purpose",
        "state",
        "actor",
        "starts_at",
        "ends_at",
        "hosts",
        "gpus",
        "gpu_uuids",
    }
    assert lease["owner"] == "team-a" and lease["actor"] == "alice" and lease["gpus"] == 16
    assert lease["state"] == "active" and len(lease["hosts"]) == 2
    assert gf.state(lease["hosts"][0]) == "allocated"
    refused = gf.json(
        "allocate", "--gpus", "16", "--owner", "b", "--purpose", "x", "--for", "1h", code=1
    )
    assert refused["granted"] is False and refused["missing_gpus"] == 8
    assert "2 are allocated until" in refused["reason"]
    r = gf.run("allocate", "--gpus", "8", "--owner", "b", "--purpose", "x", code=2)
    assert "--for" in flat(r.stderr)  # neither --for nor --until
    cap = gf.json("capacity")
    assert cap["totals"]["allocated"] == 16 and cap["totals"]["free"] == 8
    later = gf.json("capacity", "--at", "2099-01-01T00:00")
    assert later["totals"]["free"] == 24
    listed = gf.json("leases", "list")
    assert [x["id"] for x in listed] == [lease["id"]]
    assert gf.json("leases", "show", str(lease["id"]))["hosts"] == lease["hosts"]
    assert [x["id"] for x in gf.json("leases", "expiring", "--within", "80h")] == [lease["id"]]
    assert gf.json("leases", "expiring", "--within", "24h") == []
    gf.run("leases", "show", "999", code=4)
    out = gf.json("leases", "release", str(lease["id"]))
    assert out["lease"]["state"] == "released" and out["reclaiming"] == lease["hosts"]
    gf.run("leases", "release", str(lease["id"]), code=5)


def test_eta_on_maintenance_and_hosts_eta(gf: Cli) -> None:
    gf.run("maintenance", "on", "gpu-01", "--reason", "fan", "--eta", "2030-01-02T18:00")
    summary = gf.json("summary")
    assert summary["back"] == [
        {"host": "gpu-01", "state": "maintenance", "eta": "2030-01-02T18:00:00+00:00"}
    ]
    assert "back by" in flat(gf.run("hosts", "show", "gpu-01").stdout)
    gf.run("hosts", "eta", "gpu-02", "2030-01-01T00:00", code=5)  # available: refused
    gf.run("hosts", "eta", "gpu-01", "2030-01-03T09:00")
    assert gf.json("capacity")["back"][0]["eta"] == "2030-01-03T09:00:00+00:00"


def test_lease_details_and_policy_read_as_chinese(gf: Cli) -> None:
    """Issue 29 item 8: a lease's detail lines, its release and a pool's policy line are
    Chinese under zh_CN; the English lines are unchanged."""
    from gpufleet import i18n

    got = gf.json("allocate", "--gpus", "8", "--owner", "team-a", "--purpose", "x",
                  "--for", "1h")
    lid = str(got["lease"]["id"])
    pool = gf.json("hosts", "list")[0]["pool"]
    en = flat(gf.run("leases", "show", lid).stdout)
    assert "asked by alice at" in en and "lessee users:" in en
    i18n.reset("zh_CN")
    try:
        zh = flat(gf.run("leases", "show", lid).stdout)
        assert "由 alice 于" in zh and "租户用户：" in zh and "lessee users" not in zh
        policy = flat(gf.run("leases", "policy", pool, "--on-expiry", "notify").stdout)
        assert policy.startswith(f"资源池 {pool}：租约到期后 notify"), policy
        granted = flat(gf.run("allocate", "--gpus", "8", "--owner", "team-b", "--purpose",
                              "y", "--for", "1h").stdout)
        assert "已分配给 team-b：" in granted and "块 GPU）" in granted, granted
        released = flat(gf.run("leases", "release", lid).stdout)
        assert released.startswith(f"租约 {lid} ") and "转入回收" in released, released
    finally:
        i18n.reset()
