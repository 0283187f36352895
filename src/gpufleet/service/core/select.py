"""Host selectors shared by every command: ``gpu-0*``, ``group:gpu_h800``, ``pool:train``,
``state:available``, ``model:H100``, ``rack:r12``, comma-separated for a union; no selector
or ``all`` = all. An empty or blank term (``""``, ``","``) is refused (exit 2), never "all".

Only ``*`` and ``?`` are wildcards in a name glob; ``%`` and ``_`` are literal everywhere
(escaped for SQL ``LIKE`` on both backends). An unknown state name is refused (exit 2, the
valid states listed); a selector that matches nothing is :class:`NotFound` (exit 4) wherever
hosts are selected (:func:`selected_names`).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, Select, Text, func, or_, select
from sqlalchemy.orm import Session

from gpufleet.domain.names import did_you_mean
from gpufleet.errors import ConfigError, NotFound
from gpufleet.service.core.select_terms import KINDS as KINDS
from gpufleet.service.core.select_terms import MAX_TERMS as MAX_TERMS
from gpufleet.service.core.select_terms import STATES as STATES
from gpufleet.service.core.select_terms import check_state as check_state
from gpufleet.service.core.select_terms import check_term_count as check_term_count
from gpufleet.service.core.select_terms import check_terms as check_terms
from gpufleet.service.core.select_terms import is_explicit as is_explicit
from gpufleet.service.core.select_terms import is_single_name as is_single_name
from gpufleet.service.core.select_terms import like_literal as like_literal
from gpufleet.service.core.select_terms import (
    name_like,
    split_term,
)
from gpufleet.service.core.select_terms import selector_terms as selector_terms
from gpufleet.store.tables import FactSnapshot, Host


def nothing_matches(
    selector: str | None, s: Session | None = None, *, terms: Sequence[str] | None = None
) -> NotFound:
    """The error for a selection that matched no host. With the session ``s``, the terms
    (``selector``'s, or ``terms``) naming a host or pool that does not exist are said, with
    the nearest known names (:func:`unknown_terms`)."""
    given = selector_terms(selector) if terms is None else list(terms)
    why = [] if s is None else unknown_terms(s, given)
    if len(why) == 1 and len(given) == 1:
        return NotFound(why[0])
    if terms is None and selector and is_single_name(selector.strip()):
        return NotFound(f"no host named '{selector.strip()}'")
    said = ": " + "; ".join(why) if why else ""
    return NotFound(f"no hosts match selector '{selector}'{said}")


def unknown_terms(s: Session, terms: Sequence[str]) -> list[str]:
    """For each term naming a host (no wildcard) or a pool (``pool:P``) that does not exist:
    ``no host named 'gpu01' (did you mean gpu-01?)``, ``no pool named 'trian-a100' (did you
    mean train-a100?)``."""
    from gpufleet.store.repo import known_pools, no_pool  # on a miss only: start-up (issue 8)

    out: list[str] = []
    for term in terms:
        if term.strip().lower() == "all":
            continue
        kind, _, value = term.partition(":")
        if not value:
            kind, value = "name", term
        kind, value = kind.strip().lower(), value.strip()
        if kind == "name" and is_single_name(value):
            known = list(s.scalars(select(Host.name)))
            if value.lower() not in {k.lower() for k in known}:
                out.append(f"no host named '{value}'{did_you_mean(value, known)}")
        elif kind == "pool":
            pools = known_pools(s)
            if value not in pools:
                out.append(str(no_pool(s, value, pools)))
    return out



def group_clause(group: str) -> ColumnElement[bool]:
    """Hosts in ``group`` (case-insensitive). JSON containment differs per backend, so the
    serialised list is matched, the quoted name taken literally."""
    return func.lower(func.cast(Host.groups, Text)).like(
        f'%"{like_literal(group.lower())}"%', escape="\\"
    )


def model_clause(model: str) -> ColumnElement[bool]:
    """Hosts whose latest facts name a GPU model containing ``model`` (case-insensitive).
    ``ILIKE`` on PostgreSQL (``lower() LIKE lower()`` on SQLite): the planner estimates it
    from the column's statistics, which ``lower(column)`` has none of."""
    return FactSnapshot.gpu_model.ilike(f"%{like_literal(model)}%", escape="\\")


def select_hosts(selector: str | None) -> Select[Host]:
    """A SELECT of the hosts matching ``selector`` ordered by name (None or ``all``: every
    host; an empty or blank term is refused: :func:`check_terms`)."""
    stmt = select(Host).order_by(Host.name)
    if selector is None or selector.strip() == "all":
        return stmt
    check_term_count(selector)
    clauses: list[ColumnElement[bool]] = []
    for term in check_terms(selector):
        kind, value = split_term(term)
        if kind == "name":
            # Host names are case-insensitive (DNS); lower both sides so SQLite and
            # PostgreSQL agree.
            clauses.append(func.lower(Host.name).like(name_like(term, value), escape="\\"))
        elif kind == "pool":
            clauses.append(Host.pool == value)
        elif kind == "rack":
            clauses.append(func.lower(Host.rack) == value.lower())
        elif kind == "state":
            clauses.append(Host.state == check_state(value))
        elif kind == "group":
            clauses.append(group_clause(value))
        elif kind == "model":
            sub = select(FactSnapshot.id).where(
                FactSnapshot.id == Host.latest_snapshot_id, model_clause(value)
            )
            clauses.append(sub.exists())
        else:
            raise ConfigError(f"unknown selector '{term}': use {KINDS}")
    return stmt.where(or_(*clauses)) if clauses else stmt


def selected_names(s: Session, selector: str | None) -> list[str]:
    """Names of the hosts ``selector`` matches, by name; :class:`NotFound` (exit 4) when an
    explicit selector matches none."""
    names = list(s.scalars(select_hosts(selector).with_only_columns(Host.name)))
    if not names and is_explicit(selector):
        raise nothing_matches(selector, s)
    return names
