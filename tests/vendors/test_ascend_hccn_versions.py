"""``hccn_tool`` and version-file parsers on real captures (issue 15)."""

from __future__ import annotations

import pytest
from tests.vendors.ascend_captures import bundle_sections, section, tool_output

from gpufleet.domain.accelerators import ErrorCounter, LinkState
from gpufleet.errors import ParseError
from gpufleet.vendors.huawei.hccn import (
    parse_ip,
    parse_link,
    parse_link_stat,
    parse_net_health,
    parse_optical,
    parse_stat,
)
from gpufleet.vendors.huawei.versions import package_version, parse_version_info

KG_BEFORE = "mind-cluster_kg_parse_npu_info_before.txt"
KG_AFTER = "mind-cluster_kg_parse_npu_info_after.txt"
W0_BEFORE = "mind-cluster_st_testcase_worker-0_npu_info_before.txt"
W0_AFTER = "mind-cluster_st_testcase_worker-0_npu_info_after.txt"


def test_link_down() -> None:
    assert (
        parse_link(tool_output("gpustack_test_npu_smi_910B_hccn_tool-link-g_DOWN.txt"))
        is LinkState.DOWN
    )


def test_link_garbage() -> None:
    with pytest.raises(ParseError) as e:
        parse_link("\nlink status: SIDEWAYS\n", source="hccn_tool -i 3 -link -g@h1")
    assert e.value.line == 2 and "SIDEWAYS" in e.value.message
    with pytest.raises(ParseError, match="expected 'link status"):
        parse_link("Socket failed\n")


def test_net_health_failure_text() -> None:
    assert parse_net_health(section(KG_BEFORE, "-net_health -g")) == "Socket failed"


def test_link_stat_history_and_extra_down_after_the_job() -> None:
    before = parse_link_stat(section(W0_BEFORE, "-i 0 -link_stat -g"))
    after = parse_link_stat(section(W0_AFTER, "-i 0 -link_stat -g"))
    assert before.link_up_count == 2
    assert before.last_state is LinkState.UP
    assert after.last_state is LinkState.DOWN
    assert after.changes[0] == ("Tue Aug  1 14:44:40 2022", LinkState.DOWN)
    assert len(after.changes) == len(before.changes) + 1
    # all eight ports of the after-bundle: NPU 0 and 3 ended DOWN
    last = {
        cmd.split(" -i ")[1].split()[0]: parse_link_stat(out).last_state
        for cmd, out in bundle_sections(W0_AFTER)
        if cmd.endswith("-link_stat -g")
    }
    assert [k for k, v in last.items() if v is LinkState.DOWN] == ["0", "3"]
    assert len(last) == 8


def test_link_stat_truncated_record() -> None:
    text = section(KG_AFTER, "-link_stat -g") + "[devid 0]    Tue Aug  1 14:4\n"
    with pytest.raises(ParseError) as e:
        parse_link_stat(text)
    assert e.value.line == 8


def test_roce_error_counters_after_the_job() -> None:
    assert parse_stat(section(W0_BEFORE, "-i 0 -stat -g")) == [
        ErrorCounter("roce_rx_err_pkt_num", 0),
        ErrorCounter("roce_tx_err_pkt_num", 0),
    ]
    # the manifest says dev 0/1; the capture itself has the errors on ports 5 and 6
    p5 = {c.name: c.count for c in parse_stat(section(W0_AFTER, "-i 5 -stat -g"))}
    p6 = {c.name: c.count for c in parse_stat(section(W0_AFTER, "-i 6 -stat -g"))}
    assert p5 == {"roce_rx_err_pkt_num": 11, "roce_tx_err_pkt_num": 12}
    assert p6 == {"roce_rx_err_pkt_num": 13, "roce_tx_err_pkt_num": 77}
    assert parse_stat(section(W0_AFTER, "-i 1 -stat -g"))[1].count == 0


def test_optical_module() -> None:
    opt = parse_optical(section(KG_BEFORE, "-optical -g"))
    assert opt.present is False  # the tool printed "present : not present"
    assert (opt.vendor, opt.part_number) == ("Hisense", "LMQ8611-PC+")
    assert opt.temperature_c == 47.0
    assert opt.rx_power_mw == (1.0189, 0.0054, 0.9907, 1.0213)
    assert opt.tx_power_mw == (4.4035, 1.3968, 1.4140, 1.4988)
    assert opt.rx_power_low_mw == 0.1445
    assert opt.rx_los_flag == 0xFF


def test_versions_driver_firmware_cann() -> None:
    drv = parse_version_info(section(KG_AFTER, "driver/version.info"), "driver/version.info")
    assert drv["Version"] == "23.0.7"
    assert drv["compatible_version_fw"] == "[7.0.0,7.1.99]"
    assert package_version(section(KG_AFTER, "firmware/version.info"), "fw") == "7.1.0.11.220"
    assert package_version(section(KG_AFTER, "ascend_toolkit_install.info"), "cann") == "7.0.T10"
    assert package_version(section(W0_BEFORE, "ascend_nnae_install.info"), "nnae") == "8.0.RC3"


def test_version_file_garbage() -> None:
    with pytest.raises(ParseError) as e:
        parse_version_info("Version=23.0.7\nthis is not\n", "driver/version.info@h9")
    assert (e.value.source, e.value.line) == ("driver/version.info@h9", 2)
    with pytest.raises(ParseError, match="no Version"):
        package_version("arch=aarch64\n", "cann")


def test_port_addresses_and_a_port_without_one() -> None:
    w0 = {
        int(cmd.split(" -i ")[1].split()[0]): parse_ip(out)
        for cmd, out in bundle_sections(W0_BEFORE)
        if cmd.endswith("-ip -g")
    }
    assert [w0[i].address for i in sorted(w0)] == [f"10.10.0.{10 + i}" for i in range(8)]
    assert {a.netmask for a in w0.values()} == {"255.255.255.0"}
    assert parse_ip(section(KG_BEFORE, "-i 1 -ip -g")).address == "192.161.201.10"
    with pytest.raises(ParseError, match="no ipaddr"):
        parse_ip(section(KG_BEFORE, "-i 2 -ip -g"), source="hccn_tool -i 2 -ip -g@h3")
