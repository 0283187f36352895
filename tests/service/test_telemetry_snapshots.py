"""Issue 8, goal 4 (history that does not explode): readings do not write snapshots.

A collection whose facts differ from the latest snapshot's only in their instantaneous
readings (temperatures, power, utilization ...: ``gpufleet.domain.telemetry``) writes no new
snapshot, GPU nor NIC rows, and the latest snapshot's facts document becomes the new one (its
readers see the latest readings); a driver, GPU identity or ECC counter change still writes a
snapshot and fires its change events. On both databases, with lab hosts whose rendered
nvidia-smi / rocm-smi readings are varied between collections. The stable view drops exactly
the declared readings.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import split_bundle
from gpufleet.domain.accelerators import Accelerator, Vendor
from gpufleet.domain.events import EventKind
from gpufleet.domain.facts import (
    FACTS_VERSION,
    ClockEventReasons,
    Gpu,
    GpuProcess,
    HostFacts,
    MigDevice,
    NvidiaSmiReport,
    TemperatureThresholds,
    UnreadableXid,
    XidEvent,
)
from gpufleet.domain.labels import fact_labels
from gpufleet.domain.snapshot_columns import derived_columns
from gpufleet.domain.telemetry import ACCELERATOR_READINGS, GPU_READINGS, READINGS, stable_view
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import LabFleet, apply_change, create_fleet
from gpufleet.lab.renderers import render_output
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect, facts_digest
from gpufleet.store.tables import Event, FactSnapshot, GpuRow, Host, NicRow
from gpufleet.testing import FakeClock

MODELS = ["a100-8x", "h100-8x", "mi100-4x"]  # nvidia-smi XML, nvidia-smi -q text, rocm-smi


def _vary(lab_dir: Path, k: int) -> None:
    """Every lab host answers with its readings moved ``k`` rounds (0: as rendered)."""
    lab = LabFleet.load(lab_dir)
    hosts = [h.model_copy(update={"readings": k}) for h in lab.hosts]
    lab.model_copy(update={"hosts": hosts}).save(lab_dir)


def _lab(fleet: Fleet, tmp_path: Path, models: list[str] = MODELS) -> Path:
    d = tmp_path / "lab"
    enroll_lab(fleet, d, len(models), models=models, faults={})
    return d


def _history(
    fleet: Fleet,
) -> tuple[int, int, int, dict[str, tuple[int, str | None, dict[str, Any]]]]:
    """(snapshots, GPU rows, NIC rows, host -> (latest snapshot id, its hash, its facts))."""
    with fleet.db.session() as s:
        latest = {
            h.name: (snap.id, snap.content_hash, snap.facts)
            for h, snap in s.execute(
                select(Host, FactSnapshot).join(
                    FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id
                )
            ).all()
        }
        return (
            s.scalar(select(func.count(FactSnapshot.id))) or 0,
            s.scalar(select(func.count(GpuRow.id))) or 0,
            s.scalar(select(func.count(NicRow.id))) or 0,
            latest,
        )


def _temps(doc: dict[str, Any]) -> list[Any]:
    gpus = (doc.get("nvidia_smi") or {}).get("gpus") or []
    return [g["temperature_c"] for g in gpus] + [a["temperature_c"] for a in doc["accelerators"]]


def test_readings_only_change_updates_the_latest_facts_in_place(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    d = _lab(fleet, tmp_path)
    collect(fleet)
    n_snap, n_gpu, n_nic, first = _history(fleet)
    assert n_snap == len(MODELS) and n_gpu == 8 + 8 and n_nic > 0
    _vary(d, 1)
    clock.advance(minutes=5)
    rep = collect(fleet)
    assert rep.counts == {"ok": len(MODELS)}
    assert all(r.changes == [] for r in rep.results)
    n_snap2, n_gpu2, n_nic2, second = _history(fleet)
    assert (n_snap2, n_gpu2, n_nic2) == (n_snap, n_gpu, n_nic)  # no new history rows
    for name, (snap_id, digest, doc) in first.items():
        snap_id2, digest2, doc2 = second[name]
        by = next(r for r in rep.results if r.host == name)
        assert by.snapshot_id == snap_id == snap_id2 and digest2 == digest
        # the latest facts are the last collection's: new readings, newer collected_at
        before, after = _temps(doc), _temps(doc2)
        assert before and all(t is not None for t in before), name
        assert after == [t + 7 for t in before], name
        assert doc2["collected_at"] > doc["collected_at"]
        assert doc2 != doc and stable_view(doc2) == stable_view(doc)
    gpu01 = second["gpu-01"][2]["nvidia_smi"]
    assert gpu01["timestamp"] == "Mon Dec  1 10:01:00 2026"
    with fleet.db.session() as s:
        assert s.scalar(
            select(func.count(Event.id)).where(Event.kind == EventKind.CHANGE_DETECTED)
        ) == 0
    # once more: still the one snapshot per host, the readings of the third collection
    _vary(d, 2)
    clock.advance(minutes=5)
    collect(fleet)
    n_snap3, n_gpu3, _, third = _history(fleet)
    assert (n_snap3, n_gpu3) == (n_snap, n_gpu)
    for name, (_, _, doc) in first.items():
        assert _temps(third[name][2]) == [t + 14 for t in _temps(doc)]


def test_driver_gpu_and_ecc_changes_still_write_snapshots(
    fleet: Fleet, tmp_path: Path
) -> None:
    d = _lab(fleet, tmp_path, ["a100-8x", "h100-8x", "a100-8x", "mi100-4x"])
    collect(fleet)
    n_snap, n_gpu, _, first = _history(fleet)
    lab = apply_change(LabFleet.load(d), "gpu-01", driver="999.1.1")
    lab = apply_change(lab, "gpu-02", add_faults=["ecc-uncorrectable"])
    apply_change(lab, "gpu-03", gpu_swap=True).save(d)
    _vary(d, 1)  # the readings move too, as they would
    rep = collect(fleet)
    by = {r.host: r for r in rep.results}
    n_snap2, n_gpu2, _, second = _history(fleet)
    assert n_snap2 == n_snap + 3
    assert n_gpu2 == n_gpu + 3 * 8  # the new snapshots list their GPUs
    for name in ("gpu-01", "gpu-02", "gpu-03"):
        assert second[name][0] != first[name][0] and second[name][1] != first[name][1]
        assert by[name].snapshot_id == second[name][0]
    assert second["gpu-04"][:2] == first["gpu-04"][:2]  # its readings alone moved
    assert _temps(second["gpu-04"][2]) == [t + 7 for t in _temps(first["gpu-04"][2])]
    assert any("driver" in c and "999.1.1" in c for c in by["gpu-01"].changes)
    assert any(c.startswith("gpu_swap") for c in by["gpu-03"].changes)
    assert by["gpu-02"].changes == []  # a new ECC count is history, not a "change" kind
    new_ecc = second["gpu-02"][2]["nvidia_smi"]["gpus"]
    assert any((g["ecc_volatile"] or {}).get("uncorrectable") for g in new_ecc)
    with fleet.db.session() as s:
        changed = sorted(
            n or ""
            for n in s.scalars(
                select(Event.host_name).where(Event.kind == EventKind.CHANGE_DETECTED)
            )
        )
    assert changed == ["gpu-01", "gpu-03"]
    # the new snapshots hold the new readings as well
    assert _temps(second["gpu-01"][2]) == [t + 7 for t in _temps(first["gpu-01"][2])]


# ------------------------------------------------------------------ the stable view (pure)


def _lab_docs() -> list[HostFacts]:
    out = []
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    for h in create_fleet(4, models=[*MODELS, "ascend-910b3-8x"], faults={}).hosts:
        text = render_output(h)
        out.append(assemble_facts(split_bundle(text, h.name), now, h.name))
    return out


def _is_reading(path: tuple[str, ...]) -> bool:
    declared = [tuple(p.replace("[]", ".[]").split(".")) for p in READINGS]
    return any(path[: len(p)] == p for p in declared)


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """(concrete path, leaf) of a JSON value: first element of every list only."""
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list) and value:
        yield from _leaves(value[0], (*path, 0))
    else:
        yield path, value


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node: Any = out
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return out


def _other(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if value is None:
        return 1
    return [1] if isinstance(value, list) else {"x": 1}


def test_the_stable_view_drops_exactly_the_declared_readings() -> None:
    facts = _lab_docs()
    seen_readings: set[str] = set()
    for f in facts:
        doc = f.model_dump(mode="json")
        digest = facts_digest(doc)
        for path, leaf in _leaves(doc):
            generic = tuple("[]" if isinstance(k, int) else k for k in path)
            changed = facts_digest(_set(doc, path, _other(leaf)))
            if _is_reading(generic):
                seen_readings.add(".".join(generic).replace(".[]", "[]"))
                assert changed == digest, path  # a reading moves: same facts
            else:
                assert changed != digest, path  # anything else: other facts
    # the lab's hosts carry the main readings of both kinds of records
    assert {"collected_at", "nvidia_smi.timestamp", "nvidia_smi.gpus[].temperature_c",
            "nvidia_smi.gpus[].power_draw_w", "accelerators[].temperature_c"} <= seen_readings


def _gpu(**readings: Any) -> Gpu:
    return Gpu(
        index=0, uuid="GPU-1", serial="1650", product_name="NVIDIA A100-SXM4-80GB",
        memory_total_mib=81920, power_limit_w=400.0, mig_mode_current=False,
        persistence_mode=True, vbios_version="92.00.45.00.05",
        mig_devices=[MigDevice(gpu_instance_id=1, profile="1g.10gb", memory_total_mib=9728,
                               **readings.pop("mig", {}))],
        temperature_thresholds=TemperatureThresholds(
            shutdown_c=92, slowdown_c=89, **readings.pop("thresholds", {})
        ),
        **readings,
    )


def _host(gpu: Gpu, acc: Accelerator, xid_line: int | None, stamp: str | None,
          at: datetime) -> dict[str, Any]:
    return HostFacts(
        facts_version=FACTS_VERSION, collected_at=at,
        nvidia_smi=NvidiaSmiReport(driver_version="535.104.05", timestamp=stamp, gpus=[gpu]),
        accelerators=(acc,),
        xids=[XidEvent(code=79, message="GPU has fallen off the bus", line=xid_line)],
        xid_unreadable=[UnreadableXid(line=xid_line or 1, text="NVRM: Xid (PCI:0000")],
    ).model_dump(mode="json")


def test_every_reading_set_or_none_gives_one_digest() -> None:
    every = _gpu(
        temperature_c=61, temperature_memory_c=70, power_draw_w=312.5, utilization_gpu_pct=97,
        utilization_memory_pct=41, clocks_sm_mhz=1410, clocks_mem_mhz=1593, fan_speed_pct=30,
        memory_used_mib=70000, memory_free_mib=11920, performance_state="P0",
        clock_event_reasons=ClockEventReasons(sw_power_cap=True, sw_power_cap_us=1234),
        processes=[GpuProcess(pid=58130, name="/usr/bin/python", used_memory_mib=20322)],
        pcie_gen_current=4, pcie_width_current=16,
        thresholds={"tlimit_c": 23}, mig={"memory_used_mib": 13, "memory_free_mib": 9715},
    )
    none = _gpu()
    amd = Accelerator(vendor=Vendor("amd"), index=0, model="Instinct MI100", uuid="0x1",
                      memory_total_mib=32752, power_limit_w=290.0)
    busy = dataclasses.replace(amd, temperature_c=55.0, power_w=36.0, memory_used_mib=6)
    a = _host(every, busy, 812, "Tue Jul 14 08:12:38 2026", datetime(2026, 1, 1, tzinfo=UTC))
    b = _host(none, amd, 900, None, datetime(2026, 1, 2, tzinfo=UTC))
    assert a != b and facts_digest(a) == facts_digest(b) and stable_view(a) == stable_view(b)
    # each reading is one the records have (a renamed field breaks this test, not history)
    fields = set(Gpu.model_fields)
    for p in GPU_READINGS:
        head, _, rest = p.partition(".")
        assert head.removesuffix("[]") in fields, p
        if rest:
            model = TemperatureThresholds if head == "temperature_thresholds" else MigDevice
            assert rest in model.model_fields, p
    assert set(ACCELERATOR_READINGS) <= {f.name for f in dataclasses.fields(Accelerator)}
    assert "timestamp" in NvidiaSmiReport.model_fields and "line" in XidEvent.model_fields
    # what the snapshot's columns and rows take from the facts reads no reading
    fa, fb = HostFacts.model_validate(a), HostFacts.model_validate(b)
    assert derived_columns(fa) == derived_columns(fb)
    assert fact_labels(fa) == fact_labels(fb)


def test_snapshot_columns_and_rows_read_no_reading() -> None:
    """On the lab's real-capture hosts: the facts without their readings give the same
    derived columns, label set, DMI UUID and GPU/NIC rows as the facts themselves."""
    for f in _lab_docs():
        doc = f.model_dump(mode="json")
        bare = HostFacts.model_validate({**stable_view(doc), "collected_at": doc["collected_at"]})
        assert bare != f
        assert derived_columns(bare) == derived_columns(f)
        assert fact_labels(bare) == fact_labels(f)
        assert bare.dmi == f.dmi
        row = ("index", "uuid", "serial", "product_name", "pci_bus_id", "memory_total_mib",
               "vbios_version")
        assert [[getattr(g, k) for k in row] for g in bare.gpus] == [
            [getattr(g, k) for k in row] for g in f.gpus
        ]
        assert bare.ib_ports == f.ib_ports
