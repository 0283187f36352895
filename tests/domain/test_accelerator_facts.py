"""The vendor-neutral accelerator section of host facts (issue 15): stored and read back,
bounded, upgraded from version 2 history, and every vendor's accelerators as one shape."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gpufleet.domain.accelerators import (
    Accelerator,
    ErrorCounter,
    Health,
    Link,
    LinkState,
    SoftwareVersions,
    Vendor,
    accelerator_versions,
    accelerators_of,
    inventories_of,
)
from gpufleet.domain.facts import FACTS_VERSION, HostFacts
from gpufleet.testing import make_facts

NPU = Accelerator(
    vendor=Vendor("huawei"), index=3, model="910B3", bus_id="0000:c1:00.0",
    memory_total_mib=65536, health=Health.ALARM, error_codes=("A4025021",),
    error_counters=(ErrorCounter("roce_rx_err_pkt_num", 11),),
    temperature_c=44.0, firmware={"firmware": "7.1.0.11.220"},
    links=(Link(kind="roce", peer=None, state=LinkState.DOWN),),
)
CANN = SoftwareVersions(driver="23.0.7", firmware="7.1.0.11.220", runtime="7.0.T10")


def test_vendor_records_round_trip_through_the_stored_json() -> None:
    facts = make_facts().model_copy(update={
        "accelerators": (NPU,), "accelerator_versions": {Vendor("huawei"): CANN},
        "accelerator_errors": {Vendor("amd"): "rocm-smi: command not found (rc=127)"},
    })
    stored = facts.model_dump(mode="json")
    assert stored["facts_version"] == FACTS_VERSION == 3
    assert stored["accelerators"][0]["vendor"] == "huawei"
    assert stored["accelerators"][0]["links"] == [
        {"kind": "roce", "peer": None, "state": "down", "speed": None}]
    assert stored["accelerator_versions"]["huawei"]["runtime"] == "7.0.T10"
    back = HostFacts.model_validate(stored)
    assert back.accelerators == (NPU,)
    assert back.accelerator_versions == {Vendor("huawei"): CANN}
    assert back.accelerator_errors == {Vendor("amd"): "rocm-smi: command not found (rc=127)"}


def test_nvidia_gpus_and_vendor_records_are_one_shape() -> None:
    facts = make_facts().model_copy(update={
        "accelerators": (NPU,), "accelerator_versions": {Vendor("huawei"): CANN}})
    accs = accelerators_of(facts)
    nvidia = [a for a in accs if a.vendor == Vendor.NVIDIA]
    assert len(nvidia) == len(facts.gpus) == 8 and accs[-1] == NPU
    first = facts.gpus[0]
    assert nvidia[0].model == first.product_name and nvidia[0].uuid == first.uuid
    assert nvidia[0].memory_total_mib == first.memory_total_mib
    assert nvidia[0].firmware == {"VBIOS": first.vbios_version}
    versions = accelerator_versions(facts)
    assert versions[Vendor.NVIDIA].driver == facts.driver_version
    assert versions[Vendor.NVIDIA].runtime == facts.cuda_version
    assert versions[Vendor("huawei")] == CANN
    assert [(i.vendor, i.count) for i in inventories_of(facts)] == [
        (Vendor("huawei"), 1), (Vendor.NVIDIA, 8)]


def test_a_gpu_in_an_error_state_is_an_alarm() -> None:
    facts = make_facts()
    assert facts.nvidia_smi is not None
    lost = facts.nvidia_smi.gpus[2].model_copy(update={"error": "GPU is lost"})
    report = facts.nvidia_smi.model_copy(
        update={"gpus": [*facts.nvidia_smi.gpus[:2], lost, *facts.nvidia_smi.gpus[3:]]})
    accs = accelerators_of(facts.model_copy(update={"nvidia_smi": report}))
    assert accs[2].health is Health.ALARM and accs[2].error_codes == ("GPU is lost",)


def test_a_record_that_does_not_fit_is_refused_naming_the_device() -> None:
    stored = make_facts().model_dump(mode="json")
    bad = {**stored, "accelerators": [{"vendor": "huawei", "index": 1, "model": "x" * 65}]}
    with pytest.raises(ValidationError, match="huawei #1: model longer than 64"):
        HostFacts.model_validate(bad)
    with pytest.raises(ValidationError):
        HostFacts.model_validate({**stored, "accelerators": [{"vendor": "intel", "index": 0,
                                                              "model": "x"}]})


def _version2(pci: list[dict[str, Any]]) -> dict[str, Any]:
    stored = make_facts().model_dump(mode="json")
    for key in ("accelerators", "accelerator_versions", "accelerator_errors"):
        del stored[key]
    return {**stored, "facts_version": 2, "pci_devices": pci}


def test_version_two_nvidia_history_reads_unchanged() -> None:
    current = make_facts()
    old = _version2(current.model_dump(mode="json")["pci_devices"])
    read = HostFacts.model_validate(old)
    assert read.facts_version == FACTS_VERSION
    assert read.gpus == current.gpus and read.accelerators == ()
    assert read.accelerator_errors == {}
    assert accelerators_of(read) == accelerators_of(current)


def test_version_two_history_with_npus_on_the_bus_never_vouches_for_them() -> None:
    npu = {"address": "0000:c1:00.0", "class_name": "Processing accelerators",
           "class_id": "1200", "vendor_id": "19e5", "device_id": "d802",
           "description": "Huawei Technologies Co., Ltd. Device d802"}
    audio = {**npu, "class_name": "Audio device", "class_id": "0403", "vendor_id": "1002"}
    read = HostFacts.model_validate(_version2([npu, audio]))
    assert read.accelerators == ()
    assert set(read.accelerator_errors) == {Vendor("huawei")}
    assert "before facts version 3" in read.accelerator_errors[Vendor("huawei")]
