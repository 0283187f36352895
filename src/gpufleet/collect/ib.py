"""Parsers for ``ibstat`` (and ``ibstatus``): one :class:`IbPort` per RDMA port.

``ibstat`` walks the CAs one by one and can die half way (``ibpanic: ... stat of IB device
'mlx5_8' failed``, exit 255), leaving the CAs printed so far complete. Policy:

* ``ibpanic:`` / ``ibwarn:`` lines are the tool's own diagnostics (normally stderr, but often
  merged into captures); they never raise and are appended to ``problems`` when given.
* A CA block that is cut short (fewer ``Port N:`` blocks than "Number of ports", or a port
  missing State / Physical state / Rate / Link layer) raises :class:`ParseError` - unless it
  is the *last* block and the caller passed a ``problems`` list, in which case the complete
  CAs are returned, the partial one is dropped and a problem naming it is recorded. So a
  half-filled port is never returned, and partial output is never accepted silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.collect.fit import build, int_of
from gpufleet.domain.facts import IbPort
from gpufleet.errors import ParseError

_CA = re.compile(r"^CA '([^']+)'\s*$")
_PORT = re.compile(r"^Port (\d+):\s*$")
_KV = re.compile(r"^([A-Za-z][A-Za-z_ ]*?):\s*(.*?)\s*$")
_DIAG = re.compile(r"^(ibpanic|ibwarn|iberror):")
_PORT_REQUIRED = ("State", "Physical state", "Rate", "Link layer")


@dataclass
class _Ca:
    name: str
    line: int
    attrs: dict[str, str] = field(default_factory=dict)
    ports: list[tuple[int, int, dict[str, str]]] = field(default_factory=list)  # (port, line, kv)

    def missing(self) -> str | None:
        """Why this block is incomplete, or None when it is complete."""
        expected = self.attrs.get("Number of ports")
        if not self.ports:
            return "no 'Port N:' block"
        if (
            expected is not None
            and expected.isascii()
            and expected.isdigit()
            and (len(expected) > 6 or len(self.ports) < int(expected))
        ):
            return f"{len(self.ports)} of {expected[:20]} ports printed"
        for port, _, kv in self.ports:
            lacking = [k for k in _PORT_REQUIRED if k not in kv]
            if lacking:
                return f"port {port} lacks {', '.join(lacking)}"
        return None


def _rate(value: str, source: str, line: int) -> float:
    m = re.match(r"^(\d+(?:\.\d+)?)", value)
    if m is None:
        raise ParseError(source, f"unreadable rate {value!r}", line=line)
    return float(m.group(1))


#: A stripped line -> what it is: ("diag",), ("ca", name), ("port", n), ("kv", key, value)
#: or ("bad",); most lines of ``ibstat`` repeat from host to host, so the four regexes run
#: once per distinct line. Emptied past 4096 entries.
_KINDS: dict[str, tuple[str, ...]] = {}


def _kind(line: str) -> tuple[str, ...]:
    if _DIAG.match(line):
        return ("diag",)
    ca_head = _CA.match(line)
    if ca_head:
        return ("ca", ca_head.group(1))
    port = _PORT.match(line)
    if port:
        return ("port", port.group(1))
    pair = _KV.match(line)
    if pair is None:
        return ("bad",)
    return ("kv", pair.group(1), pair.group(2))


def parse_ibstat(
    text: str, source: str = "ibstat", *, problems: list[str] | None = None
) -> list[IbPort]:
    """Parse ``ibstat`` output into one :class:`IbPort` per port, in output order.

    See the module docstring for how truncated output and ``ibpanic`` lines are handled.
    """
    cas: list[_Ca] = []
    current: _Ca | None = None
    kinds = _KINDS
    if len(kinds) > 4096:
        kinds.clear()
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        kind = kinds.get(line)
        if kind is None:
            kind = kinds[line] = _kind(line)
        what = kind[0]
        if what == "diag":
            if problems is not None:
                problems.append(f"{source}:{lineno}: {line}")
            continue
        if what == "ca":
            current = _Ca(kind[1], lineno)
            cas.append(current)
            continue
        if current is None:
            raise ParseError(source, f"expected \"CA '<name>'\", got {line[:60]!r}", line=lineno)
        if what == "port":
            current.ports.append((int_of(kind[1], source, "port number", line=lineno), lineno, {}))
            continue
        if what == "bad":
            raise ParseError(source, f"unexpected line {line[:60]!r}", line=lineno)
        key, value = kind[1], kind[2]
        if current.ports:
            current.ports[-1][2][key] = value
        else:
            current.attrs[key] = value

    if not cas and text.strip():
        # Only diagnostics (e.g. "ibwarn: no devices"): nothing to report, not garbage.
        return []

    ports: list[IbPort] = []
    for idx, ca in enumerate(cas):
        why = ca.missing()
        if why is not None:
            last = idx == len(cas) - 1
            if last and problems is not None:
                problems.append(f"{source}:{ca.line}: CA '{ca.name}' truncated ({why}); dropped")
                continue
            raise ParseError(source, f"CA '{ca.name}' is incomplete: {why}", line=ca.line)
        for port_no, port_line, kv in ca.ports:
            ports.append(
                build(
                    IbPort,
                    source,
                    line=port_line,
                    where=f"CA {ca.name[:64]!a} port {port_no}: ",
                    ca=ca.name,
                    port=port_no,
                    ca_type=ca.attrs.get("CA type") or None,
                    firmware=ca.attrs.get("Firmware version") or None,
                    state=kv["State"],
                    physical_state=kv["Physical state"],
                    rate_gbps=_rate(kv["Rate"], source, port_line),
                    link_layer=kv["Link layer"],
                    port_guid=kv.get("Port GUID"),
                )
            )
    return ports


_STATUS_HEAD = re.compile(r"^Infiniband device '([^']+)' port (\d+) status:\s*$")
_STATUS_REQUIRED = ("state", "phys state", "rate", "link_layer")


def parse_ibstatus(text: str, source: str = "ibstatus") -> list[IbPort]:
    """Parse ``ibstatus`` (no CA type / firmware / GUID; states lose their ``4:`` prefix).

    ``state: 4: ACTIVE`` becomes ``"Active"`` and ``phys state: 5: LinkUp`` ``"LinkUp"`` so
    the values compare equal to ``ibstat``'s.
    """
    blocks: list[tuple[str, int, int, dict[str, str]]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        head = _STATUS_HEAD.match(line)
        if head:
            port = int_of(head.group(2), source, "port number", line=lineno)
            blocks.append((head.group(1), port, lineno, {}))
            continue
        pair = _KV.match(line) if blocks else None
        if pair is None:
            raise ParseError(source, f"unexpected line {line[:60]!r}", line=lineno)
        blocks[-1][3][pair.group(1)] = pair.group(2)
    if not blocks:
        raise ParseError(source, "no 'Infiniband device' blocks found", line=1)

    ports: list[IbPort] = []
    for ca, port, lineno, kv in blocks:
        lacking = [k for k in _STATUS_REQUIRED if k not in kv]
        if lacking:
            raise ParseError(source, f"{ca} port {port} lacks {', '.join(lacking)}", line=lineno)
        ports.append(
            build(
                IbPort,
                source,
                line=lineno,
                where=f"{ca[:64]!a} port {port}: ",
                ca=ca,
                port=port,
                state=_drop_code(kv["state"]).capitalize(),
                physical_state=_drop_code(kv["phys state"]),
                rate_gbps=_rate(kv["rate"], source, lineno),
                link_layer=kv["link_layer"],
            )
        )
    return ports


def _drop_code(value: str) -> str:
    """``"4: ACTIVE"`` -> ``"ACTIVE"``."""
    return value.split(":", 1)[1].strip() if ":" in value else value.strip()
