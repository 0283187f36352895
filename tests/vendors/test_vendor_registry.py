"""Vendors are plugins found by discovery, not listed (issue 15): the built-in registry, and a
vendor that another distribution installs (its plugin and its lab model, entry points of a
real ``.dist-info`` on ``sys.path``) collecting, validating and showing in the labels and the
exports without any file of gpufleet naming it.

The throwaway vendor ``acme`` is synthetic on purpose: it tests the plugin mechanism, not a
parser (its tool, ``acme-smi --list``, and its PCI id ``1ace`` are made up; the real vendors'
parsers are tested on real captures beside this file).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.domain import vendors
from gpufleet.domain.accelerators import (
    PCI_VENDOR_IDS,
    SoftwareVersions,
    Vendor,
    accelerators_on_bus,
    inventory_group,
)
from gpufleet.domain.facts import PciDevice
from gpufleet.errors import ConfigError
from gpufleet.lab import vendors as lab_vendors
from gpufleet.lab.catalogue import all_models, model_spec
from gpufleet.lab.demo import mixed_models
from gpufleet.lab.faults import fault_kinds, validate_faults
from gpufleet.service.hosts.vendor_exports import EXPORTS
from gpufleet.testing import make_facts

ACME_PLUGIN = '''
"""The throwaway vendor's plugin: ``acme-smi --list`` -> accelerator records."""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.domain.accelerator_exports import VendorExport
from gpufleet.domain.accelerators import (
    Accelerator, AcceleratorInventory, SoftwareVersions, normalize_pci_address,
)
from gpufleet.domain.vendors import Vendor, VendorCollector, VendorPlugin, VendorSection
from gpufleet.errors import ParseError

ACME = Vendor("acme")
COMMAND = "acme-smi --list"


def read(outputs: Mapping[str, str]) -> AcceleratorInventory:
    """``# acme-smi <version> driver <version>``, then ``<index> <bus> <MiB> <C> <model>``."""
    lines = outputs["acme_smi_list"].splitlines()
    if not lines or not lines[0].startswith("# acme-smi "):
        raise ParseError(COMMAND, "no acme-smi header", line=1)
    _, _, tool, _, driver = lines[0].split()
    accs = []
    for n, line in enumerate(lines[1:], start=2):
        try:
            index, bus, mib, temp, model = line.split(maxsplit=4)
            accs.append(Accelerator(
                vendor=ACME, index=int(index), model=model,
                bus_id=normalize_pci_address(bus), memory_total_mib=int(mib),
                temperature_c=float(temp),
            ))
        except ValueError as exc:
            raise ParseError(COMMAND, f"bad device line: {exc}", line=n) from exc
    return AcceleratorInventory(ACME, tuple(accs), SoftwareVersions(driver=driver, tool=tool))


def _labels(inv: AcceleratorInventory) -> dict[str, str]:
    models = inv.models()
    return {"acme.example/xpu.model": models[0]} if len(models) == 1 else {}


def _resource(inv: AcceleratorInventory) -> str:
    return "acme.example/xpu"


def _group(model: str) -> str:
    return "xpu_" + model.split()[-1].lower()


PLUGIN = VendorPlugin(
    name=ACME,
    pci_vendor_id="1ace",
    lspci_name="Acme Accelerators",
    exports=VendorExport(labels=_labels, resource=_resource, gres_name="xpu", runtime="acmert"),
    collector=VendorCollector(
        vendor=ACME,
        tool="acme-smi",
        primary="acme_smi_list",
        sections=(VendorSection("acme_smi_list", "$TO " + COMMAND, tool="acme-smi",
                                args="--list"),),
        read=read,
    ),
    group=_group,
    description="Acme XPUs",
)
'''

ACME_LAB = '''
"""The throwaway vendor's lab model: ``acme-2x`` hosts and their ``xpu-missing`` fault."""

from __future__ import annotations

from gpufleet.lab.catalogue import ModelSpec
from gpufleet.lab.vendors import Answer, LabVendor

ACME_2X = ModelSpec(
    name="acme-2x", group="xpu_x1", pool="train-acme", gpu_model="X1", gpu_count=2,
    gpu_memory_mib=16384, smi_format="none", smi_file="", replicate=False,
    gpu_bus_ids=("0000:3b:00.0", "0000:5e:00.0"),
    pci_gpu="Processing accelerators [1200]: Acme Accelerators Inc. Device [1ace:0001]",
    has_remapped_rows=False, nvlink_file=None, nvlink_per_gpu=None, ibstat_file=None,
    fabric="none", ib_ports=0, ib_rate_gbps=None, nic_bus_ids=(), extra_pci=(),
    nvswitch=False, topo_capture=None, dmi=("Acme", "X1 Server"), nproc=64,
    mem_total_kib=263856128, disks=(("nvme0n1", 1920383410176, "ACME NVME"),),
    vendor="acme", serial_prefix="7777",
)


def render(host, spec: ModelSpec) -> dict[str, Answer]:
    rows = [f"{i} {bus} 16384 {40 + i} Acme X1" for i, bus in enumerate(spec.gpu_bus_ids)]
    if "xpu-missing" in host.faults:
        rows = rows[:-1]  # the tool lost one, lspci still lists it
    text = "# acme-smi 1.2.0 driver " + (host.driver or "3.4.5") + "\\n"
    return {"acme_smi_list": (text + "".join(r + "\\n" for r in rows), "", 0)}


LAB = LabVendor(
    vendor="acme",
    models=(ACME_2X,),
    render=render,
    bus_ids=lambda spec: spec.gpu_bus_ids,
    faults={"xpu-missing": "one XPU missing from acme-smi"},
    check_fault=lambda spec, kind, arg: "it takes no argument" if arg else None,
    demo=(("acme-2x", ()),),
)
'''

ENTRY_POINTS = """\
[gpufleet.vendors]
acme = acme_gpufleet.plugin:PLUGIN

[gpufleet.lab.vendors]
acme = acme_gpufleet.lab:LAB
"""


@pytest.fixture
def acme_dist(tmp_path: Path) -> Path:
    """A directory holding the throwaway vendor's distribution: its package and the
    ``.dist-info`` whose ``entry_points.txt`` registers the plugin and the lab model."""
    root = tmp_path / "site"
    pkg = root / "acme_gpufleet"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""Acme XPUs for gpufleet (a test distribution)."""\n')
    (pkg / "plugin.py").write_text(textwrap.dedent(ACME_PLUGIN))
    (pkg / "lab.py").write_text(textwrap.dedent(ACME_LAB))
    info = root / "acme_gpufleet-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-gpufleet\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


@pytest.fixture
def acme_installed(acme_dist: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The distribution on ``sys.path`` (as if installed), the registries rediscovered."""
    monkeypatch.syspath_prepend(str(acme_dist))
    vendors.reset()
    lab_vendors.reset()
    yield acme_dist
    monkeypatch.undo()
    for mod in [m for m in sys.modules if m.startswith("acme_gpufleet")]:
        del sys.modules[mod]
    vendors.reset()
    lab_vendors.reset()


def test_the_built_in_registry_holds_nvidia_huawei_and_amd() -> None:
    assert {"nvidia", "huawei", "amd"} <= set(vendors.vendor_names())
    want = {
        "nvidia": ("10de", "NVIDIA Corporation"),
        "huawei": ("19e5", "Huawei Technologies"),
        "amd": ("1002", "Advanced Micro Devices"),
    }
    for name, (pci, lspci) in want.items():
        p = vendors.plugin(name)
        assert (p.name, p.pci_vendor_id, p.lspci_name) == (name, pci, lspci)
        assert PCI_VENDOR_IDS[Vendor(name)] == pci
    assert vendors.plugin("nvidia").collector is None  # nvidia-smi is the core's
    # in vendor name order (other vendors' collectors sort among them: cambricon, hygon ...)
    theirs = [c for c in vendors.collectors() if c.vendor in ("amd", "huawei")]
    assert [c.vendor for c in theirs] == ["amd", "huawei"]
    assert [c.tool for c in theirs] == ["rocm-smi", "npu-smi"]
    assert EXPORTS[Vendor("huawei")].gres_name == "npu" and EXPORTS[Vendor.NVIDIA].runtime == "cuda"
    assert Vendor("huawei") is Vendor("huawei") and Vendor("amd").value == "amd"
    with pytest.raises(ValueError, match="'acme' is not an accelerator vendor"):
        Vendor("acme")
    with pytest.raises(KeyError):
        vendors.plugin("acme")
    assert "acme" not in PCI_VENDOR_IDS and EXPORTS.get(Vendor.NVIDIA) is not None


def test_a_host_of_one_vendor_imports_only_that_vendors_plugin() -> None:
    """``gpufleet labels HOST`` reads the stored digest: an NVIDIA host loads the NVIDIA plugin
    (a few declarations) and no other vendor's parsers; an Ascend host only Huawei's."""
    code = textwrap.dedent("""
        import sys
        from gpufleet.service.hosts.vendor_exports import digest_accelerator_labels as labels
        def loaded():
            return sorted(m for m in sys.modules if m.startswith("gpufleet.vendors."))
        def digest(vendor, model):
            return [dict(vendor=vendor, versions=[None] * 4, accelerators=[[0, model, None, 1]])]
        print(labels(digest("nvidia", "H100")), loaded())
        print(labels(digest("huawei", "910B3"))["accelerator"], loaded())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, second = r.stdout.splitlines()
    assert first == "{} ['gpufleet.vendors.nvidia']"
    assert second.startswith("huawei-Ascend910 ['gpufleet.vendors.huawei',")
    assert "gpufleet.vendors.amd" not in second


def test_facts_naming_a_vendor_load_only_while_its_plugin_is_installed() -> None:
    from gpufleet.domain.facts import HostFacts

    facts = make_facts().model_copy(
        update={"accelerator_versions": {Vendor("huawei"): SoftwareVersions(driver="23.0.7")}}
    )
    data = json.loads(facts.model_dump_json())
    assert data["accelerator_versions"] == {
        "huawei": {"driver": "23.0.7", "firmware": None, "runtime": None, "tool": None}
    }
    back = HostFacts.model_validate(data)
    (key,) = back.accelerator_versions
    assert type(key) is Vendor and key is Vendor("huawei")
    data["accelerator_versions"] = {"acme": data["accelerator_versions"]["huawei"]}
    with pytest.raises(ValueError, match="not an accelerator vendor"):
        HostFacts.model_validate(data)  # fail closed: no plugin vouches for what it means


def test_a_vendor_from_another_distribution_is_found_and_imported_on_first_use(
    acme_installed: Path,
) -> None:
    assert "acme" in vendors.vendor_names()
    assert "acme_gpufleet.plugin" not in sys.modules  # found by name only
    acme = Vendor("acme")
    assert "acme_gpufleet.plugin" not in sys.modules
    assert PCI_VENDOR_IDS[acme] == "1ace"  # first lookup imports it
    assert "acme_gpufleet.plugin" in sys.modules
    lspci = [
        PciDevice(
            address="0000:3b:00.0",
            class_id="1200",
            class_name="Processing accelerators",
            vendor_id="1ace",
            device_id="0001",
            description="Acme",
        )
    ]
    assert accelerators_on_bus(lspci) == {acme: 1}
    plugin = vendors.plugin("acme")
    assert plugin.collector is not None
    inv = plugin.collector.read(
        {"acme_smi_list": "# acme-smi 1.2.0 driver 3.4.5\n0 3b:00.0 16384 41 Acme X1\n"}
    )
    assert inventory_group(inv) == "xpu_x1"
    assert EXPORTS[acme].labels(inv) == {"acme.example/xpu.model": "Acme X1"}
    names = [c.vendor for c in vendors.collectors()]
    assert "acme" in names and names == sorted(names)  # in the script, in vendor order
    # its lab model: a model of the catalogue, its fault known and checked like the others'
    assert "acme-2x" in all_models() and model_spec("acme-2x").vendor == "acme"
    assert "xpu-missing" in fault_kinds()
    assert mixed_models(9)[-4:] == ["ascend-910b3-8x", "ascend-910b3-8x", "mi100-4x", "acme-2x"]
    validate_faults("acme-2x", ["xpu-missing", "unreachable"])
    with pytest.raises(ConfigError, match="it has no Acme XPUs"):
        validate_faults("h100-8x", ["xpu-missing"])
    with pytest.raises(ConfigError, match="it has no Ascend NPUs"):
        validate_faults("acme-2x", ["npu-alarm"])
    with pytest.raises(ConfigError, match="it has no NVIDIA GPUs"):
        validate_faults("acme-2x", ["xid:79"])


def test_a_broken_plugin_is_a_config_error_naming_it(
    acme_installed: Path,
) -> None:
    module = acme_installed / "acme_gpufleet" / "plugin.py"
    module.write_text("raise RuntimeError('no acme-smi bindings')\n")
    where = "vendor plugin acme = acme_gpufleet.plugin:PLUGIN"
    with pytest.raises(ConfigError, match=f"{where}: cannot load: RuntimeError: no acme-smi"):
        vendors.plugin("acme")
    module.write_text("PLUGIN = 'not a plugin'\n")
    with pytest.raises(ConfigError, match=f"{where}: is a str, expected"):
        vendors.plugin("acme")
    assert Vendor("acme") == "acme"  # still a registered name: its facts load, its exports fail
    assert vendors.plugin("amd").name == "amd"  # the other vendors are unaffected


#: Run in a fresh interpreter with the distribution on PYTHONPATH, as an installed plugin is:
#: the collection script is built at import, from the vendors found then.
_LIFECYCLE = """
import json, sys
from pathlib import Path
from gpufleet.domain.accelerator_exports import extended_resources
from gpufleet.domain.accelerators import inventories_of
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet, write_inventory
from gpufleet.service.exports.ansible import inventory_list
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.views.hosts import show_host
from gpufleet.service.exports.slurm import slurm_config
from gpufleet.service.views.summary import host_labels
from gpufleet.service.hosts.validate import validate
from gpufleet.service.hosts.vendor_exports import EXPORTS

home, lab = Path(sys.argv[1]), Path(sys.argv[2])
lab.mkdir()
fleet = Fleet.open(home=home, actor="pytest")
lf = create_fleet(3, models=["h100-8x", "acme-2x", "acme-2x"], faults={"gpu-03": ["xpu-missing"]})
lf.save(lab)
write_inventory(lf, lab / "inventory.ini", transport="sim", lab_dir=lab)
enroll(fleet, load_inventory(lab / "inventory.ini"))
validate(fleet)
out = {"hosts": {}}
for name in ("gpu-01", "gpu-02", "gpu-03"):
    h = show_host(fleet, name)
    invs = inventories_of(h.facts)
    (labels,) = host_labels(fleet, name)
    out["hosts"][name] = {
        "state": h.view.state,
        "accelerators": [[a.vendor, a.index, a.model, a.bus_id] for a in h.facts.accelerators],
        "errors": dict(h.facts.accelerator_errors),
        "resources": extended_resources(invs, EXPORTS),
        "labels": labels.labels,
    }
out["inventory"] = inventory_list(fleet)
out["slurm"] = slurm_config(fleet)
print(json.dumps(out, default=str))
fleet.db.dispose()
"""


def test_a_new_vendor_host_collects_validates_and_shows_in_labels_and_exports(
    acme_dist: Path, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(acme_dist), os.environ.get("PYTHONPATH", "")]),
        "GPUFLEET_HOME": str(tmp_path / "home"),
    }
    env.pop("GPUFLEET_DATABASE_URL", None)
    r = subprocess.run(
        [sys.executable, "-c", _LIFECYCLE, str(tmp_path / "home"), str(tmp_path / "lab")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.splitlines()[-1])
    hosts = out["hosts"]
    # the NVIDIA host is as before: acme-smi is not installed there (rc 127), no error
    assert hosts["gpu-01"]["accelerators"] == [] and hosts["gpu-01"]["errors"] == {}
    assert hosts["gpu-01"]["resources"] == {"nvidia.com/gpu": 8}
    # the Acme host: collected by its plugin, labelled and exported in its conventions
    acme = hosts["gpu-02"]
    assert acme["accelerators"] == [
        ["acme", 0, "Acme X1", "0000:3b:00.0"],
        ["acme", 1, "Acme X1", "0000:5e:00.0"],
    ]
    assert acme["resources"] == {"acme.example/xpu": 2}
    assert acme["labels"]["acme.example/xpu.model"] == "Acme-X1"  # sanitised like every label
    assert acme["labels"]["gpufleet.io/accelerator.vendor"] == "acme"
    assert acme["labels"]["gpufleet.io/accelerator.count"] == "2"
    assert acme["state"] == "available", acme
    assert out["inventory"]["xpu_x1"]["hosts"] == ["gpu-02", "gpu-03"]
    assert out["inventory"]["xpu_x1"]["vars"]["accelerator_vendor"] == "acme"
    assert out["inventory"]["xpu_x1"]["vars"]["accelerator_driver_version"] == "3.4.5"
    conf, gres = out["slurm"]
    assert "Gres=xpu:x1:2" in conf and "NodeName=gpu-02 Name=xpu Type=x1 Count=2" in gres
    # the lab fault: the tool sees 1 of the 2 XPUs lspci lists -> quarantined, naming them
    lost = hosts["gpu-03"]
    assert lost["state"] == "quarantined", lost
    assert [a[1] for a in lost["accelerators"]] == [0]
    assert lost["labels"]["gpufleet.io/fault"] == "gpu_lost"
