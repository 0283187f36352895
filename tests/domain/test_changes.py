from __future__ import annotations

from collections.abc import Callable

from gpufleet.domain.changes import (
    REVALIDATING_KINDS,
    Change,
    ChangeKind,
    DeclaredChangeKind,
    detect_changes,
    needs_revalidation,
)
from gpufleet.domain.facts import HostFacts, IbPort, OsRelease

Facts = Callable[..., HostFacts]


def test_no_previous_or_no_change(facts: HostFacts, facts_factory: Facts) -> None:
    assert detect_changes(None, facts) == []
    assert detect_changes(facts, facts_factory()) == []


def test_driver_upgrade(facts: HostFacts, facts_factory: Facts) -> None:
    after = facts_factory(smi={"driver_version": "560.35.03"})
    assert detect_changes(facts, after) == [
        Change(ChangeKind.DRIVER_UPGRADE, "driver", "550.90.07", "560.35.03")
    ]


def test_reimage_kernel_and_os(facts: HostFacts, facts_factory: Facts) -> None:
    after = facts_factory(kernel="6.8.0-40-generic",
                          os=OsRelease(id="ubuntu", version_id="24.04",
                                       pretty_name="Ubuntu 24.04.1 LTS"))
    changes = detect_changes(facts, after)
    assert [(c.kind, c.field) for c in changes] == [
        (ChangeKind.REIMAGE, "kernel"), (ChangeKind.REIMAGE, "os")
    ]
    assert changes[1].describe() == "reimage: os Ubuntu 22.04.4 LTS -> Ubuntu 24.04.1 LTS"


def test_gpu_swap_is_a_new_serial(facts: HostFacts, facts_factory: Facts) -> None:
    after = facts_factory(gpu={3: {"serial": "1652324099999"}})
    assert detect_changes(facts, after) == [
        Change(ChangeKind.GPU_SWAP, "gpus", "1652324010003", "1652324099999")
    ]


def test_uuid_is_used_when_serial_missing(facts_factory: Facts) -> None:
    before = facts_factory(all_gpus={"serial": "N/A"})
    after = facts_factory(all_gpus={"serial": "N/A"}, gpu={0: {"uuid": "GPU-new"}})
    assert [c.kind for c in detect_changes(before, after)] == [ChangeKind.GPU_SWAP]


def test_gpu_lost_is_a_count_change_not_a_swap(facts: HostFacts, facts_factory: Facts) -> None:
    assert detect_changes(facts, facts_factory(hidden_gpus={5})) == [
        Change(ChangeKind.GPU_COUNT, "gpu_count", "8", "7")
    ]


def test_failed_nvidia_smi_is_not_a_change(facts: HostFacts, facts_factory: Facts) -> None:
    assert detect_changes(facts, facts_factory(nvidia_smi=None, nvidia_smi_error="x")) == []


def test_nic_swap(facts: HostFacts, facts_factory: Facts,
                  port_factory: Callable[..., IbPort]) -> None:
    ports = list(facts.ib_ports)
    ports[0] = port_factory("mlx5_0", "0xb0cafe0000000001")
    changes = detect_changes(facts, facts_factory(ib_ports=ports))
    assert changes == [Change(ChangeKind.NIC_SWAP, "ib_port_guids", "0xa088c20300000000",
                              "0xb0cafe0000000001")]
    # ibstat not collected this time: no change.
    assert detect_changes(facts, facts_factory(ib_ports=[])) == []


def test_revalidating_kinds_and_declared_kinds() -> None:
    assert set(ChangeKind) == REVALIDATING_KINDS
    assert {d.change_kind for d in DeclaredChangeKind} == {
        ChangeKind.DRIVER_UPGRADE, ChangeKind.REIMAGE, ChangeKind.GPU_SWAP, ChangeKind.NIC_SWAP
    }
    assert DeclaredChangeKind("gpu-swap").change_kind is ChangeKind.GPU_SWAP
    assert needs_revalidation([Change(ChangeKind.NIC_SWAP, "f", None, "x")])
    assert not needs_revalidation([])
