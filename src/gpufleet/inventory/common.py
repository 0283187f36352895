"""What the three formats share: accumulating hosts, groups and variables in file order and
resolving them like ``ansible-core`` (:class:`_Builder`), and host patterns and ranges."""

from __future__ import annotations

import difflib
import itertools
import re
import string
from dataclasses import dataclass, field

from gpufleet.collect.transport import known_transports
from gpufleet.errors import GpufleetError, InventoryError
from gpufleet.inventory.hostvars import (
    _HOST_KEYS,
    _IMPLICIT_GROUPS,
    _KEY_FILE_KEYS,
    _PORT_KEYS,
    _SPEC_PREFIX,
    _USER_KEYS,
    MAX_HOSTS,
    _first,
    known_gpufleet_vars,
)
from gpufleet.inventory.model import Inventory, InventoryGroup, InventoryHost

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
            spec = ih.expected_spec()  # range-checks every gpufleet_ value now, naming file:line
            # an unknown gpufleet_role too, naming the host and the value; and a GPU-less node
            # that expects GPUs (the role's `no_accelerators` check would not hold it)
            if ih.role.value != "gpu" and spec.gpu_count:
                raise self.error(
                    ih.var_lines.get("gpufleet_gpu_count"),
                    f"host {ih.name}: gpufleet_role={ih.role.value} expects no GPU, but "
                    f"gpufleet_gpu_count={spec.gpu_count}: set gpufleet_gpu_count=0 or the role",
                )
        definitions = [
            InventoryGroup(name=g.name, children=list(g.children), vars=dict(g.vars))
            for g in self.groups.values()
            if g.name != "ungrouped"
        ]
        return Inventory(
            hosts=hosts,
            groups=members,
            definitions=definitions,
            source=self.source,
            warnings=list(self.warnings),
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
