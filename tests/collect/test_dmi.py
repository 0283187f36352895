"""The ``dmi`` section: ``/sys/class/dmi/id`` read by the real script function, as root and as
an ordinary user (product_serial / product_uuid / board_serial are 0400 root on Linux: not
collected, never a problem), parsed into ``HostFacts.dmi``.

No capture of a real ``/sys/class/dmi/id`` exists in the fixtures (and this machine has none):
the values below are LAB values (``gpufleet.lab.templates.system_identity``) and the file
modes are those of the kernel's dmi-id driver (0444, the serials and UUID 0400)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import Section
from gpufleet.collect.dmi import DMI_FILES, parse_dmi
from gpufleet.collect.script import remote_script
from gpufleet.collect.shell_functions import DMI as _DMI
from gpufleet.domain.facts import DmiIdentity, HostFacts
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.renderers import render_sections
from gpufleet.lab.templates import system_identity

ROOT_ONLY = {"product_serial", "product_uuid", "board_serial"}


@pytest.fixture
def sysroot() -> Iterator[Path]:
    # Outside pytest's 0700 tmp dir so that an ordinary user can walk it.
    root = Path(tempfile.mkdtemp(prefix="gpufleet-dmi-"))
    root.chmod(0o755)
    ident = system_identity(LabHost(name="h1", model="h100-8x", serial_salt=42))
    d = root / "sys" / "class" / "dmi" / "id"
    d.mkdir(parents=True)
    for p in (root / "sys", root / "sys" / "class", root / "sys" / "class" / "dmi", d):
        p.chmod(0o755)
    for name, value in ident.items():
        f = d / name
        f.write_text(value + "\n")
        f.chmod(0o400 if name in ROOT_ONLY else 0o444)
    yield root
    shutil.rmtree(root)


def _dmi_output(sysroot: Path, *, as_nobody: bool) -> str:
    cmd = ["sh", "-c", f'R={sysroot}\n{_DMI}\ndmi; echo "rc=$?"']
    if as_nobody:
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=10)
    assert res.stderr == ""
    assert res.stdout.endswith("rc=0\n")
    return res.stdout.removesuffix("rc=0\n")


def test_root_reads_every_dmi_file(sysroot: Path) -> None:
    out = _dmi_output(sysroot, as_nobody=False)
    lab = system_identity(LabHost(name="h1", model="h100-8x", serial_salt=42))
    assert out == "".join(f"{k}={lab[k]}\n" for k in DMI_FILES)
    dmi = parse_dmi(out)
    assert dmi == DmiIdentity(
        vendor="NVIDIA", product="DGXH100", serial=lab["product_serial"],
        uuid=lab["product_uuid"], board_serial=lab["board_serial"], bios_version="2.1.0",
    )


def test_an_ordinary_user_gets_no_serial_and_no_error(sysroot: Path) -> None:
    out = _dmi_output(sysroot, as_nobody=True)
    assert out == "sys_vendor=NVIDIA\nproduct_name=DGXH100\nbios_version=2.1.0\n"
    dmi = parse_dmi(out)
    assert dmi.vendor == "NVIDIA" and dmi.bios_version == "2.1.0"
    assert dmi.serial is None and dmi.uuid is None and dmi.board_serial is None


def test_unreadable_serial_is_not_collected_not_a_problem() -> None:
    """Through the assembler: the section as a non-root login prints it (no serial/UUID)."""
    host = LabHost(name="h1", model="a100-8x", serial_salt=7)
    sections = render_sections(host)
    sections["dmi"] = Section("dmi", "sys_vendor=NVIDIA\nproduct_name=DGXA100\n", "", 0)
    facts = HostFacts.model_validate(
        assemble_facts(sections, datetime(2026, 1, 1, tzinfo=UTC), "h1").model_dump(mode="json")
    )
    assert facts.dmi == DmiIdentity(vendor="NVIDIA", product="DGXA100")
    assert facts.system_vendor == "NVIDIA" and facts.system_product == "DGXA100"
    assert not [p for p in facts.problems if "dmi" in p]


def test_empty_values_and_unknown_names_are_none() -> None:
    dmi = parse_dmi("sys_vendor=\nproduct_serial=  \nchassis_tag=X\nproduct_uuid=abc\n")
    assert dmi == DmiIdentity(uuid="abc")
    # The earlier two-line layout (vendor, product) still reads.
    assert parse_dmi("QEMU\nStandard PC (i440FX + PIIX, 1996)\n") == DmiIdentity(
        vendor="QEMU", product="Standard PC (i440FX + PIIX, 1996)"
    )


def test_lab_hosts_have_stable_distinct_identities() -> None:
    a = system_identity(LabHost(name="a", model="h100-8x", serial_salt=1))
    b = system_identity(LabHost(name="b", model="h100-8x", serial_salt=2))
    assert a == system_identity(LabHost(name="renamed", model="h100-8x", serial_salt=1))
    assert a["product_serial"] != b["product_serial"] and a["product_uuid"] != b["product_uuid"]


def test_old_snapshots_read_dmi_as_not_collected() -> None:
    old = {"facts_version": 2, "collected_at": "2026-01-01T00:00:00Z", "system_vendor": "X"}
    assert HostFacts.model_validate(old).dmi is None
    legacy = {"collected_at": "2026-01-01T00:00:00Z"}
    assert HostFacts.model_validate(legacy).dmi is None
    assert "dmi" in remote_script()
