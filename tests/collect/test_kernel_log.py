"""Tests for ``NVRM: Xid`` extraction from kernel logs."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpufleet.collect.kernel_log import parse_xids
from gpufleet.domain.facts import UnreadableXid
from gpufleet.errors import ParseError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "kernel-log"


def _read(name: str) -> str:
    return (FIX / name).read_text()


def test_decode_iso_format_counts() -> None:
    # dmesg --decode --time-format=iso: "kern  :warn  : 2025-01-21T02:21:33,498559+00:00 ..."
    events = parse_xids(_read("gpud_dmesg.decode.iso.log.0.log"))
    assert Counter(e.code for e in events) == {13: 629, 43: 7}
    assert {e.pci_address for e in events} == {"PCI:0000:38:00"}
    first = events[0]
    assert first.line == 1
    assert first.time == datetime(2025, 1, 21, 2, 21, 33, 498559, tzinfo=UTC)
    assert first.time_raw == "2025-01-21T02:21:33,498559+00:00"
    assert first.pid is None  # pid='<unknown>'
    assert first.message == (
        "Graphics SM Warp Exception on (GPC 8, TPC 5, SM 0): Out Of Range Address"
    )
    xid43 = [e for e in events if e.code == 43]
    assert [e.line for e in xid43[:2]] == [16, 26]
    assert xid43[0].pid == 2815167
    assert xid43[0].message == "Ch 00000008"


def test_decode_iso_without_xids() -> None:
    text = _read("gpud_dmesg.decode.iso.log.1.log")
    assert len(text.splitlines()) == 2382  # a big, noisy log ...
    assert parse_xids(text) == []  # ... with no Xid in it


def test_time_format_iso() -> None:
    events = parse_xids(_read("gpud_dmesg-time-format-iso.log"))
    assert [e.code for e in events] == [48, 63] + [94] * 9
    assert [e.line for e in events] == list(range(11, 22))
    dbe = events[0]
    assert dbe.pci_address == "PCI:0000:19:00"
    assert dbe.time == datetime(2024, 11, 15, 12, 2, 3, 470068, tzinfo=UTC)
    assert dbe.message.startswith("An uncorrectable double bit error (DBE)")
    assert events[3].pid == 1248209
    assert events[3].message == "Ch 00000008"


def test_ctime_format_xid_119() -> None:
    events = parse_xids(_read("gpud_dmesg-with-xid-119.log"), "h1:kernel-xid")
    assert [e.code for e in events] == [119] * 5
    assert [e.line for e in events] == [3, 38, 40, 42, 43]
    assert [e.pid for e in events] == [2024380, 2024380, 2024380, 1263500, 1240590]
    assert events[0].time == datetime(2025, 2, 23, 16, 24, 18)  # host-local, naive
    assert events[0].time_raw == "Sun Feb 23 16:24:18 2025"
    assert events[0].pci_address == "PCI:0000:9b:00"
    assert events[0].message.startswith(
        "Timeout after 6s of waiting for RPC response from GPU4 GSP!"
    )


def test_monotonic_and_journal_formats() -> None:
    text = (
        "[  123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, "
        "GPU has fallen off the bus.\n"
        "[  124.000000] nvidia-nvswitch: probe\n"
        "2025-01-21T02:21:33+0000 node7 kernel: NVRM: Xid (PCI:0000:3b:00): 31, pid=99, "
        "name=train, Ch 00000010, intr 10000000. MMU Fault\n"
        "NVRM: Xid (0000:03:00): 13, Graphics Exception\n"
    )
    events = parse_xids(text)
    assert [(e.code, e.line) for e in events] == [(79, 1), (31, 3), (13, 4)]
    assert (events[0].time, events[0].time_raw) == (None, "123.456789")
    assert events[0].message == "GPU has fallen off the bus."
    assert events[1].time == datetime(2025, 1, 21, 2, 21, 33, tzinfo=UTC)
    assert events[1].message == "Ch 00000010, intr 10000000. MMU Fault"
    # Old drivers: no "PCI:" prefix, no pid/name.
    assert (events[2].pci_address, events[2].pid, events[2].time) == ("0000:03:00", None, None)
    assert events[2].message == "Graphics Exception"


def test_unrelated_noise_is_ignored() -> None:
    assert parse_xids("random line\n\n[ 1.0] usb 1-1: new device\n") == []
    assert parse_xids("") == []


def test_unreadable_xid_line_raises_with_line() -> None:
    text = "[ 1.0] boot\n[ 2.0] NVRM: Xid (PCI:0000:19:\n"
    with pytest.raises(ParseError) as err:
        parse_xids(text, "h1:kernel-xid")
    assert (err.value.source, err.value.line) == ("h1:kernel-xid", 2)


def test_per_line_keeps_readable_events_and_lists_unreadable_ones() -> None:
    """EDITED capture (issue 6 A.1): the real log with its Xid 63 line cut mid-line."""
    lines = _read("gpud_dmesg-time-format-iso.log").splitlines()
    lines[11] = lines[11][: lines[11].index("(PCI:0000:19:") + 5]
    bad: list[UnreadableXid] = []
    events = parse_xids("\n".join(lines), "h1:kernel-xid", unreadable=bad)
    assert [e.code for e in events] == [48] + [94] * 9
    assert [(u.line, u.time is not None) for u in bad] == [(12, True)]
    assert "unreadable Xid line" in bad[0].text
    with pytest.raises(ParseError):  # strict without the list, as before
        parse_xids("\n".join(lines), "h1:kernel-xid")


def test_a_code_that_does_not_fit_is_unreadable_not_a_crash() -> None:
    bad: list[UnreadableXid] = []
    line = "[ 1.0] NVRM: Xid (PCI:0000:19:00): " + "9" * 5000 + ", pid=1, name=x, boom\n"
    assert parse_xids(line, unreadable=bad) == []
    assert len(bad) == 1
