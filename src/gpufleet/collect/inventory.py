"""Read the host inventories ops already keep: Ansible INI, Ansible YAML, or a plain CSV.

All three formats produce the same :class:`Inventory`. Semantics follow ``ansible-core``
(checked against ``ansible-inventory --list`` in the tests): host ranges, ``host:port``
patterns, ``[group:vars]`` / ``[group:children]``, and variable precedence
``all < parent group < child group < host`` (equal depth: ``ansible_group_priority``, then
group name). Every error is an :class:`~gpufleet.errors.InventoryError` naming file and line.

Variable values are kept as strings (``8``, ``True``, ``H800``); :meth:`InventoryHost.expected_spec`
converts the ``gpufleet_*`` ones to the typed :class:`~gpufleet.domain.spec.ExpectedSpec`.
"""

from __future__ import annotations

import ast
import csv
import difflib
import io
import itertools
import json
import math
import re
import shlex
import string
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpufleet.collect.transport import get_transport_factory, known_transports
from gpufleet.domain.spec import ExpectedSpec
from gpufleet.errors import GpufleetError, InventoryError, NotFound
from gpufleet.secrets import redact_text

__all__ = [
    "MAX_HOSTS",
    "MAX_YAML_NODES",
    "Inventory",
    "InventoryHost",
    "known_gpufleet_vars",
    "load_inventory",
]

_IMPLICIT_GROUPS = ("all", "ungrouped")
_SPEC_PREFIX = "gpufleet_"
# Connection vars in the order ansible-core's ssh plugin resolves them: when both are set, the
# ``ansible_ssh_*`` spelling wins (it is later in the plugin's ``vars`` list).
_HOST_KEYS = ("ansible_ssh_host", "ansible_host")
_PORT_KEYS = ("ansible_ssh_port", "ansible_port")
_USER_KEYS = ("ansible_ssh_user", "ansible_user")
_KEY_FILE_KEYS = ("ansible_ssh_private_key_file", "ansible_private_key_file")
_TRUE = frozenset({"true", "yes", "on", "1", "y"})
_FALSE = frozenset({"false", "no", "off", "0", "n"})

#: Most hosts one inventory (or one host range) may name; a bigger range is refused before
#: it is expanded.
MAX_HOSTS = 100_000
#: Most YAML nodes an inventory may expand to with its aliases resolved (alias bombs).
MAX_YAML_NODES = 1_000_000
#: ``gpufleet_*`` variables that are not expected-spec fields.
_OTHER_GPUFLEET_VARS = ("gpufleet_pool", "gpufleet_baseline", "gpufleet_transport")
_FABRICS = ("ib", "roce", "none")
_MAX_TEXT = 128
# Accepted ranges of the numeric expected-spec fields: (lowest, highest), both included.
_SPEC_RANGES: dict[str, tuple[float, float]] = {
    "gpu_count": (0, 64),
    "gpu_memory_mib": (1, 4 * 1024 * 1024),
    "nvlink_per_gpu": (0, 64),
    "ib_ports": (0, 64),
    "ib_rate_gbps": (1, 3200),
    "pcie_gen": (1, 7),
    "pcie_width": (1, 32),
}
_PCIE_WIDTHS = (1, 2, 4, 8, 16, 32)


def known_gpufleet_vars() -> frozenset[str]:
    """Every ``gpufleet_*`` variable gpufleet reads: the expected-spec fields, pool, baseline,
    transport, and the variables each registered transport declares (``gpufleet_lab_dir``)."""
    names = {_SPEC_PREFIX + f for f in ExpectedSpec.model_fields} | set(_OTHER_GPUFLEET_VARS)
    for transport in known_transports():
        names |= set(get_transport_factory(transport).host_vars)
    return frozenset(names)


class InventoryHost(BaseModel):
    """One host of the inventory with its connection data and merged variables.

    ``groups`` holds every group the host is in, parents included (``all``/``ungrouped``
    left out), in inventory group order. ``vars`` are the merged variables as strings;
    ``var_lines`` says on which line of ``source`` each winning value was set.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    address: str
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    groups: list[str] = Field(default_factory=list)
    vars: dict[str, str] = Field(default_factory=dict, repr=False)  # may hold secrets
    line: int | None = None
    source: str = Field(default="", repr=False)
    var_lines: dict[str, int] = Field(default_factory=dict, repr=False)

    @property
    def pool(self) -> str | None:
        """The pool named by ``gpufleet_pool``, or None."""
        return self.vars.get("gpufleet_pool") or None

    @property
    def baseline(self) -> str | None:
        """The baseline named by ``gpufleet_baseline``, or None."""
        return self.vars.get("gpufleet_baseline") or None

    def expected_spec(self) -> ExpectedSpec:
        """Build the :class:`ExpectedSpec` from the ``gpufleet_<field>`` variables.

        Empty values count as unset. A value that does not convert or is out of range (a
        negative count, NaN, an unknown fabric) raises :class:`InventoryError` at the line
        where it was set; :func:`load_inventory` already checked every host this way.
        """
        values: dict[str, Any] = {}
        for fname, finfo in ExpectedSpec.model_fields.items():
            key = _SPEC_PREFIX + fname
            raw = self.vars.get(key)
            if raw is None or raw.strip() == "":
                continue
            kind = _scalar_type(finfo.annotation)
            try:
                values[fname] = _check_spec_value(fname, _convert(raw.strip(), kind))
            except ValueError as exc:
                raise InventoryError(
                    self.source or "<inventory>",
                    self.var_lines.get(key),
                    f"host {self.name}: variable {key}={raw!r}: {exc}",
                ) from None
        try:
            return ExpectedSpec(**values)
        except ValidationError as exc:  # pragma: no cover - conversions above match the fields
            raise InventoryError(
                self.source or "<inventory>", self.line, f"host {self.name}: {exc}"
            ) from None


class Inventory(BaseModel):
    """Hosts in file order of first appearance; ``groups`` maps a group to all its hosts.

    Group membership is transitive (a host of ``gpu_h800`` is also listed under its parent
    ``gpu``); the implicit ``all`` and ``ungrouped`` groups are not listed.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    hosts: list[InventoryHost] = Field(default_factory=list)
    groups: dict[str, list[str]] = Field(default_factory=dict)
    source: str = ""
    #: Problems that do not stop the load (a duplicate YAML key), each naming file:line;
    #: the CLI prints them on stderr as ``[WARNING]: ...``.
    warnings: list[str] = Field(default_factory=list)

    def host(self, name: str) -> InventoryHost:
        """Return the host called ``name``; raise :class:`NotFound` when it is absent."""
        for h in self.hosts:
            if h.name == name:
                return h
        raise NotFound(f"host {name!r} is not in inventory {self.source}")

    @property
    def names(self) -> list[str]:
        """Host names in inventory order."""
        return [h.name for h in self.hosts]


def load_inventory(path: Path) -> Inventory:
    """Parse the inventory at ``path``: YAML (.yml/.yaml/.json), CSV (.csv), otherwise INI.

    A file without one of those extensions whose first meaningful line is ``---`` or a bare
    ``key:`` mapping is read as YAML. Raises :class:`InventoryError` naming file and line.
    """
    src = str(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InventoryError(src, None, f"not UTF-8 text: {exc}") from None
    except OSError as exc:
        raise InventoryError(src, None, f"cannot read inventory: {exc.strerror or exc}") from None
    ext = path.suffix.lower()
    if ext in (".yml", ".yaml", ".json"):
        builder = _parse_yaml(text, src)
    elif ext == ".csv":
        builder = _parse_csv(text, src)
    elif _looks_like_yaml(text):
        builder = _parse_yaml(text, src)
    else:
        builder = _parse_ini(text, src)
    return builder.build()


# --------------------------------------------------------------------------------------------
# shared accumulation and Ansible semantics


@dataclass
class _Group:
    name: str
    vars: dict[str, str] = field(default_factory=dict)
    var_lines: dict[str, int] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    hosts: dict[str, None] = field(default_factory=dict)  # ordered set


@dataclass
class _Host:
    name: str
    line: int
    vars: dict[str, str] = field(default_factory=dict)
    var_lines: dict[str, int] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)


class _Builder:
    """Collects hosts/groups/vars in file order, then resolves them like ``ansible-core``."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.groups: dict[str, _Group] = {g: _Group(g) for g in _IMPLICIT_GROUPS}
        self.hosts: dict[str, _Host] = {}
        self.warnings: list[str] = []
        self._known: frozenset[str] | None = None

    def warn(self, line: int | None, message: str) -> None:
        text = f"{self.source}:{line}: {message}" if line else f"{self.source}: {message}"
        if text not in self.warnings:
            self.warnings.append(text)

    def check_var(self, key: str, value: str, line: int) -> None:
        """Refuse a ``gpufleet_*`` variable gpufleet does not know (a typo would silently
        disable the check it meant to configure) and an unknown ``gpufleet_transport``."""
        if not key.startswith(_SPEC_PREFIX):
            return
        if self._known is None:
            try:
                self._known = known_gpufleet_vars()
            except GpufleetError as exc:
                raise self.error(
                    line, f"cannot list the known gpufleet_ variables: {exc}"
                ) from None
        if key not in self._known:
            close = difflib.get_close_matches(key, sorted(self._known), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise self.error(
                line,
                f"unknown variable {key}{hint}; gpufleet reads: {', '.join(sorted(self._known))}",
            )
        if key == "gpufleet_transport" and value != "":
            known = known_transports()
            if value not in known:
                raise self.error(
                    line, f"gpufleet_transport={value!r} is not a transport: use {', '.join(known)}"
                )

    def error(self, line: int | None, message: str) -> InventoryError:
        return InventoryError(self.source, line, message)

    def add_group(self, name: str) -> _Group:
        if name not in self.groups:
            self.groups[name] = _Group(name)
        return self.groups[name]

    def add_host(self, name: str, group: str, line: int) -> _Host:
        host = self.hosts.get(name)
        if host is None:
            if len(self.hosts) >= MAX_HOSTS:
                raise self.error(line, f"more than {MAX_HOSTS} hosts in one inventory")
            host = self.hosts[name] = _Host(name, line)
        grp = self.add_group(group)
        grp.hosts.setdefault(name)
        if group not in host.groups:
            host.groups.append(group)
        return host

    def set_host_var(self, host: _Host, key: str, value: str, line: int) -> None:
        self.check_var(key, value, line)
        host.vars[key] = value
        host.var_lines[key] = line

    def set_group_var(self, group: str, key: str, value: str, line: int) -> None:
        self.check_var(key, value, line)
        grp = self.add_group(group)
        grp.vars[key] = value
        grp.var_lines[key] = line

    def add_child(self, parent: str, child: str, line: int) -> None:
        if child == "all":
            raise self.error(line, f"group 'all' cannot be a child of {parent!r}")
        pgrp, cgrp = self.add_group(parent), self.add_group(child)
        if child in pgrp.children:
            return
        if parent == child or parent in self._descendants(child):
            raise self.error(line, f"adding group {child!r} as child of {parent!r} creates a cycle")
        pgrp.children.append(child)
        cgrp.parents.append(parent)

    def _descendants(self, name: str) -> set[str]:
        seen: set[str] = set()
        stack = [name]
        while stack:
            for child in self.groups[stack.pop()].children:
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
        return seen

    def _ancestors(self, name: str) -> set[str]:
        seen: set[str] = set()
        stack = [name]
        while stack:
            for parent in self.groups[stack.pop()].parents:
                if parent not in seen:
                    seen.add(parent)
                    stack.append(parent)
        return seen

    def _depths(self) -> dict[str, int]:
        """Longest path from ``all`` (Ansible's ``Group.depth``); groups are acyclic."""
        depth: dict[str, int] = {}

        def visit(name: str) -> int:
            if name not in depth:
                if name == "all":
                    depth[name] = 0
                else:
                    parents = [p for p in self.groups[name].parents if p != "all"]
                    depth[name] = 1 + max((visit(p) for p in parents), default=0)
            return depth[name]

        for name in self.groups:
            visit(name)
        return depth

    def _priorities(self) -> dict[str, int]:
        prio: dict[str, int] = {}
        for grp in self.groups.values():
            raw = grp.vars.get("ansible_group_priority")
            try:
                prio[grp.name] = int(raw) if raw is not None else 1
            except ValueError:
                raise self.error(
                    grp.var_lines.get("ansible_group_priority"),
                    f"group {grp.name}: ansible_group_priority must be an integer, got {raw!r}",
                ) from None
        return prio

    def build(self) -> Inventory:
        order = {name: i for i, name in enumerate(self.groups)}
        depth, prio = self._depths(), self._priorities()
        members: dict[str, list[str]] = {g: [] for g in self.groups if g not in _IMPLICIT_GROUPS}
        hosts: list[InventoryHost] = []
        for h in self.hosts.values():
            all_groups: set[str] = set()
            for g in h.groups:
                all_groups.add(g)
                all_groups |= self._ancestors(g)
            all_groups.add("all")
            merged: dict[str, str] = {}
            lines: dict[str, int] = {}
            for g in sorted(all_groups, key=lambda n: (depth[n], prio[n], n)):
                merged.update(self.groups[g].vars)
                lines.update(self.groups[g].var_lines)
            merged.update(h.vars)
            lines.update(h.var_lines)
            visible = sorted(
                (g for g in all_groups if g not in _IMPLICIT_GROUPS), key=order.__getitem__
            )
            for g in visible:
                members[g].append(h.name)
            hosts.append(
                InventoryHost(
                    name=h.name,
                    address=_first(merged, _HOST_KEYS) or h.name,
                    port=self._port(h.name, merged, lines),
                    user=_first(merged, _USER_KEYS),
                    key_file=_first(merged, _KEY_FILE_KEYS),
                    groups=visible,
                    vars=merged,
                    line=h.line,
                    source=self.source,
                    var_lines=lines,
                )
            )
        for ih in hosts:
            ih.expected_spec()  # range-checks every gpufleet_ value now, naming file:line
        return Inventory(
            hosts=hosts, groups=members, source=self.source, warnings=list(self.warnings)
        )

    def _port(self, host: str, merged: dict[str, str], lines: dict[str, int]) -> int:
        for key in _PORT_KEYS:
            raw = merged.get(key)
            if raw is None or raw == "":
                continue
            try:
                port = int(raw)
            except ValueError:
                port = -1
            if not 0 < port < 65536:
                raise self.error(
                    lines.get(key), f"host {host}: {key} must be a port number, got {raw!r}"
                )
            return port
        return 22


def _first(values: dict[str, str], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        if values.get(key):
            return values[key]
    return None


def _scalar_type(annotation: Any) -> type:
    if get_origin(annotation) in (Union, types.UnionType):
        return next(a for a in get_args(annotation) if a is not type(None))  # type: ignore[no-any-return]
    return annotation  # type: ignore[no-any-return]


def _check_spec_value(fname: str, value: int | float | bool | str) -> int | float | bool | str:
    """Range-check one converted expected-spec value; ValueError says what is accepted."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    if fname in _SPEC_RANGES and not isinstance(value, bool) and isinstance(value, (int, float)):
        low, high = _SPEC_RANGES[fname]
        if not low <= value <= high:
            raise ValueError(f"out of range (expected {low:g} to {high:g})")
        if fname == "pcie_width" and value not in _PCIE_WIDTHS:
            raise ValueError(f"expected one of {', '.join(map(str, _PCIE_WIDTHS))}")
    if fname == "fabric" and value not in _FABRICS:
        raise ValueError(f"unknown fabric (expected {', '.join(_FABRICS)})")
    if isinstance(value, str):
        if len(value) > _MAX_TEXT:
            raise ValueError(f"longer than {_MAX_TEXT} characters")
        if any(not ch.isprintable() for ch in value):
            raise ValueError("contains control characters")
    return value


def _convert(raw: str, kind: type) -> int | float | bool | str:
    if kind is bool:
        low = raw.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError("expected a boolean (true/false)")
    if kind is int:
        try:
            return int(raw)
        except ValueError:
            raise ValueError("expected an integer") from None
    if kind is float:
        try:
            return float(raw)
        except ValueError:
            raise ValueError("expected a number") from None
    return raw


def _var_text(value: Any) -> str:
    """Render a parsed value the way it reads (``8``, ``True``, ``H800``); None -> ''."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, dict, tuple)):
        return json.dumps(value, default=str)
    return str(value)


# --------------------------------------------------------------------------------------------
# host patterns: ``gpu-[01:16]``, ``node[a:f]``, ``gpu-[0:10:2]``, ``host:2222``

_IPV6_PORT = re.compile(r"^\[([0-9A-Fa-f:.]+)\]:(\S+)$")


def _split_port(pattern: str) -> tuple[str, str | None]:
    """Split ``pattern`` into host part and port text (colon outside brackets, not IPv6)."""
    m = _IPV6_PORT.match(pattern)
    if m and m.group(1).count(":") >= 2:
        return m.group(1), m.group(2)
    depth = 0
    colons: list[int] = []
    for i, ch in enumerate(pattern):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == ":" and depth == 0:
            colons.append(i)
    if len(colons) == 1:  # more than one: a bare IPv6 address, no port
        i = colons[0]
        return pattern[:i], pattern[i + 1 :]
    return pattern, None


def _range_items(body: str) -> range | list[str]:
    """The items of one ``[beg:end(:step)]`` body, lazily for numbers; raise ValueError."""
    bounds = body.split(":")
    if len(bounds) not in (2, 3):
        raise ValueError(f"host range [{body}] must be [begin:end] or [begin:end:step]")
    beg, end = bounds[0] or "0", bounds[1]
    step_text = bounds[2] if len(bounds) == 3 else "1"
    if not end:
        raise ValueError(f"host range [{body}] has no end")
    if not step_text.isdigit() or int(step_text) < 1:
        raise ValueError(f"host range [{body}] needs a positive integer step")
    step = int(step_text)
    if beg.isdigit() and end.isdigit():
        if int(end) < int(beg):
            raise ValueError(f"host range [{body}] ends before it begins")
        if beg[0] == "0" and len(beg) > 1 and len(beg) != len(end):
            raise ValueError(
                f"host range [{body}]: zero-padded begin and end must have the same width"
            )
        return range(int(beg), int(end) + 1, step)
    if (
        len(beg) == 1
        and len(end) == 1
        and beg in string.ascii_letters
        and end in string.ascii_letters
    ):
        i_beg, i_end = string.ascii_letters.index(beg), string.ascii_letters.index(end)
        if i_end < i_beg:
            raise ValueError(f"host range [{body}] ends before it begins")
        return list(string.ascii_letters[i_beg : i_end + 1 : step])
    raise ValueError(f"host range [{body}] must be two integers or two letters")


def _expand_range(pattern: str) -> list[str]:
    """Expand every ``[beg:end(:step)]`` of ``pattern``; raise ValueError.

    The number of names is computed before anything is expanded: a pattern naming more than
    :data:`MAX_HOSTS` hosts (``gpu-[01:99999999]``) is refused without using the memory.
    """
    parts: list[list[str] | tuple[range, int]] = []  # literal text, or (numbers, zero width)
    rest, total = pattern, 1
    while True:
        start = rest.find("[")
        if start < 0:
            if "]" in rest:
                raise ValueError(f"unbalanced ']' in host pattern {pattern!r}")
            parts.append([rest])
            break
        stop = rest.find("]", start)
        if stop < 0:
            raise ValueError(f"unbalanced '[' in host pattern {pattern!r}")
        if "]" in rest[:start]:
            raise ValueError(f"unbalanced ']' in host pattern {pattern!r}")
        body = rest[start + 1 : stop]
        items = _range_items(body)
        parts.append([rest[:start]])
        if isinstance(items, range):
            beg = body.split(":")[0]
            width = len(beg) if beg.startswith("0") and len(beg) > 1 else 0
            parts.append((items, width))
        else:
            parts.append(items)
        total *= len(items)
        if total > MAX_HOSTS:
            raise ValueError(
                f"host pattern {pattern!r} names more than {MAX_HOSTS} hosts; "
                "split it or list fewer"
            )
        rest = rest[stop + 1 :]
    choices: list[list[str]] = []
    for part in parts:
        if isinstance(part, tuple):
            numbers, width = part
            choices.append([str(i).zfill(width) for i in numbers])
        else:
            choices.append(part)
    return ["".join(combo) for combo in itertools.product(*choices)]


def _expand_hostpattern(pattern: str, builder: _Builder, line: int) -> tuple[list[str], str | None]:
    host_part, port = _split_port(pattern)
    if port is not None and not port.isdigit():
        raise builder.error(line, f"bad port {port!r} in host pattern {pattern!r}")
    if not host_part:
        raise builder.error(line, f"empty host name in host pattern {pattern!r}")
    try:
        names = _expand_range(host_part)
    except ValueError as exc:
        raise builder.error(line, str(exc)) from None
    return names, port


# --------------------------------------------------------------------------------------------
# INI

_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
_GROUP_NAME = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")


def _ini_value(raw: str) -> str:
    """Ansible's ``_parse_value``: a Python literal when it is one, else the text itself."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            value = ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return raw
    if isinstance(value, (str, int, float, bool)) or value is None:
        return _var_text(value)
    return raw


def _parse_ini(text: str, src: str) -> _Builder:
    b = _Builder(src)
    declared: set[str] = set(_IMPLICIT_GROUPS)
    pending_children: dict[str, tuple[int, list[str]]] = {}  # child -> (line, parents)
    pending_vars: dict[str, int] = {}  # group -> line of its [g:vars] header
    group, state = "ungrouped", "hosts"

    for lineno, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line[0] in "#;":
            continue
        m = _SECTION.match(line)
        if m:
            group, state = m.group(1), m.group(2) or "hosts"
            if state not in ("hosts", "children", "vars"):
                raise b.error(
                    lineno,
                    f"section [{group}:{state}] has unknown type {state!r} "
                    "(expected hosts, children or vars)",
                )
            if group not in b.groups and state == "vars" and group not in pending_children:
                pending_vars[group] = lineno
            b.add_group(group)
            if state != "vars":
                declared.add(group)
                pending_vars.pop(group, None)
                if group in pending_children:
                    _, parents = pending_children.pop(group)
                    for parent in parents:
                        b.add_child(parent, group, lineno)
            continue
        if line.startswith("["):
            raise b.error(
                lineno,
                f"invalid section header {line!r}: expected [group], "
                "[group:vars] or [group:children] without spaces",
            )
        if state == "hosts":
            _ini_host_line(b, line, group, lineno)
        elif state == "vars":
            if "=" not in line:
                raise b.error(lineno, f"expected key=value in [{group}:vars], got {line!r}")
            key, value = (part.strip() for part in line.split("=", 1))
            if not key:
                raise b.error(lineno, f"empty variable name in [{group}:vars]: {line!r}")
            b.set_group_var(group, key, _ini_value(value), lineno)
        else:  # children
            cm = _GROUP_NAME.match(line)
            if not cm:
                raise b.error(lineno, f"expected a group name in [{group}:children], got {line!r}")
            child = cm.group(1)
            if child in b.groups:
                b.add_child(group, child, lineno)
            elif child in pending_children:
                pending_children[child][1].append(group)
            else:
                pending_children[child] = (lineno, [group])

    for child, (lineno, parents) in pending_children.items():
        raise b.error(
            lineno,
            f"section [{parents[-1]}:children] includes undefined group "
            f"{child!r} (declare it with [{child}] or [{child}:children])",
        )
    for grp, lineno in pending_vars.items():
        if grp not in declared:
            raise b.error(lineno, f"section [{grp}:vars] is for undefined group {grp!r}")
    return b


def _ini_host_line(b: _Builder, line: str, group: str, lineno: int) -> None:
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError as exc:
        raise b.error(lineno, f"cannot parse host line {redact_text(line)!r}: {exc}") from None
    if not tokens:
        return
    names, port = _expand_hostpattern(tokens[0], b, lineno)
    variables: list[tuple[str, str]] = []
    for tok in tokens[1:]:
        if "=" not in tok:
            raise b.error(lineno, f"expected key=value host variable, got {tok!r}")
        key, value = tok.split("=", 1)
        if not key:
            raise b.error(lineno, f"empty variable name in {tok!r}")
        variables.append((key, _ini_value(value)))
    for name in names:
        host = b.add_host(name, group, lineno)
        if port is not None:
            b.set_host_var(host, "ansible_port", port, lineno)
        for key, value in variables:
            b.set_host_var(host, key, value, lineno)


# --------------------------------------------------------------------------------------------
# YAML (Ansible's ``yaml`` inventory plugin layout)

_YAML_TOP = re.compile(r"^[\w.-]+:\s*(?:#.*)?$")


def _looks_like_yaml(text: str) -> bool:
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        return line.startswith("---") or (_YAML_TOP.match(raw) is not None)
    return False


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


class _CountingLoader(yaml.SafeLoader):
    """A safe loader that remembers every alias it resolves (for the alias-bomb check)."""

    def __init__(self, stream: str, builder: _Builder) -> None:
        super().__init__(stream)
        self.builder = builder
        self.aliases: list[tuple[yaml.Node, int]] = []
        self.checked: set[int] = set()  # mappings already checked for duplicate keys

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
            node = super().compose_node(parent, index)
            if node is not None:
                mark = event.start_mark
                self.aliases.append((node, int(mark.line) + 1 if mark is not None else 0))
            return node
        return super().compose_node(parent, index)


def _expanded_sizes(root: yaml.Node) -> dict[int, int]:
    """Nodes under each node with aliases expanded (shared nodes counted at every use)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        if done:
            total = 1 + sum(sizes.get(id(c), 1) for c in children)
            sizes[id(node)] = min(total, MAX_YAML_NODES + 1)
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes


def _check_alias_bomb(loader: _CountingLoader, root: yaml.Node, b: _Builder) -> None:
    if not loader.aliases:
        return
    sizes = _expanded_sizes(root)
    if sizes[id(root)] > MAX_YAML_NODES:
        node, line = max(loader.aliases, key=lambda a: sizes.get(id(a[0]), 1))
        size = sizes.get(id(node), 1)
        here = f"more than {MAX_YAML_NODES}" if size > MAX_YAML_NODES else str(size)
        raise b.error(
            line,
            f"YAML aliases expand this inventory to more than {MAX_YAML_NODES} nodes "
            f"(the alias here alone to {here}): refusing an alias bomb",
        )


def _warn_duplicate_keys(loader: yaml.SafeLoader, node: yaml.MappingNode, b: _Builder) -> None:
    """Ansible's warning for a key given twice in one mapping (the last value is used)."""
    seen: set[str] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = _var_text(loader.construct_object(key_node, deep=True))
        if key in seen:
            b.warn(
                _line(key_node),
                f"Found duplicate mapping key {key!r} (column {key_node.start_mark.column + 1}). "
                "Using last defined value only.",
            )
        seen.add(key)


def _parse_yaml(text: str, src: str) -> _Builder:
    b = _Builder(src)
    loader = _CountingLoader(text, b)
    try:
        root = loader.get_single_node()
        if root is None:
            return b
        _check_alias_bomb(loader, root, b)
        if not isinstance(root, yaml.MappingNode):
            raise b.error(
                _line(root),
                "a YAML inventory must be a mapping of groups "
                "(e.g. 'all: {hosts: ..., children: ...}')",
            )
        for key_node, value_node in _pairs(loader, root):
            name = _key(loader, key_node, b)
            if name == "plugin":
                raise b.error(
                    _line(key_node),
                    "this is an inventory plugin configuration, not a static inventory",
                )
            _yaml_group(loader, b, name, value_node)
        return b
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = mark.line + 1 if mark is not None else None
        raise b.error(where, f"invalid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise b.error(None, f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()


def _pairs(loader: yaml.SafeLoader, node: yaml.MappingNode) -> list[tuple[yaml.Node, yaml.Node]]:
    if isinstance(loader, _CountingLoader) and id(node) not in loader.checked:
        loader.checked.add(id(node))  # flattening rewrites it: check only the written form
        _warn_duplicate_keys(loader, node, loader.builder)
    loader.flatten_mapping(node)  # resolves '<<' merge keys in place
    return list(node.value)


def _key(loader: yaml.SafeLoader, node: yaml.Node, b: _Builder) -> str:
    if not isinstance(node, yaml.ScalarNode):
        raise b.error(_line(node), "expected a name (scalar key)")
    return _var_text(loader.construct_object(node, deep=True))


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _yaml_group(loader: yaml.SafeLoader, b: _Builder, name: str, node: yaml.Node) -> None:
    b.add_group(name)
    if _is_null(node):
        return
    if not isinstance(node, yaml.MappingNode):
        raise b.error(_line(node), f"group {name!r} must be a mapping with hosts, vars or children")
    for key_node, value_node in _pairs(loader, node):
        section = _key(loader, key_node, b)
        if section not in ("hosts", "vars", "children"):
            raise b.error(
                _line(key_node),
                f"unexpected key {section!r} in group {name!r} (expected hosts, vars or children)",
            )
        if _is_null(value_node):
            continue
        entries: list[tuple[yaml.Node, yaml.Node | None]]
        if isinstance(value_node, yaml.ScalarNode) and section != "vars":
            entries = [(value_node, None)]  # Ansible accepts 'hosts: name' for one entry
        elif isinstance(value_node, yaml.MappingNode):
            entries = list(_pairs(loader, value_node))
        else:
            raise b.error(_line(value_node), f"'{section}' of group {name!r} must be a mapping")
        for entry_key, entry_value in entries:
            entry = _key(loader, entry_key, b)
            lineno = _line(entry_key)
            if section == "vars":
                value = (
                    loader.construct_object(entry_value, deep=True)
                    if entry_value is not None
                    else None
                )
                b.set_group_var(name, entry, _var_text(value), lineno)
            elif section == "children":
                b.add_child(name, entry, lineno)  # before descending: cycles report here
                if entry_value is not None:
                    _yaml_group(loader, b, entry, entry_value)
            else:
                _yaml_host(loader, b, name, entry, entry_value, lineno)


def _yaml_host(
    loader: yaml.SafeLoader,
    b: _Builder,
    group: str,
    pattern: str,
    node: yaml.Node | None,
    lineno: int,
) -> None:
    names, port = _expand_hostpattern(pattern, b, lineno)
    host_vars: list[tuple[str, str, int]] = []
    if node is not None and not _is_null(node):
        if not isinstance(node, yaml.MappingNode):
            raise b.error(_line(node), f"host {pattern!r}: variables must be a mapping")
        for key_node, value_node in _pairs(loader, node):
            value = loader.construct_object(value_node, deep=True)
            host_vars.append((_key(loader, key_node, b), _var_text(value), _line(key_node)))
    for hname in names:
        host = b.add_host(hname, group, lineno)
        if port is not None:
            b.set_host_var(host, "ansible_port", port, lineno)
        for key, value, vline in host_vars:
            b.set_host_var(host, key, value, vline)


# --------------------------------------------------------------------------------------------
# CSV

_CSV_COLUMNS = {
    "name": "name",
    "host": "name",
    "hostname": "name",
    "inventory_hostname": "name",
    "address": "address",
    "ip": "address",
    "ansible_host": "address",
    "port": "port",
    "ansible_port": "port",
    "user": "user",
    "ansible_user": "user",
    "key_file": "key_file",
    "ansible_ssh_private_key_file": "key_file",
    "groups": "groups",
}
_CSV_VARS = {
    "address": "ansible_host",
    "port": "ansible_port",
    "user": "ansible_user",
    "key_file": "ansible_ssh_private_key_file",
}
#: Free-text CSV columns kept as host variables of the same name.
_CSV_TEXT_COLUMNS = ("note", "notes", "comment", "description")


def _check_csv_columns(b: _Builder, header: list[str], columns: list[str], lineno: int) -> None:
    """Refuse a column gpufleet would not read (a typo would silently drop its values)."""
    for raw, column in zip(header, columns, strict=True):
        if column in _CSV_COLUMNS.values() or column in _CSV_TEXT_COLUMNS:
            continue
        if column.startswith("ansible_"):
            continue
        if column.startswith(_SPEC_PREFIX):
            b.check_var(column, "", lineno)
            continue
        accepted = sorted(set(_CSV_COLUMNS) | set(_CSV_TEXT_COLUMNS))
        guess = difflib.get_close_matches(
            raw.lower(),
            accepted + sorted(known_gpufleet_vars()) + [_SPEC_PREFIX + raw.lower()],
            n=1,
        )
        if _SPEC_PREFIX + raw.lower() in known_gpufleet_vars():
            guess = [_SPEC_PREFIX + raw.lower()]
        hint = f" (did you mean {guess[0]}?)" if guess else ""
        raise b.error(
            lineno,
            f"unknown CSV column {raw!r}{hint}: use {', '.join(accepted)}, "
            "a gpufleet_* variable or an ansible_* variable",
        )


def _parse_csv(text: str, src: str) -> _Builder:
    b = _Builder(src)
    reader = csv.reader(io.StringIO(text), strict=True)
    header: list[str] | None = None
    columns: list[str] = []
    prev_end = 0
    try:
        for row in reader:
            lineno, prev_end = prev_end + 1, reader.line_num
            if not any(cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
                continue
            if header is None:
                header = [cell.strip() for cell in row]
                columns = [_CSV_COLUMNS.get(h.lower(), h) for h in header]
                if "name" not in columns:
                    raise b.error(
                        lineno, f"CSV header must have a 'name' column (got {', '.join(header)})"
                    )
                dup = {c for c in columns if columns.count(c) > 1}
                if dup or "" in columns:
                    raise b.error(
                        lineno, f"CSV header has empty or duplicate columns: {sorted(dup) or ['']}"
                    )
                _check_csv_columns(b, header, columns, lineno)
                continue
            if len(row) > len(columns):
                raise b.error(lineno, f"row has {len(row)} fields, header has {len(columns)}")
            _csv_row(b, dict(zip(columns, (c.strip() for c in row), strict=False)), lineno)
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):  # strict: an open quote runs to the end
            raise b.error(
                prev_end + 1, "invalid CSV: a quoted field opened on this line is never closed"
            ) from None
        raise b.error(reader.line_num, f"invalid CSV: {exc}") from None
    return b


def _csv_row(b: _Builder, cells: dict[str, str], lineno: int) -> None:
    name = cells.get("name", "")
    if not name:
        raise b.error(lineno, "row has an empty 'name'")
    names, port = _expand_hostpattern(name, b, lineno)
    port_cell = cells.get("port", "")
    if port_cell and not port_cell.isdigit():
        raise b.error(lineno, f"host {name}: port must be an integer, got {port_cell!r}")
    groups = [g for g in re.split(r"[;\s,]+", cells.get("groups", "")) if g]
    for g in groups:
        if g == "all" or not _GROUP_NAME.match(g):
            raise b.error(lineno, f"host {name}: invalid group name {g!r}")
    for hname in names:
        host = None
        for g in groups or ["ungrouped"]:
            host = b.add_host(hname, g, lineno)
        assert host is not None
        if port is not None:
            b.set_host_var(host, "ansible_port", port, lineno)
        for column, value in cells.items():
            if column in ("name", "groups") or value == "":
                continue
            b.set_host_var(host, _CSV_VARS.get(column, column), value, lineno)
