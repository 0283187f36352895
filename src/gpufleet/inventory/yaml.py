"""Ansible YAML inventories (also JSON), with alias-bomb and duplicate-key checks."""

from __future__ import annotations

import re

import yaml

from gpufleet.inventory.common import _Builder, _expand_hostpattern
from gpufleet.inventory.hostvars import MAX_YAML_NODES, _var_text

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
