"""Ansible INI inventories."""

from __future__ import annotations

import ast
import re
import shlex
import warnings

from gpufleet.inventory.common import _Builder, _expand_hostpattern
from gpufleet.inventory.hostvars import _IMPLICIT_GROUPS, _var_text
from gpufleet.secrets import redact_text

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
