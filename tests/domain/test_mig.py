"""Issue 26 item 7, pure: the mig-parted config format (NVIDIA/mig-parted api/spec/v1/spec.go),
the nvidia-smi commands that apply a layout, and GFD's MIG labels for the single and mixed
strategies (NVIDIA/k8s-device-plugin internal/lm/mig-strategy.go, resource.go), on the facts
of the lab's real-capture hosts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.collect.assemble import assemble_facts
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.labels import derive_labels
from gpufleet.domain.mig import (
    apply_commands,
    apply_script,
    label_digest,
    mig_labels,
    parse_mig_parted,
    pin_from_file,
)
from gpufleet.domain.spec import Baseline, ExpectedSpec
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.renderers import render_sections

#: A site's mig-parted config (the format of mig-parted's examples/config.yaml).
CONFIG = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  h100-balanced:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
  half:
    - devices: [0, 1, 2, 3]
      mig-enabled: false
    - devices: [4, 5, 6, 7]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
"""


def _facts(model: str) -> HostFacts:
    return assemble_facts(
        render_sections(LabHost(name="m1", model=model, serial_salt=3)), datetime.now(UTC), "m1"
    )


def test_mig_parted_configs_become_pins() -> None:
    assert set(parse_mig_parted(CONFIG, "mig.yaml")) == {"all-disabled", "h100-balanced", "half"}
    assert pin_from_file(CONFIG, "mig.yaml", "h100-balanced") == {
        "all": "1g.10gb:2,2g.20gb:1,3g.40gb:1"}
    assert pin_from_file(CONFIG, "mig.yaml", "all-disabled") == {"all": "disabled"}
    half = pin_from_file(CONFIG, "mig.yaml", "half")
    assert half == {**{str(i): "disabled" for i in range(4)},
                    **{str(i): "1g.10gb:7" for i in range(4, 8)}}
    assert Baseline(name="b", mig=half).mig == half


@pytest.mark.parametrize(("text", "why"), [
    ("version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n", "version: v1"),
    ("version: v1\nmig-configs: {a: [{devices: all}]}\n", "'mig-enabled' are required"),
    ("version: v1\nmig-configs: {a: [{devices: some, mig-enabled: false}]}\n", "'all' or GPU"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true}]}\n", "'mig-devices' is"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, mig-devices: "
     "{1g.10gb: 1}}]}\n", "MIG devices given"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: "
     "{big: 1}}]}\n", "mig-devices 'big'"),
])
def test_what_mig_parted_refuses_is_refused_naming_the_config(text: str, why: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_mig_parted(text, "site.yaml")
    assert why in str(e.value) and "site.yaml" in str(e.value)


def test_an_unknown_config_name_lists_the_known_ones() -> None:
    known = "all-disabled, h100-balanced, half"
    with pytest.raises(ConfigError, match=f"no mig-config 'nope' .it has: {known}"):
        pin_from_file(CONFIG, "mig.yaml", "nope")


def test_a_pin_that_is_no_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="a layout is 'disabled'"):
        Baseline(name="b", mig={"all": "seven small ones"})
    with pytest.raises(ValueError, match="'all' or a GPU index"):
        Baseline(name="b", mig={"gpu0": "disabled"})


def test_the_commands_that_apply_a_layout() -> None:
    assert apply_commands({"all": "1g.10gb:2,2g.20gb:1,3g.40gb:1"}) == [
        "nvidia-smi -mig 1",
        "nvidia-smi mig -dci || true",
        "nvidia-smi mig -dgi || true",
        "nvidia-smi mig -cgi 3g.40gb,2g.20gb,1g.10gb,1g.10gb -C",
    ]
    assert apply_commands({"all": "disabled"}) == ["nvidia-smi -mig 0"]
    assert apply_commands({"1": "1g.10gb:7", "0": "disabled"}) == [
        "nvidia-smi -i 0 -mig 0",
        "nvidia-smi -i 1 -mig 1",
        "nvidia-smi mig -i 1 -dci || true",
        "nvidia-smi mig -i 1 -dgi || true",
        "nvidia-smi mig -i 1 -cgi " + ",".join(["1g.10gb"] * 7) + " -C",
    ]
    script = apply_script({"all": "disabled"})
    assert script.splitlines()[1:] == ["(", "set -e", "nvidia-smi -mig 0", ")"]
    # a compute-instance profile needs mig-parted (nvidia-smi -cgi -C makes one CI per GI)
    with pytest.raises(ConfigError, match="nvidia-mig-parted apply"):
        apply_commands({"all": "1c.3g.71gb:1,2c.3g.71gb:1"})


def test_gfd_labels_single_strategy() -> None:
    facts = _facts("h100-mig-8x")
    digest = label_digest(facts, "NVIDIA-H100-80GB-HBM3")
    # four profiles on the node: GFD's single strategy gives its INVALID labels
    assert mig_labels(digest, "single") == {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-INVALID",
        "nvidia.com/gpu.count": "0",
        "nvidia.com/gpu.replicas": "0",
        "nvidia.com/gpu.memory": "0",
    }
    one = {"product": "NVIDIA-H100-80GB-HBM3", "gpus": [[True, ["1g.10gb"] * 7]] * 8}
    assert mig_labels(one, "single") == {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
        "nvidia.com/gpu.count": "56",
    }
    assert mig_labels(label_digest(_facts("h100-8x"), "x"), "single") == {
        "nvidia.com/mig.strategy": "single"}  # no MIG-enabled GPU: as the none strategy
    assert mig_labels(digest, "none") == {} and mig_labels(digest, None) == {}


def test_gfd_labels_mixed_strategy_through_derive_labels() -> None:
    facts = _facts("h100-mig-8x")
    labels = derive_labels("m1", facts, HostState.AVAILABLE, "train-h100", None, None, [],
                           ExpectedSpec(mig_strategy="mixed"))
    mig = {k: v for k, v in labels.items() if k.startswith("nvidia.com/mig")}
    assert mig == {
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig-1g.10gb.count": "16",
        "nvidia.com/mig-1g.10gb.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
        "nvidia.com/mig-2g.20gb.count": "8",
        "nvidia.com/mig-2g.20gb.product": "NVIDIA-H100-80GB-HBM3-MIG-2g.20gb",
        "nvidia.com/mig-3g.40gb.count": "8",
        "nvidia.com/mig-3g.40gb.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb",
    }
    plain = derive_labels("m1", facts, HostState.AVAILABLE, "p", None, None, [], ExpectedSpec())
    assert "nvidia.com/mig.strategy" not in plain  # no strategy declared: none
    with pytest.raises(ValueError, match="none, single or mixed"):
        ExpectedSpec(mig_strategy="both")
