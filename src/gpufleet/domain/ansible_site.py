"""The site's own Ansible groups in the dynamic inventory (issue 26 item 5), as pure data.

An enrolled inventory's groups (``gpu_nodes``, ``gpu_h800`` under it, ``cpu_nodes``), their
children and their own variables are stored at enroll (:class:`SiteGroup`); each host keeps
the groups it is in (parents included) and its merged variables. Given back to Ansible, they
must give every host the same groups and the same variable values as the site's ``hosts.ini``,
so a site playbook runs unchanged against ``gpufleet inventory``:

- each group lists the hosts that are directly in it (not through a child), its children and
  its own variables; ``all`` carries the ``[all:vars]``;
- a host's variables are the ones its groups do not already give it alike
  (:func:`own_vars`), so a playbook's ``group_vars/`` still outranks an inventory group
  variable exactly as with the file (a host variable would outrank it);
- gpufleet's groups (``state_*``, ``pool_*``, ``gpu_<model>``, ``profile_*``, ``rack_*``,
  ``baseline_*``) sit beside them; a gpufleet group named like a site group (``gpu_h800``)
  is one group: the hosts of both, the site's children, the site's variables over gpufleet's.

Inventory variables are stored as text; they are given back typed as Ansible's INI parser
types them (:func:`typed`: ``550`` an integer, ``True`` a boolean, ``12.4`` a float).

A host whose groups are not all stored (enrolled before migration 0028) keeps all its merged
variables as host variables and is listed in each of its groups directly.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def typed(text: str) -> Any:
    """An inventory value as Ansible's INI parser reads it (``ast.literal_eval``, else the
    text itself): ``550`` -> 550, ``True`` -> True, ``[1, 2]`` -> a list."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def typed_vars(values: Mapping[str, str]) -> dict[str, Any]:
    """:func:`typed` of every value."""
    return {k: typed(v) for k, v in values.items()}


@dataclass(frozen=True)
class SiteGroup:
    """One group of an enrolled inventory: its child groups and own (non-secret) vars."""

    name: str
    children: tuple[str, ...] = ()
    vars: Mapping[str, str] = field(default_factory=dict)


def _parents(groups: Mapping[str, SiteGroup]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for g in groups.values():
        if g.name == "all":
            continue
        for child in g.children:
            out.setdefault(child, []).append(g.name)
    return out


def depths(groups: Mapping[str, SiteGroup]) -> dict[str, int]:
    """Ansible's ``Group.depth``: the longest path from ``all`` (``all`` is 0, a group with
    no parent 1). The stored groups are acyclic (the inventory parser refuses a cycle)."""
    parents = _parents(groups)
    out: dict[str, int] = {"all": 0}

    def depth(name: str, seen: frozenset[str]) -> int:
        if name in out:
            return out[name]
        ups = [p for p in parents.get(name, []) if p not in seen]
        d = 1 + max((depth(p, seen | {name}) for p in ups), default=0)
        out[name] = d
        return d

    for name in groups:
        depth(name, frozenset())
    return out


def ancestors(name: str, groups: Mapping[str, SiteGroup]) -> set[str]:
    """Every group above ``name`` (``all`` left out)."""
    parents = _parents(groups)
    seen: set[str] = set()
    stack = [name]
    while stack:
        for p in parents.get(stack.pop(), []):
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return seen


def knows(host_groups: Iterable[str], groups: Mapping[str, SiteGroup]) -> bool:
    """Whether every group of a host is stored (else its variables stay host variables)."""
    return all(g in groups for g in host_groups)


def group_vars(host_groups: Iterable[str], groups: Mapping[str, SiteGroup]) -> dict[str, str]:
    """The variables a host gets from its groups, merged as Ansible merges them: ``all``
    first, then by depth, ``ansible_group_priority`` and name (a later one wins)."""
    names = {"all"}
    for g in host_groups:
        names.add(g)
        names |= ancestors(g, groups)
    depth = depths(groups)

    def priority(name: str) -> int:
        raw = groups[name].vars.get("ansible_group_priority", "1") if name in groups else "1"
        try:
            return int(raw)
        except ValueError:
            return 1

    merged: dict[str, str] = {}
    for name in sorted(names, key=lambda n: (depth.get(n, 1), priority(n), n)):
        if name in groups:
            merged.update(groups[name].vars)
    return merged


def own_vars(
    merged: Mapping[str, str], host_groups: Sequence[str], groups: Mapping[str, SiteGroup]
) -> dict[str, str]:
    """The host variables of a host whose merged variables are ``merged``: those its groups
    do not give it with the same value (all of them when a group is not stored)."""
    if not knows(host_groups, groups):
        return dict(merged)
    given = group_vars(host_groups, groups)
    return {k: v for k, v in merged.items() if k not in given or given[k] != v}


def direct_groups(host_groups: Sequence[str], groups: Mapping[str, SiteGroup]) -> list[str]:
    """The groups a host is listed in: those of its groups none of whose descendants holds it
    too (membership of the others follows from the children)."""
    held = set(host_groups)
    out = []
    for g in host_groups:
        below = {d for d in held if d != g and g in ancestors(d, groups)}
        if not below:
            out.append(g)
    return out


def add_site_groups(
    out: dict[str, Any],
    members: Mapping[str, Sequence[str]],
    groups: Mapping[str, SiteGroup],
) -> None:
    """Merge the site's groups into an inventory ``--list`` answer ``out`` (gpufleet's groups
    already in it, ``all`` last): ``members`` maps each host to its stored groups."""
    listed: dict[str, list[str]] = {}
    for host, host_groups in members.items():
        direct = direct_groups(host_groups, groups) if knows(host_groups, groups) else host_groups
        for g in direct:
            listed.setdefault(g, []).append(host)
    site = [g for g in groups if g != "all"]
    for name in [*site, *(g for g in listed if g not in groups)]:
        entry: dict[str, Any] = out.setdefault(name, {})
        hosts = sorted({*entry.get("hosts", []), *listed.get(name, [])})
        if hosts:
            entry["hosts"] = hosts
        defined = groups.get(name)
        if defined is not None and defined.children:
            entry["children"] = list(defined.children)
        if defined is not None and defined.vars:
            entry["vars"] = {**entry.get("vars", {}), **typed_vars(defined.vars)}
    below = {c for g in groups.values() if g.name != "all" for c in g.children}
    top = [g for g in [*site, *listed] if g not in below]
    all_entry = out.setdefault("all", {})
    children = [c for c in all_entry.get("children", []) if c not in below]
    all_entry["children"] = list(dict.fromkeys([*children, *top]))
    if "all" in groups and groups["all"].vars:
        all_entry["vars"] = typed_vars(groups["all"].vars)
