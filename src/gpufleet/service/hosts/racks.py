"""Racks read from the hosts' latest fact snapshots (issue 27 item 2), and the manifest
alarms: a missing or extra tray (``rack-manifest``) and a rack whose hosts report different
NVLink domains (``rack-domain``) and trays on different driver/firmware versions
(``rack-drift``), one alarm per rack on its first tray in slot order.

Nothing is stored for a rack: it is derived from the latest facts of the hosts whose GPU model
a rack manifest names (:mod:`gpufleet.domain.racks`), each host's fabric by the decision table
(:func:`gpufleet.domain.fabric.host_fabric`)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpufleet.domain.events import AlarmKind, AlarmSeverity, CollectionOutcome
from gpufleet.domain.fabric import host_fabric
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.racks import (
    Rack,
    RackManifest,
    TrayMember,
    assemble_racks,
    load_manifests,
)
from gpufleet.service.core.alarms import close_alarms, raise_alarm
from gpufleet.service.core.fleet import Fleet
from gpufleet.store.tables import Alarm, FactSnapshot, Host


def manifests(fleet: Fleet) -> dict[str, RackManifest]:
    """The expected-rack manifests (``GPUFLEET_RACK_MANIFESTS`` or the shipped ones)."""
    return load_manifests(fleet.settings.rack_manifests_file)


def read_racks(
    s: Session, known: Mapping[str, RackManifest]
) -> tuple[list[Rack], dict[str, int]]:
    """Every rack of the fleet, and the host ids by name of their members."""
    models = [m.gpu_model for m in known.values()]
    if not models:
        return [], {}
    q = (
        select(Host.id, Host.name, Host.state, Host.health, Host.last_outcome, FactSnapshot.facts,
               FactSnapshot.gpu_model)
        .join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
        .where(or_(*(FactSnapshot.gpu_model.ilike(f"%{m}%") for m in models)))
    )
    members: list[TrayMember] = []
    ids: dict[str, int] = {}
    for hid, name, state, health, outcome, doc, model in s.execute(q):
        facts = HostFacts.model_validate(doc)
        members.append(TrayMember(
            host=name,
            fabric=host_fabric(facts),
            gpus=len(facts.gpus),
            gpu_model=model,
            state=str(state),
            health=str(health),
            reporting=outcome in (None, CollectionOutcome.OK),
            driver=facts.driver_version,
            firmware=tuple(sorted({g.vbios_version for g in facts.gpus if g.vbios_version})),
        ))
        ids[name] = hid
    return assemble_racks(members, known), ids


_KINDS = {"missing_tray": AlarmKind.RACK_MANIFEST, "extra_tray": AlarmKind.RACK_MANIFEST,
          "domain_split": AlarmKind.RACK_DOMAIN, "version_drift": AlarmKind.RACK_DRIFT}


def check_racks(s: Session, fleet: Fleet) -> dict[str, list[str]]:
    """Raise the racks' manifest alarms and close those that cleared; returns each rack's
    finding kinds (racks with none left out)."""
    racks, ids = read_racks(s, manifests(fleet))
    out: dict[str, list[str]] = {}
    for rack in racks:
        anchor_name = next((m.host for m in rack.members if m.reporting), rack.members[0].host)
        anchor = s.get(Host, ids[anchor_name])
        assert anchor is not None
        member_ids = [ids[m.host] for m in rack.members]
        wanted: dict[AlarmKind, list[str]] = {}
        for f in rack.findings:
            wanted.setdefault(_KINDS[f.kind], []).append(f.message)
        for kind in (AlarmKind.RACK_MANIFEST, AlarmKind.RACK_DOMAIN, AlarmKind.RACK_DRIFT):
            # one alarm per rack: close those of this kind on other trays (a moved anchor)
            for a in s.scalars(select(Alarm).where(
                Alarm.host_id.in_(member_ids), Alarm.kind == kind, Alarm.closed_at.is_(None)
            )):
                if kind not in wanted or a.host_id != anchor.id:
                    host = s.get(Host, a.host_id)
                    assert host is not None
                    close_alarms(s, fleet, host, kind, f"rack {rack.rack_id}: cleared")
            if kind in wanted:
                message = f"rack {rack.rack_id}: " + "; ".join(wanted[kind])
                data = {"rack": rack.rack_id, "nvl_domain": rack.nvl_domain,
                        "findings": [f.kind for f in rack.findings if _KINDS[f.kind] is kind]}
                open_one = s.scalar(select(Alarm).where(
                    Alarm.host_id == anchor.id, Alarm.kind == kind, Alarm.closed_at.is_(None)))
                if open_one is None or open_one.message != message:
                    if open_one is not None:
                        open_one.message = message
                        open_one.data = data
                    raise_alarm(s, fleet, anchor, kind, AlarmSeverity.WARNING, message, data)
        if rack.findings:
            out[rack.rack_id] = [f.kind for f in rack.findings]
    return out
