"""Tests for ``ibstat`` / ``ibstatus`` parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.collect.ib import parse_ibstat, parse_ibstatus
from gpufleet.errors import ParseError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "ib"


def _read(name: str) -> str:
    return (FIX / name).read_text()


def test_a100_all_active() -> None:
    ports = parse_ibstat(_read("gpud_ibstat.47.0.a100.all.active.0.txt"))
    assert [p.ca for p in ports] == [f"mlx5_{i}" for i in range(9)]
    first = ports[0]
    assert first.port == 1
    assert first.ca_type == "MT4126"
    assert first.link_layer == "Ethernet"
    assert first.rate_gbps == 200.0
    ib = ports[1:]
    assert all(p.link_layer == "InfiniBand" for p in ib)
    assert all(p.state == "Active" and p.physical_state == "LinkUp" for p in ports)
    assert ports[8].firmware == "28.37.1014"
    assert ports[8].port_guid == "0x4c1037318e9cd20a"


def test_h100_ib_plus_bond() -> None:
    ports = parse_ibstat(_read("gpud_ibstat.47.0.h100.all.active.2.txt"))
    assert len(ports) == 9
    ib = [p for p in ports if p.link_layer == "InfiniBand"]
    assert len(ib) == 8
    assert {p.rate_gbps for p in ib} == {400.0}
    assert {p.ca_type for p in ib} == {"MT4129"}
    bond = ports[-1]
    assert (bond.ca, bond.ca_type, bond.link_layer, bond.rate_gbps) == (
        "mlx5_bond_0", "MT41692", "Ethernet", 200.0,
    )
    assert bond.firmware == "32.38.3056"


def test_h100_some_down() -> None:
    ports = parse_ibstat(_read("gpud_ibstat.47.0.h100.some.down.0.txt"))
    assert len(ports) == 12
    down = [p for p in ports if p.state == "Down"]
    assert len(down) == 3
    assert all(p.physical_state == "Disabled" and p.rate_gbps == 40.0 for p in down)
    assert all(p.ca_type == "MT4125" and p.link_layer == "Ethernet" for p in down)
    assert sum(p.link_layer == "InfiniBand" and p.state == "Active" for p in ports) == 8


def test_h100_polling_port() -> None:
    ports = parse_ibstat(_read("gpud_ibstat.47.0.h100.some.down.with.polling.1.txt"))
    assert len(ports) == 12
    phys = [p.physical_state for p in ports]
    assert phys.count("Polling") == 1
    assert phys.count("Disabled") == 1
    assert all(p.link_layer == "Ethernet" for p in ports)


def test_identical_captures_parse_identically() -> None:
    a = parse_ibstat(_read("gpud_ibstat.47.0.h100.all.active.0.txt"))
    b = parse_ibstat(_read("gpud_ibstat.47.0.h100.all.active.1.txt"))
    assert a == b
    assert len(a) == 12


def test_ibpanic_keeps_complete_cas_and_records_problem() -> None:
    # ibstat died (exit 255) on mlx5_8 after printing mlx5_0..mlx5_7 completely.
    problems: list[str] = []
    ports = parse_ibstat(
        _read("gpud_ibstat.39.0.a100.failed.ibpanic.exit-255.0.txt"), "h1:ibstat",
        problems=problems,
    )
    assert [p.ca for p in ports] == [f"mlx5_{i}" for i in range(8)]
    assert all(p.ca_type == "MT4124" and p.rate_gbps == 200.0 for p in ports)
    assert ports[7].port_guid == "0x00155dfffd3411f2"
    assert len(problems) == 1
    assert problems[0].startswith("h1:ibstat:137: ibpanic:")
    assert "mlx5_8" in problems[0]


def test_ibpanic_without_problem_sink_still_parses() -> None:
    # The panic line is a diagnostic, not garbage: the eight complete CAs are returned.
    ports = parse_ibstat(_read("gpud_ibstat.39.0.a100.failed.ibpanic.exit-255.0.txt"))
    assert len(ports) == 8


def _truncated() -> str:
    # mlx5_0 complete (lines 1-17), mlx5_1 cut after "State: Active" (line 26).
    lines = _read("gpud_ibstat.47.0.a100.all.active.0.txt").splitlines()
    assert lines[17] == "CA 'mlx5_1'"
    return "\n".join(lines[:26]) + "\n"


def test_truncated_last_ca_raises_by_default() -> None:
    with pytest.raises(ParseError) as err:
        parse_ibstat(_truncated(), "h1:ibstat")
    assert err.value.source == "h1:ibstat"
    assert err.value.line == 18  # the CA header of the partial block
    assert "mlx5_1" in err.value.message


def test_truncated_last_ca_dropped_with_problem_sink() -> None:
    problems: list[str] = []
    ports = parse_ibstat(_truncated(), "h1:ibstat", problems=problems)
    assert [p.ca for p in ports] == ["mlx5_0"]
    assert problems == [
        "h1:ibstat:18: CA 'mlx5_1' truncated (port 1 lacks Physical state, Rate, Link layer); "
        "dropped"
    ]


def test_incomplete_ca_in_the_middle_always_raises() -> None:
    lines = _read("gpud_ibstat.47.0.a100.all.active.0.txt").splitlines()
    del lines[25]  # "Physical state" of mlx5_1, which is followed by mlx5_2..
    with pytest.raises(ParseError, match="mlx5_1"):
        parse_ibstat("\n".join(lines), problems=[])


def test_garbage_raises_with_line() -> None:
    with pytest.raises(ParseError) as err:
        parse_ibstat("bash: ibstat: command not found\n", "h1:ibstat")
    assert (err.value.source, err.value.line) == ("h1:ibstat", 1)


def test_garbage_inside_block_raises() -> None:
    lines = _read("gpud_ibstat.47.0.a100.all.active.0.txt").splitlines()
    lines.insert(5, "\t\t%%% corrupted %%%")
    with pytest.raises(ParseError) as err:
        parse_ibstat("\n".join(lines))
    assert err.value.line == 6


def test_empty_output_is_no_ports() -> None:
    assert parse_ibstat("") == []


def test_ibstatus_a100() -> None:
    ports = parse_ibstatus(_read("gpud_ibstatus.39.0.a100.all.active.0.txt"))
    assert [p.ca for p in ports] == [f"mlx5_{i}" for i in range(9)]
    assert all(p.state == "Active" and p.physical_state == "LinkUp" for p in ports)
    assert {p.rate_gbps for p in ports[:8]} == {200.0}
    assert all(p.link_layer == "InfiniBand" for p in ports[:8])
    assert (ports[8].rate_gbps, ports[8].link_layer) == (40.0, "Ethernet")


def test_ibstatus_garbage_raises() -> None:
    with pytest.raises(ParseError) as err:
        parse_ibstatus("oops\n", "ibstatus")
    assert err.value.line == 1
