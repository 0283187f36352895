"""Host selectors shared by every command: ``gpu-0*``, ``group:gpu_h800``, ``pool:train``,
``state:available``, ``model:H100``, comma-separated for a union; empty or ``all`` = all."""

from __future__ import annotations

from fnmatch import fnmatchcase

from sqlalchemy import ColumnElement, Select, Text, func, or_, select

from gpufleet.errors import ConfigError
from gpufleet.store.tables import FactSnapshot, Host


def select_hosts(selector: str | None) -> Select[Host]:
    """A SELECT of the hosts matching ``selector`` ordered by name."""
    stmt = select(Host).order_by(Host.name)
    if not selector or selector.strip() in ("", "all"):
        return stmt
    clauses: list[ColumnElement[bool]] = []
    for term in (t.strip() for t in selector.split(",")):
        if not term:
            continue
        kind, _, value = term.partition(":")
        if not value:
            kind, value = "name", term
        if kind == "name":
            if "[" in value:
                raise ConfigError(
                    f"selector '{term}': character classes are not supported; use * and ?"
                )
            # Host names are case-insensitive (DNS); lower both sides so SQLite and
            # PostgreSQL agree.
            like = value.lower().replace("%", r"\%").replace("_", r"\_")
            like = like.replace("*", "%").replace("?", "_")
            clauses.append(func.lower(Host.name).like(like, escape="\\"))
        elif kind == "pool":
            clauses.append(Host.pool == value)
        elif kind == "state":
            clauses.append(Host.state == value)
        elif kind == "group":
            # JSON containment differs per backend; match on the serialised list instead.
            clauses.append(func.lower(func.cast(Host.groups, Text)).like(f'%"{value.lower()}"%'))
        elif kind == "model":
            sub = select(FactSnapshot.id).where(
                FactSnapshot.id == Host.latest_snapshot_id,
                func.lower(FactSnapshot.gpu_model).like(f"%{value.lower()}%"),
            )
            clauses.append(sub.exists())
        else:
            raise ConfigError(
                f"unknown selector '{term}': use NAME-GLOB, group:, pool:, state: or model:"
            )
    return stmt.where(or_(*clauses)) if clauses else stmt


def matches_name(pattern: str, name: str) -> bool:
    """Glob match used where hosts are filtered in memory."""
    return fnmatchcase(name, pattern)
