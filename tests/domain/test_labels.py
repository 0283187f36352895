from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.collect.nvidia_smi import parse_nvidia_smi_text, parse_nvidia_smi_xml
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import Fault
from gpufleet.domain.labels import (
    Taint,
    derive_labels,
    derive_taints,
    fabric_up,
    gfd_product,
    gpu_family,
    is_valid_label_key,
    is_valid_label_value,
    sanitize_label_value,
)
from gpufleet.domain.spec import ExpectedSpec
from gpufleet.domain.states import HostState

Facts = Callable[..., HostFacts]


def test_labels_of_a_clean_host(facts: HostFacts, spec: ExpectedSpec) -> None:
    labels = derive_labels("gpu-01", facts, HostState.AVAILABLE, "h100-pool-a", "h100-2024q3",
                           None, {"inference", "training-multinode"}, spec, None)
    assert labels == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",  # GFD keeps the NVIDIA prefix
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/cuda.driver-version.full": "550.90.07",
        "nvidia.com/cuda.driver-version.major": "550",
        "nvidia.com/cuda.driver-version.minor": "90",
        "nvidia.com/cuda.driver-version.revision": "07",
        "nvidia.com/cuda.runtime-version.full": "12.4",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "4",
        "gpufleet.io/state": "available",
        "gpufleet.io/pool": "h100-pool-a",
        "gpufleet.io/baseline": "h100-2024q3",
        "gpufleet.io/rack": "r12",  # from the spec when not given
        "gpufleet.io/fabric": "ib",
        "gpufleet.io/nvlink": "true",
        "gpufleet.io/local-nvme-gb": "7681",
        "gpufleet.io/cuda.max": "12.4",  # issue 26: driver 550.90.07 (NVIDIA's table)
        "gpufleet.io/accelerator.vendor": "nvidia",  # issue 15: every vendor alike
        "gpufleet.io/accelerator.model": "h100",
        "gpufleet.io/accelerator.count": "8",
        "gpufleet.io/validated.inference": "true",
        "gpufleet.io/validated.training-multinode": "true",
    }
    for key, value in labels.items():
        assert is_valid_label_key(key), key
        assert is_valid_label_value(value), value


def test_fabric_from_active_ports_only(
    facts_factory: Facts, port_factory: Callable[..., object]
) -> None:
    only_ib_down = facts_factory(ib_ports=[port_factory("mlx5_0", "0x1", state="Down")])
    assert fabric_up(only_ib_down) == "none"
    roce = facts_factory(ib_ports=[port_factory("mlx5_0", "0x1", link_layer="Ethernet")])
    assert fabric_up(roce) == "roce"
    assert fabric_up(facts_factory(ib_ports=[])) == "none"


def test_labels_without_gpus_or_facts(facts_factory: Facts) -> None:
    broken = facts_factory(nvidia_smi=None, nvidia_smi_error="x", nvlink=None)
    labels = derive_labels("h", broken, HostState.QUARANTINED, None, None, "r1", [], None,
                           Fault.GPU_LOST)
    assert not any(k.startswith("nvidia.com/") for k in labels)
    assert labels["gpufleet.io/fault"] == "gpu_lost"
    assert labels["gpufleet.io/nvlink"] == "false"
    assert derive_labels("h", None, HostState.ENROLLED, None, None, None, [], None) == {
        "gpufleet.io/state": "enrolled"
    }


def test_gpu_family_and_product() -> None:
    assert gpu_family("Ada Lovelace", None) == "ada-lovelace"
    assert gpu_family(None, "NVIDIA A100-SXM4-80GB") == "ampere"
    assert gpu_family(None, "NVIDIA H800") == "hopper"
    assert gpu_family(None, "NVIDIA L40S") == "ada-lovelace"
    assert gpu_family(None, "NVIDIA RTX PRO 6000") is None  # not in the table: not guessed
    assert gpu_family(None, "NVIDIA L40") == "ada-lovelace"
    assert gfd_product("NVIDIA A100-SXM4-40GB") == "NVIDIA-A100-SXM4-40GB"
    assert gfd_product("Tesla V100-SXM2-16GB") == "Tesla-V100-SXM2-16GB"
    # GFD's sanitise(): characters outside [A-Za-z0-9-_. ] are dropped, blank runs -> one '-'
    assert gfd_product("NVIDIA  GeForce RTX 4090 (x)") == "NVIDIA-GeForce-RTX-4090-x"
    assert gpu_family("Volta", None) == "volta"
    assert gpu_family("Pascal", None) == "pascal"
    assert gpu_family("Blackwell", None) == "blackwell"
    assert gpu_family(None, "Tesla V100S-PCIE-32GB") == "volta"
    assert gpu_family(None, "NVIDIA TITAN V") == "volta"
    assert gpu_family(None, "NVIDIA A10G") == "ampere"
    # An architecture GFD has no name for is not passed through as a family.
    assert gpu_family("Some Future Arch", None) is None


def test_mig_capable_false_when_not_reported(facts_factory: Facts) -> None:
    l40s = facts_factory(all_gpus={"mig_mode_current": None, "product_name": "NVIDIA L40S",
                                   "architecture": "Ada Lovelace"})
    labels = derive_labels("h", l40s, HostState.AVAILABLE, None, None, None, [], None)
    assert labels["nvidia.com/mig.capable"] == "false"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L40S"
    assert labels["nvidia.com/gpu.family"] == "ada-lovelace"


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("", ""),
        (None, ""),
        ("simple", "simple"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("trailing.", "trailing"),
        ("..dots..", "dots"),
        ("-_-", ""),
        ("ünïcödé", "n-c-d"),
        ("日本語", ""),
        ("rack/12 row:3", "rack-12-row-3"),
        ("a" * 80, "a" * 63),
        ("a" * 62 + ".b", "a" * 62),  # cut at 63 leaves a trailing '.', stripped
        (" padded ", "padded"),
        ("x\ny\tz", "x-y-z"),
        (12, "12"),
    ],
)
def test_sanitize_label_value(raw: object, clean: str) -> None:
    assert sanitize_label_value(raw) == clean
    assert is_valid_label_value(clean)


def test_sanitize_is_always_valid_on_adversarial_inputs() -> None:
    samples = ["-" * 100, "." + "b" * 70 + ".", "a_" * 40, "\u00a0x\u00a0", "x" * 62 + "é",
               "🚀gpu🚀", "A.B-C_D", "0", "Z" * 63, "/" * 10 + "k"]
    for sample in samples:
        assert is_valid_label_value(sanitize_label_value(sample)), sample


@pytest.mark.parametrize(
    ("value", "valid"),
    [("", True), ("a", True), ("a.b-c_d", True), ("-a", False), ("a-", False),
     ("a b", False), ("é", False), ("a" * 63, True), ("a" * 64, False)],
)
def test_label_value_validator(value: str, valid: bool) -> None:
    assert is_valid_label_value(value) is valid


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("gpufleet.io/state", True),
        ("nvidia.com/cuda.driver-version.full", True),
        ("plain-name", True),
        ("gpufleet.io/", False),
        ("/name", False),
        ("Gpufleet.IO/x", False),  # prefix must be lower-case DNS
        ("gpufleet..io/x", False),
        ("gpufleet.io/" + "n" * 64, False),
        ("a" * 254 + "/x", False),
        (".".join(["a" * 63] * 3) + "/x", True),
        ("gpufleet.io/validated.training-multinode", True),
        ("a/b/c", False),
    ],
)
def test_label_key_validator(key: str, valid: bool) -> None:
    assert is_valid_label_key(key) is valid


def test_odd_profile_names_still_give_valid_keys(facts: HostFacts) -> None:
    labels = derive_labels("h", facts, HostState.AVAILABLE, "pool with spaces", None, None,
                           ["Burn In!", "x" * 100, "☃"], None)
    assert labels["gpufleet.io/pool"] == "pool-with-spaces"
    assert "gpufleet.io/validated.Burn-In" in labels
    assert not any(k.endswith("validated.") for k in labels)
    for key, value in labels.items():
        assert is_valid_label_key(key) and is_valid_label_value(value), key


@pytest.mark.parametrize(
    ("state", "fault", "taints"),
    [
        (HostState.AVAILABLE, None, []),
        (HostState.AVAILABLE, Fault.IB_DOWN, []),  # still serves inference
        (HostState.ALLOCATED, None, []),
        (HostState.QUARANTINED, Fault.FATAL_XID,
         [Taint("gpufleet.io/quarantined", "fatal_xid", "NoSchedule")]),
        (HostState.QUARANTINED, None,
         [Taint("gpufleet.io/quarantined", "unknown", "NoSchedule")]),
        (HostState.MAINTENANCE, None, [Taint("gpufleet.io/maintenance", "true", "NoSchedule")]),
        (HostState.RETIRED, None, [Taint("gpufleet.io/retired", "true", "NoSchedule")]),
        (HostState.VALIDATING, None,
         [Taint("gpufleet.io/not-ready", "validating", "NoSchedule")]),
        (HostState.ENROLLED, None, [Taint("gpufleet.io/not-ready", "enrolled", "NoSchedule")]),
        (HostState.RECLAIMING, None,
         [Taint("gpufleet.io/not-ready", "reclaiming", "NoSchedule")]),
    ],
)
def test_taints(state: HostState, fault: Fault | None, taints: list[Taint]) -> None:
    assert derive_taints(state, fault) == taints
    for t in taints:
        assert is_valid_label_key(t.key) and is_valid_label_value(t.value)


def test_taint_str() -> None:
    assert str(Taint("gpufleet.io/maintenance", "true", "NoSchedule")) == (
        "gpufleet.io/maintenance=true:NoSchedule"
    )


CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "captured"


@pytest.mark.parametrize(
    ("kind", "file", "product", "family"),
    [
        # Real captures (see the PROVENANCE.md next to each); values read from the files.
        ("xml", "telegraf_a100-sxm4-v12.xml", "NVIDIA-A100-SXM4-80GB", "ampere"),
        ("xml", "datakit_gtx-1card.xml", "Tesla-V100-PCIE-32GB", "volta"),  # no architecture
        ("q", "gpud_nvidia-smi-query.560.35.03.out.0.valid.txt", "NVIDIA-TITAN-V", "volta"),
    ],
)
def test_gfd_values_from_real_captures(
    facts_factory: Facts, kind: str, file: str, product: str, family: str
) -> None:
    if kind == "xml":
        text = (CAPTURED / "nvidia-smi-xml" / file).read_text(encoding="utf-8")
        report = parse_nvidia_smi_xml(text)
    else:
        text = (CAPTURED / "nvidia-smi-q" / file).read_text(encoding="utf-8")
        report = parse_nvidia_smi_text(text)
    labels = derive_labels("h", facts_factory(nvidia_smi=report), HostState.AVAILABLE, None,
                           None, None, [], None)
    assert labels["nvidia.com/gpu.product"] == product
    assert labels["nvidia.com/gpu.family"] == family
