"""Plain CSV inventories (one host per row)."""

from __future__ import annotations

import csv
import difflib
import io
import re

from gpufleet.inventory.common import _Builder, _expand_hostpattern
from gpufleet.inventory.hostvars import _SPEC_PREFIX, known_gpufleet_vars
from gpufleet.inventory.ini import _GROUP_NAME

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
