"""Inventory reading: Ansible INI, Ansible YAML and CSV, checked against ansible-inventory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpufleet.domain.spec import ExpectedSpec
from gpufleet.errors import InventoryError, NotFound
from gpufleet.inventory import Inventory, InventoryHost, load_inventory

ANSIBLE_INVENTORY = Path(sys.executable).parent / "ansible-inventory"

# The dc1 fleet as ops keep it. Line numbers matter: error tests and var_lines refer to them.
FLEET_INI = """\
# dc1 GPU fleet -- maintained by ops, see runbook RB-12
; the jump host is not in any group
bastion ansible_host=192.0.2.10 ansible_user=jump

[gpu_h800]
gpu-h800-[01:04] ansible_user=ops
gpu-h800-05 ansible_host=10.0.1.5 ansible_port=2222 gpufleet_rack=r13 note="spare, rack B"

[gpu_h100]
h100-a.dc1 ansible_ssh_host=10.0.2.1 ansible_ssh_port=2200 ansible_ssh_user=legacy
h100-[b:c].dc1 ansible_ssh_private_key_file=~/.ssh/h100_ed25519
10.0.2.[10:14:2]   # PCIe test boxes, every other address

[burnin]
gpu-h800-01 gpufleet_baseline=bl-2024-06
h100-a.dc1

[gpu:children]
gpu_h800
gpu_h100

[dc1:children]
gpu
burnin

[all:vars]
ansible_user=root
gpufleet_fabric=none
gpufleet_pool=default

[dc1:vars]
gpufleet_rack=r00
gpufleet_fabric=ib

[gpu:vars]
gpufleet_gpu_count=8
gpufleet_pool=training
gpufleet_nvswitch=True

[gpu_h800:vars]
gpufleet_gpu_model=H800
gpufleet_ib_ports=8
gpufleet_ib_rate_gbps=400
gpufleet_rack=r12

[gpu_h100:vars]
gpufleet_gpu_model="H100 80GB HBM3"
gpufleet_pool=inference

[burnin:vars]
gpufleet_pool=burnin
"""

FLEET_YAML = """\
# dc1 GPU fleet, YAML edition
all:
  vars:
    ansible_user: root
    gpufleet_fabric: none
    gpufleet_pool: default
  hosts:
    bastion:
      ansible_host: 192.0.2.10
      ansible_user: jump
  children:
    dc1:
      vars:
        gpufleet_rack: r00
        gpufleet_fabric: ib
      children:
        gpu:
          vars:
            gpufleet_gpu_count: 8
            gpufleet_pool: training
            gpufleet_nvswitch: true
          children:
            gpu_h800:
              vars: &h800
                gpufleet_gpu_model: H800
                gpufleet_ib_ports: 8
                gpufleet_ib_rate_gbps: 400
                gpufleet_rack: r12
              hosts:
                gpu-h800-[01:04]:
                  ansible_user: ops
                gpu-h800-05:
                  ansible_host: 10.0.1.5
                  ansible_port: 2222
                  gpufleet_rack: r13
                  note: spare, rack B
            gpu_h100:
              vars:
                gpufleet_gpu_model: H100 80GB HBM3
                gpufleet_pool: inference
              hosts:
                h100-a.dc1:
                  ansible_ssh_host: 10.0.2.1
                  ansible_ssh_port: 2200
                  ansible_ssh_user: legacy
                h100-[b:c].dc1:
                  ansible_ssh_private_key_file: ~/.ssh/h100_ed25519
                10.0.2.[10:14:2]:
        burnin:
          vars:
            gpufleet_pool: burnin
          hosts:
            gpu-h800-01:
              gpufleet_baseline: bl-2024-06
            h100-a.dc1:
"""

FLEET_CSV = """\
name,address,port,user,key_file,groups,gpufleet_gpu_model,gpufleet_gpu_count,gpufleet_rack,note
bastion,192.0.2.10,,jump,,,,,,
gpu-h800-01,10.0.1.1,,ops,,gpu_h800;burnin,H800,8,r12,
gpu-h800-02,10.0.1.2,,ops,,gpu_h800,H800,8,r12,
gpu-h800-03,10.0.1.3,,ops,,gpu_h800,H800,8,r12,
gpu-h800-04,10.0.1.4,,ops,,gpu_h800,H800,8,r12,
gpu-h800-05,10.0.1.5,2222,root,,gpu_h800,H800,8,r13,"spare, rack B"
h100-a.dc1,10.0.2.1,2200,legacy,,gpu_h100 burnin,H100 80GB HBM3,8,r00,
h100-b.dc1,,,root,~/.ssh/h100_ed25519,gpu_h100,H100 80GB HBM3,8,r00,
h100-c.dc1,,,root,~/.ssh/h100_ed25519,gpu_h100,H100 80GB HBM3,8,r00,
10.0.2.10,,,root,,gpu_h100,H100 80GB HBM3,8,r00,"multi-line
note from the asset DB"
10.0.2.12,,,root,,gpu_h100,H100 80GB HBM3,8,r00,
10.0.2.14,,,root,,gpu_h100,H100 80GB HBM3,8,r00,
"""

FLEET_NAMES = [
    "bastion",
    "gpu-h800-01", "gpu-h800-02", "gpu-h800-03", "gpu-h800-04", "gpu-h800-05",
    "h100-a.dc1", "h100-b.dc1", "h100-c.dc1",
    "10.0.2.10", "10.0.2.12", "10.0.2.14",
]
H800 = [n for n in FLEET_NAMES if n.startswith("gpu-h800")]
H100 = [n for n in FLEET_NAMES if n.startswith(("h100", "10.0.2."))]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load_text(tmp_path: Path, name: str, text: str) -> Inventory:
    return load_inventory(write(tmp_path, name, text))


def expect_error(tmp_path: Path, name: str, text: str, line: int | None, *words: str) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    err = info.value
    assert err.path == str(path)
    assert err.line == line, str(err)
    prefix = f"{path}:{line}: " if line is not None else f"{path}: "
    assert str(err).startswith(prefix), str(err)
    for word in words:
        assert word in err.message, err.message


@pytest.fixture
def ini_inv(tmp_path: Path) -> Inventory:
    return load_text(tmp_path, "dc1.ini", FLEET_INI)


@pytest.fixture
def yaml_inv(tmp_path: Path) -> Inventory:
    return load_text(tmp_path, "dc1.yml", FLEET_YAML)


# ------------------------------------------------------------------------------------ INI


def test_ini_hosts_in_file_order_with_ranges(ini_inv: Inventory) -> None:
    assert ini_inv.names == FLEET_NAMES
    assert len(ini_inv.hosts) == 12
    assert ini_inv.source.endswith("dc1.ini")


def test_ini_connection_data(ini_inv: Inventory) -> None:
    bastion = ini_inv.host("bastion")
    assert (bastion.address, bastion.port, bastion.user, bastion.key_file) == (
        "192.0.2.10", 22, "jump", None)
    assert bastion.groups == []
    assert bastion.line == 3

    h05 = ini_inv.host("gpu-h800-05")
    assert (h05.address, h05.port, h05.user) == ("10.0.1.5", 2222, "root")
    assert h05.vars["note"] == "spare, rack B"

    h02 = ini_inv.host("gpu-h800-02")
    assert (h02.address, h02.port, h02.user) == ("gpu-h800-02", 22, "ops")
    assert h02.line == 6

    legacy = ini_inv.host("h100-a.dc1")  # ansible_ssh_* aliases, and they beat ansible_user
    assert (legacy.address, legacy.port, legacy.user) == ("10.0.2.1", 2200, "legacy")

    keyed = ini_inv.host("h100-c.dc1")
    assert keyed.key_file == "~/.ssh/h100_ed25519"
    assert keyed.user == "root"  # from [all:vars]

    stride = ini_inv.host("10.0.2.12")
    assert (stride.address, stride.port, stride.line) == ("10.0.2.12", 22, 12)


def test_ini_groups_include_parents(ini_inv: Inventory) -> None:
    assert ini_inv.host("gpu-h800-01").groups == ["gpu_h800", "burnin", "gpu", "dc1"]
    assert ini_inv.host("gpu-h800-03").groups == ["gpu_h800", "gpu", "dc1"]
    assert ini_inv.host("h100-a.dc1").groups == ["gpu_h100", "burnin", "gpu", "dc1"]
    assert list(ini_inv.groups) == ["gpu_h800", "gpu_h100", "burnin", "gpu", "dc1"]
    assert ini_inv.groups["gpu_h800"] == H800
    assert ini_inv.groups["gpu_h100"] == H100
    assert ini_inv.groups["burnin"] == ["gpu-h800-01", "h100-a.dc1"]
    assert ini_inv.groups["gpu"] == H800 + H100
    assert ini_inv.groups["dc1"] == H800 + H100
    assert "all" not in ini_inv.groups and "ungrouped" not in ini_inv.groups


def test_ini_var_precedence(ini_inv: Inventory) -> None:
    bastion = ini_inv.host("bastion")
    assert bastion.pool == "default"
    assert bastion.vars["gpufleet_fabric"] == "none"
    assert "gpufleet_rack" not in bastion.vars
    assert bastion.baseline is None

    h01 = ini_inv.host("gpu-h800-01")
    # burnin and gpu are both at depth 2: alphabetical order, so 'gpu' is applied last.
    assert h01.pool == "training"
    assert h01.baseline == "bl-2024-06"
    assert h01.vars["gpufleet_rack"] == "r12"  # child group beats dc1
    assert h01.vars["gpufleet_fabric"] == "ib"  # dc1 beats all
    assert h01.var_lines["gpufleet_rack"] == 44

    assert ini_inv.host("gpu-h800-05").vars["gpufleet_rack"] == "r13"  # host beats groups
    assert ini_inv.host("gpu-h800-05").var_lines["gpufleet_rack"] == 7
    assert ini_inv.host("h100-a.dc1").pool == "inference"  # depth 3 beats burnin (depth 2)
    assert ini_inv.host("h100-b.dc1").vars["gpufleet_rack"] == "r00"
    assert ini_inv.host("h100-b.dc1").vars["gpufleet_gpu_model"] == "H100 80GB HBM3"


def test_ini_expected_spec(ini_inv: Inventory) -> None:
    assert ini_inv.host("gpu-h800-02").expected_spec() == ExpectedSpec(
        gpu_count=8, gpu_model="H800", nvswitch=True, fabric="ib", ib_ports=8,
        ib_rate_gbps=400.0, rack="r12")
    assert ini_inv.host("h100-c.dc1").expected_spec() == ExpectedSpec(
        gpu_count=8, gpu_model="H100 80GB HBM3", nvswitch=True, fabric="ib", rack="r00")
    assert ini_inv.host("bastion").expected_spec() == ExpectedSpec(fabric="none")


def test_ini_group_priority_breaks_ties(tmp_path: Path) -> None:
    inv = load_text(tmp_path, "prio.ini", """\
        [alpha]
        node1
        [zulu]
        node1
        [alpha:vars]
        gpufleet_pool=alpha
        ansible_group_priority=10
        [zulu:vars]
        gpufleet_pool=zulu
        """)
    assert inv.host("node1").pool == "alpha"


def test_ini_duplicate_host_definitions_merge(tmp_path: Path) -> None:
    inv = load_text(tmp_path, "dup.ini", """\
        [a]
        gpu-01 ansible_host=10.0.0.1 gpufleet_rack=r1
        [b]
        gpu-01 gpufleet_rack=r2 ansible_port=2022
        gpu-01:2200
        """)
    host = inv.host("gpu-01")
    assert len(inv.hosts) == 1
    assert (host.address, host.port, host.line) == ("10.0.0.1", 2200, 2)
    assert host.vars["gpufleet_rack"] == "r2"
    assert host.groups == ["a", "b"]


def test_ini_ranges_and_quoting(tmp_path: Path) -> None:
    inv = load_text(tmp_path, "hosts", """\
        [big]
        gpu-[01:16]
        [letters]
        node-[a:f]
        [stride]
        n[0:10:2]
        [multi]
        r[1:2]-gpu[a:b]:2201 ansible_user='ops team' label="x y"  # trailing comment
        """)
    assert inv.groups["big"] == [f"gpu-{i:02d}" for i in range(1, 17)]
    assert inv.groups["letters"] == [f"node-{c}" for c in "abcdef"]
    assert inv.groups["stride"] == ["n0", "n2", "n4", "n6", "n8", "n10"]
    assert inv.groups["multi"] == ["r1-gpua", "r1-gpub", "r2-gpua", "r2-gpub"]
    multi = inv.host("r2-gpub")
    assert (multi.port, multi.user, multi.vars["label"]) == (2201, "ops team", "x y")


def test_ini_empty_child_group_declared_later(tmp_path: Path) -> None:
    inv = load_text(tmp_path, "later.cfg", """\
        [gpu:children]
        gpu_a100
        gpu_h800
        [gpu_h800]
        h1
        [gpu_a100:children]
        """)
    assert inv.groups == {"gpu": ["h1"], "gpu_a100": [], "gpu_h800": ["h1"]}
    assert inv.host("h1").groups == ["gpu", "gpu_h800"]


def test_rereading_is_deterministic(tmp_path: Path) -> None:
    path = write(tmp_path, "dc1.ini", FLEET_INI)
    first, second = load_inventory(path), load_inventory(path)
    assert first == second
    assert [h.model_dump() for h in first.hosts] == [h.model_dump() for h in second.hosts]


def test_unknown_host_is_not_found(ini_inv: Inventory) -> None:
    with pytest.raises(NotFound):
        ini_inv.host("gpu-h800-99")


def test_models_are_frozen(ini_inv: Inventory) -> None:
    with pytest.raises(ValueError):
        ini_inv.hosts[0].port = 23  # type: ignore[misc]


# ------------------------------------------------------------------------------------ YAML


def _connection(host: InventoryHost) -> tuple[Any, ...]:
    return (host.name, host.address, host.port, host.user, host.key_file, sorted(host.groups))


def test_yaml_matches_ini(ini_inv: Inventory, yaml_inv: Inventory) -> None:
    assert yaml_inv.names == FLEET_NAMES
    assert [_connection(h) for h in yaml_inv.hosts] == [_connection(h) for h in ini_inv.hosts]
    assert [h.vars for h in yaml_inv.hosts] == [h.vars for h in ini_inv.hosts]
    assert yaml_inv.groups == ini_inv.groups
    assert [h.expected_spec() for h in yaml_inv.hosts] == [
        h.expected_spec() for h in ini_inv.hosts]


def test_yaml_lines(yaml_inv: Inventory) -> None:
    assert yaml_inv.host("bastion").line == 8
    assert yaml_inv.host("gpu-h800-03").line == 30
    assert yaml_inv.host("gpu-h800-05").var_lines["gpufleet_rack"] == 35
    assert yaml_inv.host("gpu-h800-02").var_lines["gpufleet_rack"] == 28


def test_yaml_without_extension_and_merge_keys(tmp_path: Path) -> None:
    inv = load_text(tmp_path, "hosts", """\
        ---
        all:
          children:
            gpu_h800:
              hosts:
                a1: &conn {ansible_user: ops, ansible_port: 2022}
                a2:
                  <<: *conn
                  ansible_port: 2023
            empty:
        """)
    assert [(h.name, h.user, h.port) for h in inv.hosts] == [
        ("a1", "ops", 2022), ("a2", "ops", 2023)]
    assert inv.groups == {"gpu_h800": ["a1", "a2"], "empty": []}


def test_empty_files(tmp_path: Path) -> None:
    for name in ("empty.yml", "empty.ini", "empty.csv"):
        inv = load_text(tmp_path, name, "# nothing yet\n")
        assert inv.hosts == [] and inv.groups == {}


# ------------------------------------------------------------------------------------ CSV


def test_csv_fleet(tmp_path: Path) -> None:
    inv = load_text(tmp_path, "dc1.csv", FLEET_CSV)
    assert inv.names == FLEET_NAMES
    h05 = inv.host("gpu-h800-05")
    assert (h05.address, h05.port, h05.user, h05.line) == ("10.0.1.5", 2222, "root", 7)
    assert h05.vars["note"] == "spare, rack B"
    assert h05.vars["ansible_host"] == "10.0.1.5"
    assert inv.host("gpu-h800-01").groups == ["gpu_h800", "burnin"]
    assert inv.host("h100-a.dc1").groups == ["burnin", "gpu_h100"]  # inventory group order
    assert inv.host("bastion").groups == []
    keyed = inv.host("h100-b.dc1")
    assert (keyed.address, keyed.port, keyed.key_file) == ("h100-b.dc1", 22, "~/.ssh/h100_ed25519")
    assert inv.host("10.0.2.10").vars["note"] == "multi-line\nnote from the asset DB"
    assert inv.host("10.0.2.12").line == 13  # the quoted cell above spans two lines
    assert inv.groups["burnin"] == ["gpu-h800-01", "h100-a.dc1"]
    assert inv.groups["gpu_h100"] == H100
    assert inv.host("gpu-h800-03").expected_spec() == ExpectedSpec(
        gpu_model="H800", gpu_count=8, rack="r12")
    assert inv.host("bastion").expected_spec() == ExpectedSpec()


def test_csv_agrees_with_ini_on_connection(tmp_path: Path, ini_inv: Inventory) -> None:
    inv = load_text(tmp_path, "dc1.csv", FLEET_CSV)
    csv_conn = [_connection(h)[:5] for h in inv.hosts]
    ini_conn = [_connection(h)[:5] for h in ini_inv.hosts]
    ini_conn = [c if not c[0].startswith("gpu-h800-0") or c[0] == "gpu-h800-05"
                else (c[0], f"10.0.1.{c[0][-1]}", *c[2:]) for c in ini_conn]
    assert csv_conn == ini_conn


# ------------------------------------------------------------------------------------ errors

INI_ERRORS = [
    ("unknown_type.ini", "[gpu]\nh1\n\n[gpu:hostvars]\nx=1\n", 4, ("unknown type",)),
    ("bad_header.ini", "[gpu]\nh1\n[gpu h800]\nh2\n", 3, ("invalid section header",)),
    ("vars_no_eq.ini", "[gpu]\nh1\n[gpu:vars]\ngpufleet_gpu_count=8\nfabric ib\n", 5,
     ("expected key=value", "fabric ib")),
    ("host_var_no_eq.ini", "# c\n[gpu]\nh1 ansible_user=ops stray\n", 3, ("stray",)),
    ("bad_port_var.ini", "[gpu]\nh1\nh2 ansible_port=ssh\n", 3, ("h2", "ansible_port", "'ssh'")),
    ("bad_port_group.ini", "[gpu]\nh1\n[gpu:vars]\nansible_port=70000\n", 4,
     ("ansible_port", "70000")),
    ("bad_port_pattern.ini", "[gpu]\n\nh1:22x\n", 3, ("bad port",)),
    ("bad_range.ini", "[gpu]\ngpu-[01:04]\ngpu-[05:01]\n", 3, ("ends before it begins",)),
    ("bad_width.ini", "[gpu]\ngpu-[01:100]\n", 2, ("same width",)),
    ("bad_step.ini", "[gpu]\ngpu-[1:9:0]\n", 2, ("step",)),
    ("mixed_range.ini", "[gpu]\ngpu-[1:f]\n", 2, ("two integers or two letters",)),
    ("unclosed_range.ini", "[gpu]\ngpu-[1:4\n", 2, ("unbalanced",)),
    ("quote.ini", "[gpu]\nh1 note=\"unterminated\n", 2, ("cannot parse host line",)),
    ("undefined_child.ini", "[gpu]\nh1\n[dc1:children]\ngpu\ngpu_b200\n", 5,
     ("undefined group 'gpu_b200'",)),
    ("undefined_vars.ini", "[gpu]\nh1\n\n[gpu_b200:vars]\nx=1\n", 4,
     ("undefined group 'gpu_b200'",)),
    ("cycle.ini", "[a:children]\nb\n[b:children]\nc\n[c:children]\na\n", 6, ("cycle",)),
    ("bad_child_name.ini", "[a]\nh1\n[b:children]\na extra\n", 4, ("expected a group name",)),
]


@pytest.mark.parametrize(("name", "text", "line", "words"), INI_ERRORS,
                         ids=[e[0] for e in INI_ERRORS])
def test_ini_errors_name_file_and_line(tmp_path: Path, name: str, text: str, line: int,
                                       words: tuple[str, ...]) -> None:
    expect_error(tmp_path, name, text, line, *words)


@pytest.mark.parametrize(("text", "line", "var"), [
    ("[gpu]\nh1\n[gpu:vars]\ngpufleet_pool=p\ngpufleet_gpu_count=eight\n", 5,
     "gpufleet_gpu_count"),
    ("[gpu]\nh1 gpufleet_nvswitch=maybe\n", 2, "gpufleet_nvswitch"),
    ("[gpu]\nh1\n[all:vars]\n\ngpufleet_ib_rate_gbps=fast\n", 5, "gpufleet_ib_rate_gbps"),
])
def test_expected_spec_errors_name_file_line_and_var(tmp_path: Path, text: str, line: int,
                                                     var: str) -> None:
    # Checked when the inventory is read, before anything is enrolled.
    expect_error(tmp_path, "spec.ini", text, line, var, "h1")


YAML_ERRORS = [
    ("syntax.yml", "all:\n  hosts:\n    h1:\n   bad: [1, 2\n", 4, ("invalid YAML",)),
    ("typo.yml", "all:\n  children:\n    gpu:\n      host:\n        h1:\n", 4,
     ("unexpected key 'host'",)),
    ("not_mapping.yml", "all:\n  children:\n    gpu: [h1, h2]\n", 3, ("must be a mapping",)),
    ("bad_port.yml", "all:\n  hosts:\n    h1:\n      ansible_port: '22a'\n", 4, ("ansible_port",)),
    ("bad_range.yml", "all:\n  hosts:\n    ok1:\n    gpu-[9:1]:\n", 4, ("ends before",)),
    ("cycle.yml", "a:\n  children:\n    b:\n      children:\n        a:\n", 5, ("cycle",)),
    ("top_list.yaml", "# inventory\n- h1\n- h2\n", 2, ("mapping of groups",)),
    ("plugin.yml", "plugin: aws_ec2\n", 1, ("plugin",)),
]


@pytest.mark.parametrize(("name", "text", "line", "words"), YAML_ERRORS,
                         ids=[e[0] for e in YAML_ERRORS])
def test_yaml_errors_name_file_and_line(tmp_path: Path, name: str, text: str,
                                        line: int, words: tuple[str, ...]) -> None:
    expect_error(tmp_path, name, text, line, *words)


def test_yaml_syntax_error_uses_mark_line(tmp_path: Path) -> None:
    expect_error(tmp_path, "indent.yaml", "all:\n  hosts:\n    h1:\n  - oops\n", 4,
                 "invalid YAML")


CSV_ERRORS = [
    ("no_name.csv", "# exported 2024-06-01\naddress,port\n10.0.0.1,22\n", 2, ("'name' column",)),
    ("bad_port.csv", "name,address,port\nh1,10.0.0.1,22\nh2,10.0.0.2,twenty-two\n", 3,
     ("port", "twenty-two")),
    ("too_many.csv", "name,address\nh1,10.0.0.1\n\nh2,10.0.0.2,extra\n", 4, ("3 fields",)),
    ("empty_name.csv", "name,address,note\n\"h1\",a,\"two\nlines\"\n,10.0.0.2,\n", 4,
     ("empty 'name'",)),
    ("dup_col.csv", "name,address,ip\nh1,1,2\n", 1, ("duplicate",)),
    ("bad_range.csv", "name\ngpu-[03:01]\n", 2, ("ends before",)),
]


@pytest.mark.parametrize(("name", "text", "line", "words"), CSV_ERRORS,
                         ids=[e[0] for e in CSV_ERRORS])
def test_csv_errors_name_file_and_line(tmp_path: Path, name: str, text: str, line: int,
                                       words: tuple[str, ...]) -> None:
    expect_error(tmp_path, name, text, line, *words)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.ini"
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert info.value.line is None and str(path) in str(info.value)


# ------------------------------------------------------------------------- ansible-inventory

# ansible-core is a dev dependency (pyproject): these tests fail, never skip, without it.


def ansible_inventory(path: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "ansible.cfg"  # an empty config: no user/system settings leak in
    config.write_text("[defaults]\n", encoding="utf-8")
    env = {**os.environ, "LC_ALL": "C.UTF-8", "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_INVENTORY_ENABLED": "yaml,ini", "ANSIBLE_CONFIG": str(config)}
    return subprocess.run([str(ANSIBLE_INVENTORY), "-i", str(path), "--list"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


@pytest.mark.parametrize(("name", "text"), [("dc1.ini", FLEET_INI), ("dc1.yml", FLEET_YAML)])
def test_parser_agrees_with_ansible_inventory(tmp_path: Path, name: str, text: str) -> None:
    path = write(tmp_path, name, text)
    proc = ansible_inventory(path, tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    hostvars: dict[str, dict[str, Any]] = data["_meta"]["hostvars"]

    def members(group: str) -> set[str]:
        entry = data.get(group, {})
        found = set(entry.get("hosts", []))
        for child in entry.get("children", []):
            found |= members(child)
        return found

    ansible_groups = [g for g in data if g not in ("_meta", "all", "ungrouped")]
    ours = load_inventory(path)

    assert set(ours.names) == members("all") == set(hostvars) | members("all")
    assert set(ours.groups) == set(ansible_groups)
    for group in ansible_groups:
        assert set(ours.groups[group]) == members(group), group
    for host in ours.hosts:
        theirs = {k: _as_text(v) for k, v in hostvars.get(host.name, {}).items()}
        assert host.vars == theirs, host.name
        assert set(host.groups) == {g for g in ansible_groups if host.name in members(g)}
        for key in ("ansible_host", "ansible_ssh_host", "ansible_port", "ansible_ssh_port",
                    "ansible_user", "ansible_ssh_user"):
            assert host.vars.get(key) == theirs.get(key), (host.name, key)
        address = theirs.get("ansible_ssh_host") or theirs.get("ansible_host") or host.name
        port = theirs.get("ansible_ssh_port") or theirs.get("ansible_port") or "22"
        user = theirs.get("ansible_ssh_user") or theirs.get("ansible_user")
        assert (host.address, str(host.port), host.user) == (address, port, user), host.name


REJECTED_BY_ANSIBLE = ["unknown_type.ini", "bad_header.ini", "vars_no_eq.ini",
                       "host_var_no_eq.ini", "quote.ini", "undefined_child.ini",
                       "undefined_vars.ini", "cycle.ini", "bad_child_name.ini"]


@pytest.mark.parametrize("name", REJECTED_BY_ANSIBLE)
def test_ansible_rejects_the_same_ini_files(tmp_path: Path, name: str) -> None:
    text = next(e[1] for e in INI_ERRORS if e[0] == name)
    path = write(tmp_path, name, text)
    proc = ansible_inventory(path, tmp_path)
    assert proc.returncode != 0, proc.stdout


# ------------------------------------------------ typos, ranges, bounded inputs (issue 6)

TYPO_ERRORS = [
    # A.4: a misspelt gpufleet_ variable would silently disable the check it configures.
    ("typo_group.ini", "[gpu]\nh1\n[gpu:vars]\ngpufleet_gpu_cout=8\n", 4,
     ("unknown variable gpufleet_gpu_cout", "did you mean gpufleet_gpu_count?")),
    ("typo_host.ini", "[gpu]\nh1 gpufleet_fabrik=ib\n", 2, ("gpufleet_fabrik",)),
    ("typo.yml", "all:\n  vars:\n    gpufleet_pool: p\n    gpufleet_gpu_modle: H100\n", 4,
     ("gpufleet_gpu_modle", "gpufleet_gpu_model")),
    ("typo_csv_var.csv", "name,gpufleet_ib_port\nh1,8\n", 1, ("gpufleet_ib_port",)),
    ("typo_transport.ini", "[gpu]\nh1\nh2 gpufleet_transport=shh\n", 3,
     ("gpufleet_transport='shh'", "ssh")),
    # unknown CSV columns are errors, with a hint
    ("col.csv", "name,address,gpu_count\nh1,10.0.0.1,8\n", 1,
     ("unknown CSV column 'gpu_count'", "did you mean gpufleet_gpu_count?")),
    ("col2.csv", "# asset export\nname,adress\nh1,10.0.0.1\n", 2,
     ("unknown CSV column 'adress'", "did you mean address?")),
    # expected-spec values are range-checked
    ("neg.ini", "[gpu]\nh1 gpufleet_gpu_count=-1\n", 2, ("gpufleet_gpu_count", "out of range")),
    ("huge.ini", "[gpu]\nh1\n[gpu:vars]\ngpufleet_gpu_count=100000\n", 4, ("out of range",)),
    ("nan.ini", "[gpu]\nh1 gpufleet_ib_rate_gbps=nan\n", 2, ("finite",)),
    ("inf.yml", "all:\n  hosts:\n    h1:\n      gpufleet_ib_rate_gbps: .inf\n", 4, ("finite",)),
    ("fabric.ini", "[gpu]\nh1 gpufleet_fabric=infiniband\n", 2,
     ("unknown fabric", "ib, roce, none")),
    ("width.csv", "name,gpufleet_pcie_width\nh1,12\n", 2, ("gpufleet_pcie_width",)),
    ("negports.ini", "[gpu]\nh1 gpufleet_ib_ports=-2\n", 2, ("gpufleet_ib_ports",)),
    ("mem.ini", "[gpu]\nh1 gpufleet_gpu_memory_mib=0\n", 2, ("gpufleet_gpu_memory_mib",)),
    # B.12: bounded inputs
    ("range_bomb.ini", "[gpu]\ngpu-[1:99999999]\n", 2, ("more than 100000 hosts",)),
    ("range_bomb_padded.ini", "[gpu]\nh0\ngpu-[00000001:99999999]\n", 3, ("more than 100000",)),
    ("range_product.yml", "all:\n  hosts:\n    r[1:1000]-n[1:1000]:\n", 3, ("more than 100000",)),
    ("range_bomb.csv", "name\nok\ngpu-[1:99999999]\n", 3, ("more than 100000",)),
    ("quote.csv", "name,address\nh1,10.0.0.1\nh2,\"10.0.0.2\nh3,10.0.0.3\n", 3,
     ("quoted field", "never closed")),
]


@pytest.mark.parametrize(("name", "text", "line", "words"), TYPO_ERRORS,
                         ids=[e[0] for e in TYPO_ERRORS])
def test_typos_ranges_and_bombs_are_errors_with_file_and_line(
        tmp_path: Path, name: str, text: str, line: int, words: tuple[str, ...]) -> None:
    expect_error(tmp_path, name, text, line, *words)


def test_known_gpufleet_variables_are_accepted(tmp_path: Path) -> None:
    inv = load_text(tmp_path, "ok.ini", """\
        [gpu]
        h1 gpufleet_transport=sim gpufleet_lab_dir=/tmp/lab gpufleet_pcie_gen=5
        h2 gpufleet_pcie_width=16 gpufleet_fabric=roce gpufleet_ib_rate_gbps=200.0
        [gpu:vars]
        gpufleet_pool=p
        gpufleet_baseline=b
        gpufleet_gpu_count=0
        """)
    assert inv.host("h1").expected_spec() == ExpectedSpec(gpu_count=0, pcie_gen=5)
    assert inv.host("h2").expected_spec().ib_rate_gbps == 200.0
    assert inv.warnings == []


def test_range_at_the_limit_expands(tmp_path: Path) -> None:
    inv = load_text(tmp_path, "big.ini", "[gpu]\ngpu-[000001:100000]\n")
    assert len(inv.hosts) == 100_000 and inv.names[-1] == "gpu-100000"
    two = load_text(tmp_path, "two.ini", "[gpu]\nr[1:2]-n[a:b]\n")
    assert two.names == ["r1-na", "r1-nb", "r2-na", "r2-nb"]  # Ansible's order


ALIAS_BOMB = """\
all:
  vars:
    a: &a [x, x, x, x, x, x, x, x, x, x]
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
    f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
    g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
    h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
  hosts:
    h1:
"""


def test_yaml_alias_bomb_is_refused(tmp_path: Path) -> None:
    # A valid inventory whose variable h stands for 10**8 scalars once expanded: turning it
    # into a variable value (JSON text) would take gigabytes. The first alias that alone
    # expands past the limit (*f, line 9) is named.
    expect_error(tmp_path, "bomb.yml", ALIAS_BOMB, 9, "alias bomb", "1000000")


def test_yaml_ordinary_aliases_and_merge_keys_still_work(tmp_path: Path) -> None:
    inv = load_text(tmp_path, "anchors.yml", """\
        all:
          vars:
            common: &common {ansible_user: ops, gpufleet_pool: p}
          hosts:
            h1:
              <<: *common
              ansible_port: 2222
            h2: *common
        """)
    assert (inv.host("h1").user, inv.host("h1").port, inv.host("h2").pool) == ("ops", 2222, "p")
    assert inv.warnings == []


def test_yaml_duplicate_keys_warn_like_ansible(tmp_path: Path) -> None:
    path = write(tmp_path, "dup.yml", """\
        all:
          hosts:
            h1:
              ansible_user: first
              ansible_user: second
          vars:
            gpufleet_pool: a
            gpufleet_pool: b
        """)
    inv = load_inventory(path)
    assert inv.host("h1").user == "second" and inv.host("h1").pool == "b"  # last one wins
    assert inv.warnings == [
        f"{path}:5: Found duplicate mapping key 'ansible_user' (column 7). "
        "Using last defined value only.",
        f"{path}:8: Found duplicate mapping key 'gpufleet_pool' (column 5). "
        "Using last defined value only.",
    ]
    proc = ansible_inventory(path, tmp_path)  # Ansible says the same, and keeps the last value
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stderr.split())
    assert "[WARNING]: Found duplicate mapping key" in said
    assert "Using last defined value only." in said
    assert json.loads(proc.stdout)["_meta"]["hostvars"]["h1"]["ansible_user"] == "second"


def test_secret_in_unparsable_line_is_redacted(tmp_path: Path) -> None:
    path = write(tmp_path, "pw.ini", "[gpu]\nh1 ansible_ssh_pass=hunter2 note=\"open\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert info.value.line == 2 and "hunter2" not in str(info.value)
    assert "ansible_ssh_pass=<redacted>" in str(info.value)
    assert "hunter2" not in repr(load_text(tmp_path, "ok.ini", "h1 ansible_ssh_pass=hunter2\n"))
