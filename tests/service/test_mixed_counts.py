"""A mixed fleet counted and shown right (issue 15), on SQLite and PostgreSQL.

* A host carrying NVIDIA GPUs and Ascend NPUs (collected through the real result path: the
  lab's H100 host answering with the lab's 910B3 host's npu-smi/hccn_tool/version sections
  beside its own) counts both vendors' accelerators in the summary and in capacity, each
  under its own model; only hosts whose snapshot counts accelerators beside nvidia-smi's GPU
  rows have their facts decoded (none in an NVIDIA fleet).
* The summary's first line says GPUs for an NVIDIA fleet, as before, and accelerators with
  each kind's count for a fleet mixing GPUs and NPUs; ``--json`` keeps its keys and adds
  ``per_vendor``; the dashboard's counters say the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, select
from tests.labproof import prove_lab

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.cli.summary import summary_json
from gpufleet.collect.bundle import Section, render_bundle
from gpufleet.collect.transport import Outcome, RawResult
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import LabFleet
from gpufleet.lab.renderers import render_sections
from gpufleet.service.allocation.capacity import capacity
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.tokens import Role, create_token
from gpufleet.service.hosts import accelerator_counts
from gpufleet.service.hosts.accelerator_counts import Group, accelerators_from_facts
from gpufleet.service.hosts.collect import apply_result, claim
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.summary import FleetSummary, fleet_summary
from gpufleet.store.tables import Host
from gpufleet.web.app import attach


def _lab(fleet: Fleet, d: Path, models: list[str], faults: dict[str, list[str]]) -> Path:
    fl = enroll_lab(fleet, d, len(models), models=models, faults=faults, now=fleet.now())
    prove_lab(fleet, fl, d.parent)  # training-multinode asks for proof (issue 24 item 5)
    validate(fleet)
    return d


def _dual_vendor_sections(nvidia: dict[str, Section], npu: dict[str, Section]) -> list[Section]:
    """The NVIDIA host's answers, with the NPU host's where the NVIDIA host has no such tool
    (npu-smi, hccn_tool, the Ascend version files), and the NPUs' PCI functions added to its
    lspci."""
    out = {n: npu[n] if s.rc != 0 and npu[n].rc == 0 else s for n, s in nvidia.items()}
    davinci = [ln for ln in npu["lspci-nn"].stdout.splitlines() if "[19e5:" in ln]
    assert len(davinci) == 8
    lspci = out["lspci-nn"]
    out["lspci-nn"] = Section(
        lspci.name, "\n".join([lspci.stdout, *davinci]), lspci.stderr, lspci.rc
    )
    return list(out.values())


@pytest.fixture
def dual(fleet: Fleet, tmp_path: Path) -> Fleet:
    """gpu-01: 8x H100; gpu-02: 8x Ascend 910B3; gpu-03: 8x H100 and 8x 910B3 (re-collected
    with both vendors' sections through the result path collection uses)."""
    d = _lab(fleet, tmp_path / "lab", ["h100-8x", "ascend-910b3-8x", "h100-8x"], {})
    hosts = {h.name: h for h in LabFleet.load(d).hosts}
    bundle = render_bundle(
        _dual_vendor_sections(render_sections(hosts["gpu-03"]), render_sections(hosts["gpu-02"]))
    )
    run_id, held, _ = claim(fleet, "gpu-03", None, timedelta(minutes=5))
    fleet.clock.advance(minutes=1)  # type: ignore[attr-defined]
    res = apply_result(
        fleet,
        run_id,
        held[0].host_id,
        RawResult("gpu-03", Outcome.OK, "", output=bundle),
        held[0].token,
    )
    assert res.outcome is Outcome.OK, res.reason
    return fleet


@pytest.fixture
def decoded(fleet: Fleet) -> Iterator[list[int]]:
    """The snapshot ids whose facts documents the database is asked for (what the counts
    decode), seen on the real connection: every statement that reads ``fact_snapshots.facts``
    by id, and the ids bound to it."""
    seen: list[int] = []

    def record(
        conn: object, cursor: object, statement: str, params: Any, context: object, many: bool
    ) -> None:
        if "fact_snapshots.facts" not in statement or "fact_snapshots.id IN" not in statement:
            return
        values = params.values() if isinstance(params, dict) else params
        seen.extend(v for v in values if isinstance(v, int))

    event.listen(fleet.db.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(fleet.db.engine, "before_cursor_execute", record)


def _counted(fleet: Fleet, decoded: list[int]) -> tuple[dict[int, list[Group]], list[int]]:
    """What the counts make of every host's latest facts, and the snapshots whose facts
    documents they asked the database for."""
    decoded.clear()
    with fleet.db.session() as s:
        counted = accelerators_from_facts(s, list(s.scalars(select(Host.id))))
    return counted, sorted(decoded)


def _latest_snapshots(fleet: Fleet) -> dict[str, int]:
    with fleet.db.session() as s:
        rows = s.execute(select(Host.name, Host.latest_snapshot_id))
        return {n: sid for n, sid in rows if sid is not None}


def test_a_host_with_nvidia_gpus_and_ascend_npus_counts_both(
    dual: Fleet, decoded: list[int]
) -> None:
    sm = fleet_summary(dual)
    assert sm.accelerators == [
        {"vendor": "huawei", "model": "910B3", "hosts": 2, "accelerators": 16, "available": 16},
        {
            "vendor": "nvidia",
            "model": "NVIDIA H100 80GB HBM3",
            "hosts": 2,
            "accelerators": 16,
            "available": 16,
        },
    ]
    assert sm.per_state == {"available": 3} and sm.gpus_total == sm.gpus_available == 32
    assert sm.per_vendor == [
        {"vendor": "huawei", "noun": "NPUs", "brand": "Ascend", "accelerators": 16,
         "available": 16},
        {"vendor": "nvidia", "noun": "GPUs", "brand": "NVIDIA", "accelerators": 16,
         "available": 16},
    ]
    # gpu-03 is validated for the H100 pool's profiles: its NPUs show beside its GPUs
    assert sm.gpus_per_profile_model["training-multinode"] == {
        "NVIDIA H100 80GB HBM3": 16,
        "huawei 910B3": 8,
    }
    assert sm.gpus_per_profile_model["test"] == {"NVIDIA H100 80GB HBM3": 16, "huawei 910B3": 16}
    snaps = _latest_snapshots(dual)
    counted, asked = _counted(dual, decoded)
    assert asked == sorted([snaps["gpu-02"], snaps["gpu-03"]])  # not gpu-01's
    assert sorted(len(groups) for groups in counted.values()) == [1, 2]  # 910B3; H100 + 910B3

    decoded.clear()
    rep = capacity(dual)
    free = {
        (r["vendor"], r["model"], r["pool"]): r["free"] for r in rep.rows if r["profile"] == "test"
    }
    assert free == {
        ("nvidia", "H100 80GB HBM3", "train-h100"): 16,
        ("huawei", "huawei 910B3", "train-h100"): 8,
        ("huawei", "huawei 910B3", "train-910b"): 8,
    }
    assert rep.totals["free"] == 32
    assert sorted(decoded) == sorted([snaps["gpu-02"], snaps["gpu-03"]])


def test_the_counts_line_of_a_mixed_fleet_says_accelerators(dual: Fleet, tmp_path: Path) -> None:
    sm = fleet_summary(dual)
    assert sm.noun == "accelerators" and not sm.gpus_only
    assert sm.counts_line() == (
        "3 hosts, 32 accelerators (16 Ascend NPUs, 16 NVIDIA GPUs), 32 available")
    out = summary_json(sm)
    assert (out["hosts"], out["gpus_total"], out["gpus_available"]) == (3, 32, 32)
    assert out["per_vendor"] == sm.per_vendor and out["accelerators"] == sm.accelerators
    # the remote CLI renders the API's JSON back through FleetSummary: the same line
    back: dict[str, Any] = out | {"drift": sm.drift}
    assert FleetSummary(**back).counts_line() == sm.counts_line()

    html = _overview(dual)
    assert '<span class="n">32</span><span class="l">Accelerators</span>' in html
    assert '<span class="n">32</span><span class="l">Accelerators available</span>' in html


def test_an_nvidia_fleet_decodes_no_facts_and_still_says_gpus(
    fleet: Fleet, tmp_path: Path, decoded: list[int]
) -> None:
    # gpu-02 misses a GPU: its snapshot counts 7 and has 7 GPU rows (nothing to decode)
    _lab(
        fleet,
        tmp_path / "lab",
        ["a100-8x", "h100-8x", "l40s-1x", "h100-8x"],
        {"gpu-02": ["gpu-missing"]},
    )
    sm = fleet_summary(fleet)
    rep = capacity(fleet)
    assert _counted(fleet, decoded) == ({}, [])
    assert sm.gpus_total == 8 + 7 + 1 + 8 == sum(rep.totals.values())
    assert [v["vendor"] for v in sm.per_vendor] == ["nvidia"]
    assert sm.gpus_only and sm.noun == "GPUs"
    avail = sm.gpus_available
    assert sm.counts_line() == f"4 hosts, 24 GPUs, {avail} GPUs available"
    html = _overview(fleet)
    assert '<span class="n">24</span><span class="l">GPUs</span>' in html
    assert f'<span class="n">{avail}</span><span class="l">GPUs available</span>' in html


def test_one_kind_reads_as_that_kind() -> None:
    line = accelerator_counts.fleet_counts_line
    npus = [{"vendor": "huawei", "noun": "NPUs", "accelerators": 16, "available": 8}]
    assert line(2, 16, 8, npus) == "2 hosts, 16 NPUs, 8 NPUs available"
    gpus = [
        {"vendor": "nvidia", "noun": "GPUs", "accelerators": 8, "available": 8},
        {"vendor": "amd", "noun": "GPUs", "accelerators": 4, "available": 0},
    ]
    assert line(2, 12, 8, gpus) == "2 hosts, 12 GPUs, 8 GPUs available"
    assert line(0, 0, 0, []) == "0 hosts, 0 GPUs, 0 GPUs available"
    # a mixed fleet counts each vendor's (issue 28), by its brand (a row without one, from
    # an older server's JSON: the vendor's name)
    assert line(3, 28, 8, [*npus, *gpus]) == (
        "3 hosts, 28 accelerators (16 huawei NPUs, 8 nvidia GPUs, 4 amd GPUs), 8 available"
    )
    branded = [{**v, "brand": b} for v, b in zip([*npus, *gpus],
                                                  ["Ascend", "NVIDIA", "AMD Instinct"],
                                                  strict=True)]
    assert line(3, 28, 8, branded) == (
        "3 hosts, 28 accelerators (16 Ascend NPUs, 8 NVIDIA GPUs, 4 AMD Instinct GPUs), "
        "8 available"
    )
    brands = [accelerator_counts.accelerator_brand(v, n) for v, n in
              (("nvidia", "GPUs"), ("huawei", "NPUs"), ("amd", "GPUs"), ("hygon", "DCUs"),
               ("cambricon", "MLUs"), ("kunlunxin", "XPUs"), ("metax", "GPUs"),
               ("iluvatar", "GPUs"), ("enflame", "GCUs"), ("x", "accelerators"))]
    assert brands == ["NVIDIA", "Ascend", "AMD Instinct", "Hygon", "Cambricon", "Kunlunxin",
                      "MetaX", "Iluvatar CoreX", "Enflame", "x"]
    nouns = [accelerator_counts.accelerator_noun(v) for v in ("nvidia", "huawei", "amd", "x")]
    assert nouns == ["GPUs", "NPUs", "GPUs", "accelerators"]


def _overview(fleet: Fleet) -> str:
    token = create_token(fleet, "dash", Role.VIEWER)[1]
    app = create_app(fleet, TokenStore(None))
    attach(app, fleet, app.state.ctx.tokens)
    with TestClient(app) as c:
        r = c.post("/login", data={"token": token, "next": "/"}, follow_redirects=False)
        assert r.status_code == 303, r.text
        page = c.get("/")
    assert page.status_code == 200, page.text[:300]
    return str(page.text)
