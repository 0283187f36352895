"""Kubernetes Dynamic Resource Allocation (issue 26, item 8): ``gpufleet k8s dra-sync``.

For clusters whose GPUs are handed out by a DRA driver (NVIDIA's ``gpu.nvidia.com``), a node
taint is too coarse: one bad GPU must not close its seven good neighbours. Per GPU gpufleet
will not give out (every GPU of a quarantined host; the GPUs validation marked unusable on a
partial host) it keeps one ``DeviceTaintRule``:

* API ``resource.k8s.io/v1alpha3``, kind ``DeviceTaintRule``, cluster-scoped, plural
  ``devicetaintrules`` (Kubernetes 1.33+, feature gate ``DRADeviceTaints``; reference:
  kubernetes.io/docs/reference/kubernetes-api/workload-resources/device-taint-rule-v1alpha3/).
  ``spec.deviceSelector`` (``driver``, ``pool``, ``device``, ``deviceClassName``,
  ``selectors: [{cel: {expression}}]``; all must match) picks the devices and
  ``spec.taint`` (``key``, ``value``, ``effect``, ``timeAdded`` set by the server) is the
  taint, with the same effect as if the driver had put it in its ResourceSlice.
* Ours: named ``gpufleet-quarantine-<uuid>``, labelled ``app.kubernetes.io/managed-by:
  gpufleet`` and ``gpufleet.io/host``; selector ``driver: gpu.nvidia.com`` and the CEL
  ``device.attributes["gpu.nvidia.com"].uuid == "<GPU UUID>"`` (the driver publishes each
  GPU's UUID as the ``uuid`` attribute); taint key ``gpufleet.io/quarantine``, value the
  host's fault (or ``unusable``), effect ``NoSchedule`` (new claims stay off, running pods
  run on: the same rule as gpufleet's node taints).
* Dry run first: a new rule is created with effect ``None`` ("no effect, the taint is purely
  informational": DeviceTaint.effect, whose consumers treat unknown effects like None), read
  back, and only when the server kept its selector and key is it updated to ``NoSchedule``.
  A rule that cannot be read back as written is reported and never made effective.
* Removed when the GPU passes validation again (its host available, the GPU no longer
  unusable), or the host is gone. Only rules carrying gpufleet's label are ever changed.

gpufleet never writes a ResourceSlice (they are the driver's; the API below has no call that
could). It reads them: a node whose slices of the driver list fewer devices than gpufleet
validated raises ``k8s-dra-devices-missing`` (closed when they agree again), once the
cluster has any slice of that driver (a cluster without DRA raises nothing).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import select

from gpufleet.domain.events import AlarmKind, AlarmSeverity, EventKind
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.k8s import node_name
from gpufleet.domain.labels import PREFIX, sanitize_label_value
from gpufleet.domain.states import HostState
from gpufleet.domain.sync import Cause, Disagreement, Target
from gpufleet.errors import KubeApiError
from gpufleet.service.core.alarms import close_alarms, open_alarms, raise_alarm
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.hosts.kube import KubeClient
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import FactSnapshot, Host

GROUP = "resource.k8s.io"
RULE_VERSION = "v1alpha3"
SLICE_VERSION = "v1beta1"
DRIVER = "gpu.nvidia.com"
TAINT_KEY = f"{PREFIX}/quarantine"
MANAGED_BY = "app.kubernetes.io/managed-by"
HOST_LABEL = f"{PREFIX}/host"
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


class DraApi(Protocol):
    """What the DRA sync needs of a Kubernetes API (no ResourceSlice write, by design)."""

    def list_rules(self) -> dict[str, dict[str, Any]]:
        """gpufleet's DeviceTaintRules (label ``managed-by=gpufleet``), by name."""
        ...

    def read_rule(self, name: str) -> dict[str, Any] | None: ...

    def create_rule(self, body: dict[str, Any]) -> None: ...

    def patch_rule(self, name: str, body: dict[str, Any]) -> None: ...

    def delete_rule(self, name: str) -> None: ...

    def list_slices(self) -> list[dict[str, Any]]:
        """Every ResourceSlice, as JSON."""
        ...


class KubeDra(KubeClient):
    """:class:`DraApi` over the official client's ``CustomObjectsApi``."""

    def _custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api_client)

    def list_rules(self) -> dict[str, dict[str, Any]]:
        got = self._call("list DeviceTaintRules", self._custom().list_cluster_custom_object,
                         GROUP, RULE_VERSION, "devicetaintrules",
                         label_selector=f"{MANAGED_BY}=gpufleet")
        return {i["metadata"]["name"]: i for i in got.get("items") or []
                if (i["metadata"].get("labels") or {}).get(MANAGED_BY) == "gpufleet"}

    def read_rule(self, name: str) -> dict[str, Any] | None:
        try:
            got: dict[str, Any] = self._call(
                f"read DeviceTaintRule {name}", self._custom().get_cluster_custom_object,
                GROUP, RULE_VERSION, "devicetaintrules", name)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise
        return got

    def create_rule(self, body: dict[str, Any]) -> None:
        self._call(f"create DeviceTaintRule {body['metadata']['name']}",
                   self._custom().create_cluster_custom_object, GROUP, RULE_VERSION,
                   "devicetaintrules", body, field_manager="gpufleet")

    def patch_rule(self, name: str, body: dict[str, Any]) -> None:
        self._call(f"patch DeviceTaintRule {name}", self._custom().patch_cluster_custom_object,
                   GROUP, RULE_VERSION, "devicetaintrules", name, body,
                   _content_type="application/merge-patch+json")

    def delete_rule(self, name: str) -> None:
        self._call(f"delete DeviceTaintRule {name}",
                   self._custom().delete_cluster_custom_object, GROUP, RULE_VERSION,
                   "devicetaintrules", name)

    def list_slices(self) -> list[dict[str, Any]]:
        got = self._call("list ResourceSlices", self._custom().list_cluster_custom_object,
                         GROUP, SLICE_VERSION, "resourceslices")
        return list(got.get("items") or [])


@dataclass(frozen=True)
class WantedRule:
    """One GPU gpufleet keeps out of DRA claims."""

    host: str
    uuid: str
    value: str  # the host's fault, or "unusable"

    @property
    def name(self) -> str:
        return "gpufleet-quarantine-" + _NOT_DNS.sub("-", self.uuid.lower()).strip("-")

    def body(self, effect: str) -> dict[str, Any]:
        expr = f'device.attributes["{DRIVER}"].uuid == {json.dumps(self.uuid)}'
        return {
            "apiVersion": f"{GROUP}/{RULE_VERSION}", "kind": "DeviceTaintRule",
            "metadata": {"name": self.name, "labels": {
                MANAGED_BY: "gpufleet", HOST_LABEL: sanitize_label_value(self.host)}},
            "spec": {"deviceSelector": {"driver": DRIVER, "selectors": [{"cel": {
                "expression": expr}}]},
                "taint": {"key": TAINT_KEY, "value": sanitize_label_value(self.value),
                          "effect": effect}},
        }

    def kept(self, got: dict[str, Any] | None) -> bool:
        """The server's copy selects this GPU with this key (what the dry run checks)."""
        spec = (got or {}).get("spec") or {}
        sel = spec.get("deviceSelector") or {}
        return ((spec.get("taint") or {}).get("key") == TAINT_KEY and sel.get("driver") == DRIVER
                and sel.get("selectors") == self.body("None")["spec"]["deviceSelector"][
                    "selectors"])


@dataclass
class DraReport:
    """What one DRA sync did (or would do)."""

    dry_run: bool
    created: list[str] = field(default_factory=list)  # rule names made effective
    removed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: host -> (devices in its node's slices, validated GPUs): the short ones
    short: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: rule name -> the host it is for
    hosts: dict[str, str] = field(default_factory=dict)


@dataclass
class _Host:
    name: str
    node: str
    state: HostState
    validated: int | None
    wanted: list[WantedRule]


def _hosts(fleet: Fleet) -> list[_Host]:
    out = []
    with fleet.db.session() as s:
        for h, snap in s.execute(select(Host, FactSnapshot).outerjoin(
                FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)):
            state = HostState(h.state)
            facts = HostFacts.model_validate(snap.facts) if snap is not None else None
            uuids = [g.uuid for g in facts.gpus if g.uuid] if facts is not None else []
            wanted: list[WantedRule] = []
            if state is HostState.QUARANTINED:
                wanted = [WantedRule(h.name, u, str(h.fault or "quarantined")) for u in uuids]
            elif state is not HostState.RETIRED:
                wanted = [WantedRule(h.name, str(u["uuid"]), "unusable")
                          for u in h.unusable_gpus or [] if u.get("uuid")]
            validated = h.usable_gpus if h.usable_gpus is not None else (
                len(facts.gpus) if facts is not None and facts.nvidia_smi else None)
            node = node_name(fleet.settings.k8s_node_name, h.name, h.address)
            out.append(_Host(h.name, node, state, validated, wanted))
    return out


def dra_sync(
    fleet: Fleet, *, api: DraApi | None = None, kubeconfig: Path | None = None,
    dry_run: bool = False,
) -> DraReport:
    """Bring gpufleet's DeviceTaintRules to its view and check the ResourceSlices (see the
    module docstring); no transaction is open while the API is asked."""
    hosts = _hosts(fleet)
    if api is None:
        api = KubeDra(kubeconfig or fleet.settings.k8s_kubeconfig)
    report = DraReport(dry_run)
    wanted = {r.name: r for h in hosts for r in h.wanted}
    have = api.list_rules()
    report.hosts = {n: str((r["metadata"].get("labels") or {}).get(HOST_LABEL, ""))
                    for n, r in have.items()} | {n: r.host for n, r in wanted.items()}
    for name, rule in sorted(wanted.items()):
        effect = ((have.get(name) or {}).get("spec") or {}).get("taint", {}).get("effect")
        if effect == "NoSchedule":
            continue
        if dry_run:
            report.created.append(name)
            continue
        try:
            if name not in have:
                api.create_rule(rule.body("None"))  # the dry run: no effect yet
            got = api.read_rule(name)
            if not rule.kept(got):
                report.errors.append(f"DeviceTaintRule {name} not kept as written "
                                     f"(read back: {json.dumps((got or {}).get('spec'))})")
                continue
            api.patch_rule(name, {"spec": {"taint": {"effect": "NoSchedule"}}})
            report.created.append(name)
        except KubeApiError as exc:
            report.errors.append(str(exc))
    for name in sorted(set(have) - set(wanted)):
        if not dry_run:
            api.delete_rule(name)
        report.removed.append(name)
    slices = api.list_slices()
    ours = [x for x in slices if (x.get("spec") or {}).get("driver") == DRIVER]
    if ours:
        devices: dict[str, int] = {}
        for x in ours:
            node = str((x.get("spec") or {}).get("nodeName") or "")
            devices[node] = devices.get(node, 0) + len((x.get("spec") or {}).get("devices") or [])
        for h in hosts:
            if h.state in (HostState.AVAILABLE, HostState.ALLOCATED) and h.validated:
                got_n = devices.get(h.node, 0)
                if got_n < h.validated:
                    report.short[h.name] = (got_n, h.validated)
    if not dry_run:
        _record(fleet, report, {h.name: h for h in hosts})
    return report


def _record(fleet: Fleet, report: DraReport, hosts: dict[str, _Host]) -> None:
    with fleet.db.session() as s:
        for verb, names in (("created", report.created), ("removed", report.removed)):
            for name in names:
                host = s.scalar(select(Host).where(Host.name == report.hosts.get(name)))
                record_event(s, fleet, EventKind.K8S_SYNC,
                             f"DeviceTaintRule {name} {verb} ({TAINT_KEY})", host=host,
                             data={"dra": verb, "rule": name})
        for h in hosts.values():
            if h.state not in (HostState.AVAILABLE, HostState.ALLOCATED):
                continue
            row = host_by_name(s, h.name)
            is_open = any(a.kind == AlarmKind.K8S_DRA_DEVICES_MISSING
                          for a in open_alarms(s, [row.id]))
            if h.name in report.short:
                n, want = report.short[h.name]
                if not is_open:
                    raise_alarm(s, fleet, row, AlarmKind.K8S_DRA_DEVICES_MISSING,
                                AlarmSeverity.CRITICAL,
                                f"node {h.node}: the ResourceSlices of {DRIVER} list {n} "
                                f"devices, gpufleet validated {want} GPUs on {h.name}",
                                {"node": h.node, "devices": n, "validated": want})
            elif is_open:
                close_alarms(s, fleet, row, AlarmKind.K8S_DRA_DEVICES_MISSING,
                             f"node {h.node}: ResourceSlices agree again")


def dra_disagreements(report: DraReport) -> list[Disagreement]:
    """``sync status``: per host, the DeviceTaintRules the next sync creates (a GPU gpufleet
    will not give out that DRA still hands out) or removes, and the nodes whose ResourceSlices
    list fewer GPUs than validated (from a dry-run :func:`dra_sync`)."""
    out: list[Disagreement] = []
    for name in report.created:
        out.append(Disagreement(report.hosts.get(name, "?"), Target.K8S, Cause.PENDING,
                                f"DRA still hands out a GPU gpufleet holds back: no effective "
                                f"DeviceTaintRule {name}",
                                f"create DeviceTaintRule {name} (effect None, read back, then "
                                "NoSchedule)"))
    for name in report.removed:
        out.append(Disagreement(report.hosts.get(name, "?"), Target.K8S, Cause.PENDING,
                                f"DeviceTaintRule {name} outlives the GPU's fault",
                                f"delete DeviceTaintRule {name}"))
    for host, (n, want) in sorted(report.short.items()):
        out.append(Disagreement(host, Target.K8S, Cause.FOREIGN,
                                f"the ResourceSlices of {DRIVER} list {n} devices, gpufleet "
                                f"validated {want} GPUs",
                                "nothing: the driver's slices (alarm k8s-dra-devices-missing)"))
    return out
