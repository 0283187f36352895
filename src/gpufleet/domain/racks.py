"""Racks derived from facts (issue 27 item 2). Pure: the hosts' fabric facts in, racks and
their manifest findings out.

A rack is the set of hosts whose GPUs report one chassis serial (``platformInfo``); its
NVLink domain is the clusterUuid its trays report, its partition ``<clusterUuid>.<cliqueId>``
and a tray's position (slot, tray index, host id). An **expected-rack manifest** per rack
model (``data/rack_manifests.yaml``: GB200/GB300 NVL72, 18 compute trays of 4 GPUs) says what
a rack must hold; :func:`rack_findings` names a missing tray (a tray index the manifest expects
and no reporting host fills), an extra tray (an index outside the manifest, two hosts on one
position, more trays than expected, a tray with another GPU count) and a rack whose hosts report
different NVLink domains. A rack whose reporting trays run different drivers or GPU firmware
(VBIOS) is a ``version_drift`` finding (:func:`version_drift`), except while a tray of it is
in maintenance (a change window is open: a campaign moves the trays one by one).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gpufleet.domain.fabric import HostFabric, TrayPosition
from gpufleet.errors import ConfigError


@dataclass(frozen=True, slots=True)
class RackManifest:
    """What a rack of ``model`` holds: ``trays`` compute trays (indexes 0 .. trays-1) of
    ``gpus_per_tray`` GPUs; recognised by ``gpu_model`` in its trays' GPU model."""

    model: str
    gpu_model: str
    trays: int
    gpus_per_tray: int


def _manifest(name: str, value: Any) -> RackManifest:
    if not isinstance(value, dict):
        raise ConfigError(f"rack manifest {name!r}: expected a mapping, got {value!r}")
    try:
        m = RackManifest(name, str(value["gpu_model"]), int(value["trays"]),
                         int(value["gpus_per_tray"]))
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(
            f"rack manifest {name!r}: needs gpu_model, trays and gpus_per_tray ({e})"
        ) from None
    if not m.gpu_model or m.trays < 1 or m.gpus_per_tray < 1:
        raise ConfigError(f"rack manifest {name!r}: gpu_model, trays >= 1, gpus_per_tray >= 1")
    return m


def parse_manifests(text: str, source: str) -> dict[str, RackManifest]:
    """Manifests from YAML text (``{model: {gpu_model, trays, gpus_per_tray}}``)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not YAML ({e})") from None
    if not isinstance(doc, dict) or not doc:
        raise ConfigError(f"{source}: expected a mapping of rack models")
    return {str(k): _manifest(str(k), v) for k, v in doc.items()}


def load_manifests(path: Path | None = None) -> dict[str, RackManifest]:
    """The manifests of ``path`` (a setting), else the packaged ones."""
    if path is not None:
        try:
            return parse_manifests(path.read_text(encoding="utf-8"), str(path))
        except OSError as e:
            raise ConfigError(f"rack manifests {path}: {e.strerror}") from None
    text = resources.files("gpufleet.domain.data").joinpath("rack_manifests.yaml").read_text()
    return parse_manifests(text, "rack_manifests.yaml")


def manifest_for(
    gpu_models: Iterable[str | None], manifests: Mapping[str, RackManifest]
) -> RackManifest | None:
    """The manifest whose ``gpu_model`` every named model contains (None: no match)."""
    named = [m.lower() for m in gpu_models if m]
    for man in manifests.values():
        if named and all(man.gpu_model.lower() in m for m in named):
            return man
    return None


@dataclass(frozen=True, slots=True)
class TrayMember:
    """One host in a rack, as the rack view needs it."""

    host: str
    fabric: HostFabric
    gpus: int
    gpu_model: str | None
    state: str = ""
    health: str = ""
    reporting: bool = True  # its latest collection answered
    #: issue 27 item 7: the loaded driver and the GPUs' firmware (VBIOS) versions
    driver: str | None = None
    firmware: tuple[str, ...] = ()

    @property
    def position(self) -> TrayPosition:
        return self.fabric.tray or TrayPosition(None, None, None)


@dataclass(frozen=True, slots=True)
class RackFinding:
    """A manifest finding: ``kind`` missing_tray / extra_tray / domain_split /
    version_drift."""

    kind: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Rack:
    """A rack: its id (chassis serial), members in slot order, domains, manifest, findings."""

    rack_id: str
    members: tuple[TrayMember, ...]
    domains: tuple[str, ...]
    partitions: tuple[str, ...]
    manifest: RackManifest | None
    findings: tuple[RackFinding, ...]

    @property
    def nvl_domain(self) -> str | None:
        return self.domains[0] if len(self.domains) == 1 else None

    @property
    def gpus(self) -> int:
        return sum(m.gpus for m in self.members)


def _slot_key(m: TrayMember) -> tuple[int, int, int, str]:
    p = m.position
    big = 1 << 20
    return (
        big if p.slot is None else p.slot,
        big if p.tray_index is None else p.tray_index,
        big if p.host_id is None else p.host_id,
        m.host,
    )


def rack_findings(
    members: Iterable[TrayMember], manifest: RackManifest | None
) -> list[RackFinding]:
    """The rack's manifest findings (module docstring); none without a manifest but a split
    domain."""
    ms = list(members)
    out: list[RackFinding] = []
    domains = sorted({m.fabric.nvl_domain for m in ms if m.fabric.nvl_domain})
    if len(domains) > 1:
        by = {d: sorted(m.host for m in ms if m.fabric.nvl_domain == d) for d in domains}
        text = "; ".join(f"{d}: {', '.join(h)}" for d, h in by.items())
        out.append(RackFinding("domain_split", f"hosts report {len(domains)} NVLink domains "
                               f"({text})", {"domains": by}))
    drift = version_drift(ms)
    if drift is not None:
        out.append(drift)
    if manifest is None:
        return out
    reporting = [m for m in ms if m.reporting]
    seen: dict[int, list[str]] = {}
    for m in reporting:
        if m.position.tray_index is not None:
            seen.setdefault(m.position.tray_index, []).append(m.host)
    missing = [i for i in range(manifest.trays) if i not in seen]
    if missing:
        silent = sorted(m.host for m in ms if not m.reporting)
        tail = f" (not answering: {', '.join(silent)})" if silent else ""
        out.append(RackFinding(
            "missing_tray",
            f"{len(missing)} of {manifest.trays} {manifest.model} trays missing: tray index "
            f"{', '.join(map(str, missing))}{tail}",
            {"tray_indexes": missing, "silent": silent, "expected": manifest.trays},
        ))
    extra = sorted(h for i, hs in seen.items() if i >= manifest.trays for h in hs)
    doubled = {i: sorted(hs) for i, hs in seen.items() if len(hs) > 1}
    odd = sorted(m.host for m in reporting if m.gpus != manifest.gpus_per_tray)
    if extra or doubled or odd or len(reporting) > manifest.trays:
        parts = []
        if extra:
            parts.append(f"outside the manifest: {', '.join(extra)}")
        for i, hs in sorted(doubled.items()):
            parts.append(f"tray index {i} twice: {', '.join(hs)}")
        if odd:
            parts.append(f"not {manifest.gpus_per_tray} GPUs: {', '.join(odd)}")
        if len(reporting) > manifest.trays:
            parts.append(f"{len(reporting)} trays, {manifest.trays} expected")
        out.append(RackFinding(
            "extra_tray",
            f"{manifest.model} rack: " + "; ".join(parts),
            {"outside": extra, "doubled": {str(k): v for k, v in doubled.items()},
             "gpu_count": odd, "trays": len(reporting)},
        ))
    return out


def version_drift(members: Iterable[TrayMember]) -> RackFinding | None:
    """Trays of one rack (one NVLink domain) on different driver or firmware versions; None
    when they agree, or while one is in maintenance (its change window is open)."""
    ms = [m for m in members if m.reporting]
    if any(m.state == "maintenance" for m in ms):
        return None
    parts: list[str] = []
    found: dict[str, dict[str, list[str]]] = {}
    for what, values in (("driver", {m.host: m.driver for m in ms}),
                         ("firmware", {m.host: ",".join(m.firmware) or None for m in ms})):
        by: dict[str, list[str]] = {}
        for host, v in sorted(values.items()):
            if v:
                by.setdefault(v, []).append(host)
        if len(by) > 1:
            found[what] = by
            parts.append(f"{what} " + "; ".join(
                f"{v} on {len(hs)} ({', '.join(hs[:4])}{', ...' if len(hs) > 4 else ''})"
                for v, hs in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))))
    if not parts:
        return None
    return RackFinding("version_drift", "trays on different versions: " + " | ".join(parts),
                       found)


def assemble_racks(
    members: Iterable[TrayMember], manifests: Mapping[str, RackManifest]
) -> list[Rack]:
    """Racks (by rack id, sorted) of the members that report a chassis serial."""
    by: dict[str, list[TrayMember]] = {}
    for m in members:
        if m.fabric.rack_id:
            by.setdefault(m.fabric.rack_id, []).append(m)
    racks: list[Rack] = []
    for rack_id in sorted(by):
        ms = sorted(by[rack_id], key=_slot_key)
        manifest = manifest_for((m.gpu_model for m in ms), manifests)
        racks.append(Rack(
            rack_id=rack_id,
            members=tuple(ms),
            domains=tuple(sorted({m.fabric.nvl_domain for m in ms if m.fabric.nvl_domain})),
            partitions=tuple(sorted({m.fabric.partition for m in ms if m.fabric.partition})),
            manifest=manifest,
            findings=tuple(rack_findings(ms, manifest)),
        ))
    return racks
