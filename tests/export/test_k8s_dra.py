"""Kubernetes DRA (issue 26, item 8), on SQLite and PostgreSQL, through the official
client against kmock (see tests/export/test_k8s_sync.py; kmock serves any resource, so
``resource.k8s.io`` DeviceTaintRules and ResourceSlices are plain objects to it): per GPU of
a quarantined host a DeviceTaintRule appears, created with effect None first (its history
on the server shows the dry run) and then NoSchedule; it goes away when the host passes
validation; someone else's rule and every ResourceSlice stay untouched; a node whose slices
list fewer devices than gpufleet validated raises an alarm, closed when they agree."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.export.conftest import slurm_lab_fleet
from tests.export.test_k8s_sync import Kmock
from tests.export.test_slurm_lab import quarantine

from gpufleet.domain.events import AlarmKind
from gpufleet.domain.facts import HostFacts
from gpufleet.service.core.alarms import open_alarms
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.k8s_dra import KubeDra, dra_sync
from gpufleet.service.hosts import operations
from gpufleet.service.hosts.validate import validate
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import FactSnapshot

pytestmark = pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning")

RULES = "resource.k8s.io/v1alpha3/devicetaintrules"
SLICES = "resource.k8s.io/v1beta1/resourceslices"


def _slice(node: str, driver: str, n: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}"},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "basic": {}} for i in range(n)]}}


FOREIGN = {"apiVersion": "resource.k8s.io/v1alpha3", "kind": "DeviceTaintRule",
           "metadata": {"name": "ops-nic-maintenance", "labels": {"team": "net"}},
           "spec": {"deviceSelector": {"driver": "nic.example.com"},
                    "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"}}}


@pytest.fixture
def emulator() -> Iterator[dict[str, Any]]:
    held: dict[str, Any] = {}

    def setup(k: Any) -> None:
        held["k"] = k
        for node, n in (("gpu-01", 8), ("gpu-02", 8), ("gpu-03", 6)):  # gpu-03: lost 2
            k.objects[SLICES, None, f"{node}-gpu.nvidia.com"] = _slice(node, "gpu.nvidia.com", n)
        k.objects[SLICES, None, "gpu-01-nic.example.com"] = _slice("gpu-01", "nic.example.com", 2)
        k.objects[RULES, None, FOREIGN["metadata"]["name"]] = FOREIGN

    km = Kmock([], setup=setup)
    held["km"] = km
    yield held
    km.close()


def _uuids(fleet: Fleet, host: str) -> list[str]:
    with fleet.db.session() as s:
        snap = s.get(FactSnapshot, host_by_name(s, host).latest_snapshot_id)
        assert snap is not None
        return [g.uuid for g in HostFacts.model_validate(snap.facts).gpus if g.uuid]


def _alarms(fleet: Fleet, host: str) -> list[str]:
    with fleet.db.session() as s:
        return [a.kind for a in open_alarms(s, [host_by_name(s, host).id])]


def test_device_taint_rules_dry_run_first_removed_after_validation(
    fleet: Fleet, tmp_path: Path, emulator: dict[str, Any]
) -> None:
    slurm_lab_fleet(fleet, tmp_path / "lab")
    k = emulator["k"]
    api = KubeDra(emulator["km"].kubeconfig(tmp_path / "kubeconfig"))
    slices_before = sorted((s["metadata"]["name"], str(s)) for s in api.list_slices())
    quarantine(fleet, "gpu-02", "Xid 79 on GPU 3")
    uuids = _uuids(fleet, "gpu-02")
    assert len(uuids) == 8

    plan = dra_sync(fleet, api=api, dry_run=True)
    assert len(plan.created) == 8 and api.list_rules() == {}  # a dry run writes nothing

    rep = dra_sync(fleet, api=api)
    assert rep.errors == [] and len(rep.created) == 8
    rules = api.list_rules()
    assert sorted(rules) == sorted(rep.created)
    exprs = {r["spec"]["deviceSelector"]["selectors"][0]["cel"]["expression"]
             for r in rules.values()}
    assert exprs == {f'device.attributes["gpu.nvidia.com"].uuid == "{u}"' for u in uuids}
    for name, r in rules.items():
        assert r["spec"]["deviceSelector"]["driver"] == "gpu.nvidia.com"
        assert r["spec"]["taint"] == {"key": "gpufleet.io/quarantine", "value": "fatal_xid",
                                      "effect": "NoSchedule"}
        assert r["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpufleet",
                                           "gpufleet.io/host": "gpu-02"}
        # the server's history: created with effect None (the dry run), then NoSchedule
        effects = [v.raw["spec"]["taint"]["effect"] for v in k.objects[RULES, None, name].history
                   if v is not None]
        assert effects == ["None", "NoSchedule"], name
    # gpu-03's driver lists 6 of the 8 GPUs gpufleet validated
    assert rep.short == {"gpu-03": (6, 8)}
    assert AlarmKind.K8S_DRA_DEVICES_MISSING in _alarms(fleet, "gpu-03")
    assert AlarmKind.K8S_DRA_DEVICES_MISSING not in _alarms(fleet, "gpu-01")

    again = dra_sync(fleet, api=api)  # nothing to do
    assert (again.created, again.removed) == ([], [])

    # the GPUs pass validation: the rules go, someone else's stays
    operations.unquarantine(fleet, "gpu-02", "GPU 3 reseated")
    validate(fleet, "gpu-02")
    k.objects[SLICES, None, "gpu-03-gpu.nvidia.com"] = _slice("gpu-03", "gpu.nvidia.com", 8)
    rep = dra_sync(fleet, api=api)
    assert sorted(rep.removed) == sorted(rules) and rep.created == []
    assert api.list_rules() == {}
    assert api.read_rule(FOREIGN["metadata"]["name"]) is not None
    assert rep.short == {} and AlarmKind.K8S_DRA_DEVICES_MISSING not in _alarms(fleet, "gpu-03")
    # gpufleet never wrote a ResourceSlice
    assert sorted((s["metadata"]["name"], str(s)) for s in api.list_slices()
                  if s["metadata"]["name"] != "gpu-03-gpu.nvidia.com") == [
        x for x in slices_before if x[0] != "gpu-03-gpu.nvidia.com"]


def test_a_rule_the_server_does_not_keep_as_written_never_takes_effect(
    fleet: Fleet, tmp_path: Path, emulator: dict[str, Any]
) -> None:
    """A server that does not keep the selector as written (this fake one rewrites the CEL
    to ``true``: every device of the driver): the dry run's read-back sees it, the rule stays
    at effect None (NoSchedule would have tainted every GPU) and the sync reports it."""
    import kmock

    slurm_lab_fleet(fleet, tmp_path / "lab")
    k = emulator["k"]

    def prune(req: Any) -> Any:  # this fake server's answer: the selector rewritten
        obj = k.objects[RULES, None, req.data["metadata"]["name"]]
        obj.patch({"spec": {"deviceSelector": {"selectors": [{"cel": {"expression": "true"}}]}}})
        return obj.raw

    k[kmock.action.CREATE, kmock.resource(RULES)] << prune
    api = KubeDra(emulator["km"].kubeconfig(tmp_path / "kubeconfig"))
    quarantine(fleet, "gpu-01", "Xid 79")
    rep = dra_sync(fleet, api=api)
    assert rep.created == [] and len(rep.errors) == 8
    assert "not kept as written" in rep.errors[0]
    effects = {r["spec"]["taint"]["effect"] for r in api.list_rules().values()}
    assert effects == {"None"}  # never made effective


def test_gpufleet_sync_keeps_the_rules_and_sync_status_shows_dra_drift(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Where the cluster uses DRA (GPUFLEET_KUBE_DRA), ``gpufleet sync`` (the k8s target)
    runs the DeviceTaintRule sync too, and ``sync status`` shows its drift; without the
    setting neither touches DeviceTaintRules."""
    from tests.export.test_k8s_sync import _node

    from gpufleet.domain.sync import Cause, Target
    from gpufleet.service.exports.k8s import KubeNodes
    from gpufleet.service.exports.sync import Systems, sync_round, sync_status

    def setup(k: Any) -> None:
        for node, n in (("gpu-01", 8), ("gpu-02", 8), ("gpu-03", 6)):  # gpu-03: lost 2
            k.objects[SLICES, None, f"{node}-gpu.nvidia.com"] = _slice(node, "gpu.nvidia.com", n)
        k.objects[RULES, None, FOREIGN["metadata"]["name"]] = FOREIGN  # kmock knows the kind

    km = Kmock([_node(n, "8") for n in ("gpu-01", "gpu-02", "gpu-03")], setup=setup)
    try:
        slurm_lab_fleet(fleet, tmp_path / "lab")
        kubeconfig = km.kubeconfig(tmp_path / "kubeconfig")
        api = KubeDra(kubeconfig)
        quarantine(fleet, "gpu-02", "Xid 79 on GPU 3")
        names = sorted(dra_sync(fleet, api=api, dry_run=True).created)
        assert len(names) == 8

        def systems() -> Systems:
            return Systems(k8s_api=KubeNodes(kubeconfig), kubeconfig=kubeconfig)

        plain = sync_status(fleet, [Target.K8S], systems())  # DRA not configured
        assert not [d for d in plain.disagreements if "DeviceTaintRule" in d.what]
        assert sync_round(fleet, [Target.K8S], systems()).ok and api.list_rules() == {}

        fleet.settings = fleet.settings.model_copy(update={"k8s_dra": True})
        st = sync_status(fleet, [Target.K8S], systems())
        dra = [(d.host, d.cause, d.next_sync) for d in st.disagreements
               if "DeviceTaintRule" in d.what or "ResourceSlices" in d.what]
        assert dra == sorted(
            [("gpu-02", Cause.PENDING, f"create DeviceTaintRule {n} (effect None, read back, "
              "then NoSchedule)") for n in names]
            + [("gpu-03", Cause.FOREIGN,
                "nothing: the driver's slices (alarm k8s-dra-devices-missing)")])
        assert api.list_rules() == {}  # status writes nothing

        r = sync_round(fleet, [Target.K8S], systems())
        (res,) = r.results
        assert sorted(c for c in res.changed if "DeviceTaintRule" in c) == [
            f"gpu-02: + DeviceTaintRule {n}" for n in names]
        assert res.errors == ["gpu-03: ResourceSlices list 6 of 8 GPUs"]  # not ok: the alarm
        assert sorted(api.list_rules()) == names
        assert AlarmKind.K8S_DRA_DEVICES_MISSING in _alarms(fleet, "gpu-03")
        st = sync_status(fleet, [Target.K8S], systems())
        assert [d.host for d in st.disagreements if "DeviceTaintRule" in d.what] == []

        operations.unquarantine(fleet, "gpu-02", "GPU 3 reseated")
        validate(fleet, "gpu-02")
        st = sync_status(fleet, [Target.K8S], systems())
        assert sorted(d.next_sync for d in st.disagreements if "DeviceTaintRule" in d.what) == [
            f"delete DeviceTaintRule {n}" for n in names]
        sync_round(fleet, [Target.K8S], systems())
        assert api.list_rules() == {}
    finally:
        km.close()
