"""The selector syntax, light (no SQLAlchemy): terms, kinds, the checks that refuse a bad
selector (exit 2) and the ``LIKE`` pattern of a name glob. :mod:`gpufleet.service.core.select`
turns a selector into the store's query with these; the fast read layer
(:mod:`gpufleet.service.core.fastread`) into plain SQL with the same checks. The syntax is
documented there (:mod:`gpufleet.service.core.select`)."""

from __future__ import annotations

from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError

#: The selector kinds, as the help and error messages name them.
KINDS = "NAME-GLOB, group:G, pool:P, state:S, model:M, rack:R"
STATES = tuple(s.value for s in HostState)


def like_literal(text: str) -> str:
    """``text`` with the SQL ``LIKE`` wildcards (and the escape character) escaped, for
    ``.like(..., escape="\\\\")``."""
    return text.replace("\\", "\\\\").replace("%", r"\%").replace("_", r"\_")


def check_state(value: str) -> HostState:
    """The state named ``value``; a :class:`ConfigError` listing the valid ones otherwise."""
    try:
        return HostState(value.strip().lower())
    except ValueError:
        raise ConfigError(
            f"unknown state '{value}': valid states are {', '.join(STATES)}"
        ) from None


def is_explicit(selector: str | None) -> bool:
    """True unless the selector means "every host" (empty or ``all``)."""
    return bool(selector and selector.strip() not in ("", "all"))


def is_single_name(selector: str) -> bool:
    """A plain host name: no wildcard, no ``kind:``, no union."""
    return not any(c in selector for c in "*?,:[")


def selector_terms(selector: str | None) -> list[str]:
    """The non-blank comma-separated terms of ``selector``."""
    return [t.strip() for t in (selector or "").split(",") if t.strip()]


#: Most terms one selector may have (each is one SQL condition; SQLite's parser refuses an
#: expression deeper than 1000). A longer list is better said with group:, pool: or a glob.
MAX_TERMS = 500


def check_term_count(selector: str) -> None:
    """:class:`ConfigError` (exit 2, HTTP 422) when ``selector`` has more than
    :data:`MAX_TERMS` comma-separated terms."""
    n = selector.count(",") + 1
    if n > MAX_TERMS:
        raise ConfigError(
            f"selector has {n} terms, at most {MAX_TERMS}: select by group:, pool:, rack: "
            "or a name glob instead"
        )


def check_terms(selector: str) -> list[str]:
    """The terms of ``selector``; a :class:`ConfigError` (exit 2, HTTP 422) when one is empty
    or blank (``""``, ``","``, ``"a,,b"``): it would select every host, which for a change
    (``retire ""``) is the whole fleet. Every host is asked for with ``all`` (or no
    selector at all)."""
    terms = [t.strip() for t in selector.split(",")]
    if any(not t for t in terms):
        shown = repr(selector) if len(selector) <= 80 else repr(selector[:80]) + "..."
        raise ConfigError(
            f"selector {shown}: an empty or blank term selects nothing; name the hosts "
            f"({KINDS}), or use 'all' for every host"
        )
    return terms


def split_term(term: str) -> tuple[str, str]:
    """(kind, value) of one selector term: ``pool:train`` -> ("pool", "train"); a term
    without a kind is a name glob ("name", term); the kind lowered, both stripped."""
    kind, _, value = term.partition(":")
    if not value:
        kind, value = "name", term
    return kind.strip().lower(), value.strip()


def name_like(term: str, value: str) -> str:
    """The ``LIKE`` pattern (escape ``\\``) of the name glob ``value`` (of ``term``),
    lowered (names are case-insensitive: the column is lowered too); a :class:`ConfigError`
    for a character class, which is not supported."""
    if "[" in value:
        raise ConfigError(f"selector '{term}': character classes are not supported; use * and ?")
    return like_literal(value.lower()).replace("*", "%").replace("?", "_")
