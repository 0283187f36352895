"""Parsers for ``hccn_tool -i N ... -g`` (the NPU RoCE ports HCCL uses; pure).

Real captures exist for ``-link -g`` (DOWN), ``-link_stat -g``, ``-net_health -g``
(a failure text), ``-optical -g``, ``-stat -g`` and ``-ip -g``; see tests/fixtures/captured/ascend.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.domain.accelerators import ErrorCounter, LinkState
from gpufleet.errors import ParseError
from gpufleet.vendors.huawei.npu_smi import parse_key_values

#: ``-link_stat -g`` prefixes each line with the device: ``[devid 0]`` (mind-cluster capture)
#: or ``[device 0]`` (the form in Huawei's hccn_tool documentation).
_DEVID = re.compile(r"^\[(?:devid|device) \d+\]")
_RECORD = re.compile(
    r"^(?P<when>\w{3} \w{3}\s+\d+ \d\d:\d\d:\d\d \d{4})\s+LINK (?P<state>UP|DOWN)$"
)


def _single(text: str, source: str, prefix: str) -> tuple[str, int]:
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition(":")
        if not sep or key.strip().lower() != prefix:
            raise ParseError(source, f"expected '{prefix}: ...', found {line[:80]!r}", line=lineno)
        return value.strip(), lineno
    raise ParseError(source, "empty output")


def parse_link(text: str, source: str = "hccn_tool -link -g") -> LinkState:
    """``link status: UP|DOWN`` -> :class:`LinkState`."""
    value, lineno = _single(text, source, "link status")
    try:
        return LinkState(value.lower())
    except ValueError:
        raise ParseError(source, f"unknown link status {value!r}", line=lineno) from None


def parse_net_health(text: str, source: str = "hccn_tool -net_health -g") -> str:
    """``net health status: <text>`` -> the text (``Success`` when healthy)."""
    return _single(text, source, "net health status")[0]


@dataclass(frozen=True, slots=True)
class LinkHistory:
    link_up_count: int
    changes: tuple[tuple[str, LinkState], ...]  # newest first, as printed

    @property
    def last_state(self) -> LinkState:
        return self.changes[0][1] if self.changes else LinkState.UNKNOWN


def parse_link_stat(text: str, source: str = "hccn_tool -link_stat -g") -> LinkHistory:
    """``-link_stat -g``: link-up count and the link change records (``[devid N]`` or
    ``[device N]`` prefixes)."""
    up_count: int | None = None
    changes: list[tuple[str, LinkState]] = []
    in_records = False
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _DEVID.sub("", raw.strip()).strip()
        if not line:
            continue
        if in_records:
            m = _RECORD.match(line)
            if m is None:
                raise ParseError(source, f"not a link change record: {line[:80]!r}", line=lineno)
            changes.append((m.group("when"), LinkState(m.group("state").lower())))
            continue
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep:
            raise ParseError(source, f"not a 'key : value' line: {line[:80]!r}", line=lineno)
        if key == "link up count":
            try:
                up_count = int(value)
            except ValueError:
                raise ParseError(source, f"link up count {value.strip()!r}", line=lineno) from None
        elif key == "link change records":
            in_records = True
        elif key != "current time":
            raise ParseError(source, f"unexpected key {key!r}", line=lineno)
    if up_count is None:
        raise ParseError(source, "no 'link up count' line")
    return LinkHistory(link_up_count=up_count, changes=tuple(changes))


def parse_stat(text: str, source: str = "hccn_tool -stat -g") -> list[ErrorCounter]:
    """``-stat -g``: ``packet statistics:`` then ``name:count`` lines."""
    lines = [(n, raw.strip()) for n, raw in enumerate(text.splitlines(), start=1) if raw.strip()]
    if not lines or lines[0][1] != "packet statistics:":
        raise ParseError(
            source, "expected 'packet statistics:'", line=lines[0][0] if lines else None
        )
    out: list[ErrorCounter] = []
    for lineno, line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not value.strip().isdigit():
            raise ParseError(source, f"not a 'name:count' line: {line[:80]!r}", line=lineno)
        out.append(ErrorCounter(name=name.strip(), count=int(value)))
    return out


@dataclass(frozen=True, slots=True)
class Optical:
    """``-optical -g``: the port's transceiver. The flags are the tool's lane bit masks
    (``Rx Los Flag : 0xff``: loss of signal on lanes 0-7); None where the tool prints none."""

    present: bool
    vendor: str | None
    part_number: str | None
    temperature_c: float | None
    rx_power_mw: tuple[float, ...]
    tx_power_mw: tuple[float, ...]
    rx_power_low_mw: float | None
    rx_los_flag: int | None
    tx_los_flag: int | None = None
    rx_lol_flag: int | None = None
    tx_lol_flag: int | None = None

    def counters(self) -> tuple[ErrorCounter, ...]:
        """The module's state as error counters: ``optical_module_absent`` (1 when the tool
        says ``not present``) and, per flag the tool printed, the number of lanes flagged
        (``optical_rx_los_lanes`` ...)."""
        out = [ErrorCounter("optical_module_absent", 0 if self.present else 1)]
        for name, flag in (
            ("optical_tx_los_lanes", self.tx_los_flag),
            ("optical_rx_los_lanes", self.rx_los_flag),
            ("optical_tx_lol_lanes", self.tx_lol_flag),
            ("optical_rx_lol_lanes", self.rx_lol_flag),
        ):
            if flag is not None:
                out.append(ErrorCounter(name, flag.bit_count()))
        return tuple(out)


def _float_unit(value: str | None) -> float | None:
    if value is None:
        return None
    head = value.split()[0] if value.split() else ""
    try:
        return float(head)
    except ValueError:
        return None


_PRESENT = {"present": True, "not present": False}
_FLAGS = ("Tx Los Flag", "Rx Los Flag", "Tx LoL Flag", "Rx LoL Flag")


def parse_optical(text: str, source: str = "hccn_tool -optical -g") -> Optical:
    """``-optical -g``: the transceiver (presence, vendor, per-lane Tx/Rx power, LOS/LoL
    flags). A presence other than ``present`` / ``not present`` or a flag that is not hex
    (``0x0``) is a ParseError; a flag the tool does not print, or prints as ``NA`` / ``not
    supported``, is unknown (None)."""
    lines = text.splitlines()
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if first is None or lines[first].strip() != "optical info:":
        raise ParseError(
            source, "expected 'optical info:'", line=None if first is None else first + 1
        )
    body = "\n".join(lines[first + 1 :])
    kv: dict[str, str] = {}
    for block in parse_key_values(body, source):
        kv.update(block)
    if "present" not in kv:
        raise ParseError(source, "no 'present' line")
    present = _PRESENT.get(kv["present"].strip().lower())
    if present is None:
        raise ParseError(source, f"unknown module presence {kv['present']!r}")
    flags: dict[str, int | None] = {}
    for key in _FLAGS:
        value = kv.get(key, "NA").strip()
        if value.lower() in ("na", "not supported", ""):
            flags[key] = None
        elif re.fullmatch(r"0x[0-9a-fA-F]{1,8}", value):
            flags[key] = int(value, 16)
        else:
            raise ParseError(source, f"{key} is not a hex lane mask: {value!r}")
    rx = tuple(
        v for k in sorted(kv) if k.startswith("Rx Power") and (v := _float_unit(kv[k])) is not None
    )
    tx = tuple(
        v for k in sorted(kv) if k.startswith("Tx Power") and (v := _float_unit(kv[k])) is not None
    )
    return Optical(
        present=present,
        vendor=kv.get("vendor name"),
        part_number=kv.get("vendor part number"),
        temperature_c=_float_unit(kv.get("temperature")),
        rx_power_mw=rx,
        tx_power_mw=tx,
        rx_power_low_mw=_float_unit(kv.get("RxPower Low Thres")),
        rx_los_flag=flags["Rx Los Flag"],
        tx_los_flag=flags["Tx Los Flag"],
        rx_lol_flag=flags["Rx LoL Flag"],
        tx_lol_flag=flags["Tx LoL Flag"],
    )


@dataclass(frozen=True, slots=True)
class PortAddress:
    address: str
    netmask: str


def parse_ip(text: str, source: str = "hccn_tool -ip -g") -> PortAddress:
    """``-ip -g``: ``ipaddr:A`` and ``netmask:M`` lines (an empty answer is a ParseError:
    the port has no address configured, or the tool failed)."""
    values: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition(":")
        if not sep or key not in ("ipaddr", "netmask"):
            raise ParseError(
                source, f"expected 'ipaddr:' or 'netmask:', found {line[:80]!r}", line=lineno
            )
        values[key] = value.strip()
    if "ipaddr" not in values or "netmask" not in values:
        raise ParseError(source, "no ipaddr/netmask (port without an address?)")
    return PortAddress(address=values["ipaddr"], netmask=values["netmask"])
