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

from pathlib import Path

from gpufleet.errors import InventoryError
from gpufleet.inventory.csv import _parse_csv
from gpufleet.inventory.hostvars import MAX_HOSTS, MAX_YAML_NODES, known_gpufleet_vars
from gpufleet.inventory.ini import _parse_ini
from gpufleet.inventory.model import Inventory, InventoryHost
from gpufleet.inventory.yaml import _looks_like_yaml, _parse_yaml

__all__ = [
    "MAX_HOSTS",
    "MAX_YAML_NODES",
    "Inventory",
    "InventoryHost",
    "known_gpufleet_vars",
    "load_inventory",
]


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
