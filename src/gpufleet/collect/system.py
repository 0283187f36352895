"""Parsers for small OS files and tools: os-release, /proc/modules, sysctl, lsblk, meminfo."""

from __future__ import annotations

import re
import shlex

from gpufleet.collect.fit import build, int_of
from gpufleet.domain.facts import BlockDevice, OsRelease
from gpufleet.errors import ParseError

_OS_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
#: One double- or single-quoted string with no quote or backslash inside, or one bare word:
#: shlex (posix) reads it as that text, so it is taken without running shlex (one file per
#: host per collection).
_PLAIN_VALUE = re.compile(r"\"([^\"\\]*)\"|'([^']*)'|([^\s\"'\\]*)")


def parse_os_release(text: str, source: str = "/etc/os-release") -> OsRelease:
    """``/etc/os-release`` (shell-style ``KEY=value``, values optionally quoted)."""
    values: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _OS_KEY.match(line)
        if m is None:
            raise ParseError(source, f"expected KEY=value, got {line[:60]!r}", line=lineno)
        plain = _PLAIN_VALUE.fullmatch(m.group(2))
        if plain is not None:  # what shlex makes of it: the text inside the quotes
            values[m.group(1)] = next(g for g in plain.groups() if g is not None)
            continue
        try:
            words = shlex.split(m.group(2), comments=False, posix=True)
        except ValueError as exc:  # unbalanced quotes: the file was cut or corrupted
            raise ParseError(source, f"bad value for {m.group(1)}: {exc}", line=lineno) from exc
        values[m.group(1)] = " ".join(words)
    if not values:
        raise ParseError(source, "no KEY=value lines", line=1)
    return build(
        OsRelease,
        source,
        id=values.get("ID") or None,
        version_id=values.get("VERSION_ID") or None,
        pretty_name=values.get("PRETTY_NAME") or None,
    )


_MODULE_NAME = re.compile(r"^[A-Za-z0-9_]+$")


def parse_modules(text: str, source: str = "/proc/modules") -> list[str]:
    """Loaded module names from ``/proc/modules`` or ``lsmod`` (its header line is skipped)."""
    names: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split()
        if not fields:
            continue
        if lineno == 1 and fields[:2] == ["Module", "Size"]:
            continue  # lsmod header "Module  Size  Used by"
        # /proc/modules: name size refcount deps state address; lsmod: name size used [by].
        if len(fields) < 3 or not _MODULE_NAME.match(fields[0]) or not fields[1].isdigit():
            raise ParseError(source, f"not a module line: {raw.strip()[:60]!r}", line=lineno)
        names.append(fields[0])
    return names


def parse_sysctl(text: str, source: str = "sysctl") -> dict[str, str]:
    """``key = value`` lines from ``sysctl``.

    Runs of whitespace inside a value are collapsed to one space: vector values such as
    ``net.ipv4.tcp_rmem`` are tab-separated in the output but written with spaces by people.
    """
    values: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key or " " in key:
            raise ParseError(source, f"expected 'key = value', got {line[:60]!r}", line=lineno)
        values[key] = " ".join(value.split())
    return values


_PAIR = re.compile(r'([A-Za-z0-9_:.%-]+)="((?:[^"\\]|\\.)*)"\s*')


def _lsblk_unescape(value: str) -> str:
    """lsblk escapes unsafe bytes as ``\\xHH`` (e.g. ``\\x20`` for a space in MODEL)."""
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), value)


def parse_lsblk_pairs(text: str, source: str = "lsblk") -> list[BlockDevice]:
    """``lsblk -b -d -n -P -o NAME,SIZE,TRAN,ROTA,MODEL`` (``KEY="value"`` pairs per line).

    NAME and a numeric SIZE are required; empty TRAN/MODEL become None.
    """
    devices: list[BlockDevice] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        pairs: dict[str, str] = {}
        pos = 0
        while pos < len(line):
            m = _PAIR.match(line, pos)
            if m is None:
                raise ParseError(
                    source,
                    f'expected KEY="value" at {line[pos : pos + 40]!r}',
                    line=lineno,
                    column=pos + 1,
                )
            pairs[m.group(1)] = _lsblk_unescape(m.group(2))
            pos = m.end()
        name, size = pairs.get("NAME"), pairs.get("SIZE")
        if not name or size is None or not (size.isascii() and size.isdigit()):
            raise ParseError(source, "NAME and a byte SIZE (-b) are required", line=lineno)
        rota = pairs.get("ROTA")
        if rota not in (None, "", "0", "1"):
            raise ParseError(source, f"ROTA must be 0 or 1, got {rota!r}", line=lineno)
        devices.append(
            build(
                BlockDevice,
                source,
                line=lineno,
                name=name,
                size_bytes=int_of(size, source, "SIZE", line=lineno),
                transport=pairs.get("TRAN") or None,
                rotational=(rota == "1") if rota else None,
                model=(pairs.get("MODEL") or "").strip() or None,
            )
        )
    return devices


_MEMTOTAL = re.compile(r"^MemTotal:\s+(\d+)\s*kB\s*$")


def parse_meminfo_total_kib(text: str, source: str = "/proc/meminfo") -> int:
    """``MemTotal`` from ``/proc/meminfo``, in KiB."""
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.startswith("MemTotal:"):
            m = _MEMTOTAL.match(line)
            if m is None:
                raise ParseError(source, f"unreadable MemTotal line {line!r}", line=lineno)
            return int_of(m.group(1), source, "MemTotal", line=lineno)
    raise ParseError(source, "no MemTotal line")


_VERSION = re.compile(r"\b(\d+\.\d+(?:\.\d+)*)\b")


def parse_tool_version(text: str, source: str) -> str:
    """The first dotted version number a ``--version`` output prints.

    Formats differ by tool and release (``NVIDIA Container Toolkit CLI version 1.12.0``,
    ``cli-version: 1.13.5``, ``Fabric Manager version is : 535.129.03``); the first
    ``N.N[.N...]`` is the tool's own version in all of them.
    """
    for line in text.splitlines():
        m = _VERSION.search(line)
        if m:
            return m.group(1)
    raise ParseError(source, "no version number in the output", line=1)
