"""Issue 27 item 6 (labels): the rack, NVLink domain and tray labels a GB200 tray gets from
its facts, on the real NVIDIA/k8s-test-infra captures (tests/fixtures/captured/
nvidia-smi-xml/PROVENANCE.md); GFD's ``nvidia.com/gpu.clique`` format; none on an HGX."""

from __future__ import annotations

from tests.domain.test_fabric_decision import edited, facts

from gpufleet.domain.labels import derive_labels, fact_labels, is_valid_label_value
from gpufleet.domain.states import HostState


def _labels(name: str, text: str | None = None) -> dict[str, str]:
    return derive_labels("n", facts(name, text), HostState.AVAILABLE, None, None, "row-7", [])


def test_gb200_tray_labels_rack_domain_tray_and_clique() -> None:
    got = _labels("hw-qx-gb200")
    assert got["gpufleet.io/rack"] == "1820000000001"  # chassis serial, over the inventory's
    assert got["gpufleet.io/nvl-domain"] == "00000001-0000-0000-0000-000000000001"
    assert got["gpufleet.io/tray"] == "4"
    assert got["nvidia.com/gpu.clique"] == "00000001-0000-0000-0000-000000000001.2"
    for key in ("gpufleet.io/rack", "gpufleet.io/nvl-domain", "gpufleet.io/tray",
                "nvidia.com/gpu.clique"):
        assert is_valid_label_value(got[key]), key
    # the NVLink labels do not depend on GFD's: they are among the host's own fact labels
    assert "gpufleet.io/nvl-domain" in fact_labels(facts("hw-qx-gb200"))["after"]
    assert "nvidia.com/gpu.clique" not in fact_labels(facts("hw-qx-gb200"))["after"]


def test_hgx_and_unpartitioned_trays_get_no_domain_labels() -> None:
    hgx = _labels("hw-qx-b200")  # Completed/Success, zero clusterUuid: not a member
    assert "gpufleet.io/nvl-domain" not in hgx and "nvidia.com/gpu.clique" not in hgx
    assert hgx["gpufleet.io/rack"] == "row-7"  # the inventory's rack stays
    # EDITED capture: cliqueId 0 is no partition, so no clique label
    nopart = _labels("hw-qx-gb200", edited("hw-qx-gb200", fabric__cliqueId="0"))
    assert "nvidia.com/gpu.clique" not in nopart


def _groups(name: str) -> list[str]:
    from gpufleet.domain.ansible import InventoryHost, host_groups

    h = InventoryHost(name="n", address="10.0.0.1", port=22, user=None, key_file=None, vars={},
                      state=HostState.AVAILABLE, pool=None, rack="row-7", profiles=[],
                      facts=facts(name), baseline_name=None, baseline=None)
    return host_groups(h)


def test_ansible_groups_per_rack_and_domain() -> None:
    groups = _groups("hw-qx-gb200")
    assert "rack_1820000000001" in groups and "rack_row_7" in groups
    assert "nvl_domain_00000001_0000_0000_0000_000000000001" in groups
    assert not any(g.startswith("nvl_domain_") for g in _groups("hw-qx-b200"))
