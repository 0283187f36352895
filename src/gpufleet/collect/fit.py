"""Values that read but do not fit: how the parsers refuse them, as a :class:`ParseError`.

Every record a parser returns is bounded by its model (:mod:`gpufleet.domain.facts`: a CA name
of at most 64 characters, a port up to 255, a disk under 2**63 bytes ...). A parser builds its
records through :func:`build` and reads a decimal number through :func:`int_of` (``int()``
refuses more than 4300 digits with a ``ValueError``), so a value out of bounds is a
:class:`ParseError` naming the source, the line and the field, never pydantic's
``ValidationError`` or a bare ``ValueError``: a caller that refuses one host for a
:class:`ParseError` (inspection, reclaim, evidence, failures) refuses it for this too, and no
run ends on it. Such a ParseError is caused by an :class:`Unfit` (:func:`is_unfit`): the
collection (:func:`gpufleet.collect.assemble.assemble_facts`) refuses the host's whole
collection for it even from a best-effort section, as it did for the ``ValidationError``: a
value that does not fit is bad output, not a missing section. (``Unfit`` is a cause, not a
:class:`~gpufleet.errors.GpufleetError` class: the error taxonomy stays as it is.)
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gpufleet.errors import ParseError

__all__ = ["Unfit", "build", "fit_error", "int_of", "is_unfit"]

M = TypeVar("M", bound=BaseModel)


class Unfit(ValueError):
    """The cause of a :class:`ParseError` for a value that was read but does not fit its
    record's bounds (see the module doc)."""


def is_unfit(exc: ParseError) -> bool:
    """Whether ``exc`` refuses a value that was read but does not fit (caused by an
    :class:`Unfit`, as :func:`build` and :func:`int_of` raise it)."""
    return isinstance(exc.__cause__, Unfit)


def fit_error(exc: ValidationError) -> str:
    """The first complaint of a bounds check: ``"field: message (got 'value...')"``."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "value"
    value = err.get("input")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return f"{field}: {err['msg']}"
    if isinstance(value, int) and value.bit_length() > 256:
        return f"{field}: {err['msg']} (got a {value.bit_length()}-bit number)"
    got = ascii(value) if isinstance(value, str) else repr(value)
    got = got if len(got) <= 60 else got[:57] + "..."
    return f"{field}: {err['msg']} (got {got})"


def build(
    model: type[M], source: str, /, *, line: int | None = None, where: str = "", **values: Any
) -> M:
    """``model(**values)``; a value out of its bounds raises a :class:`ParseError` naming
    ``source``, ``line`` and the field (after ``where``, e.g. ``"CA 'mlx5_0' port 1: "``),
    caused by an :class:`Unfit`. ``model`` and ``source`` are positional, so a record may
    have fields of those names."""
    try:
        return model(**values)
    except ValidationError as exc:
        message = where + fit_error(exc)
        raise ParseError(source, message, line=line) from Unfit(message)


def int_of(text: str, source: str, what: str, *, line: int | None = None) -> int:
    """``int(text)`` of a decimal number the caller matched; one too long for ``int()`` raises
    a :class:`ParseError` naming ``what``, caused by an :class:`Unfit`."""
    try:
        return int(text)
    except ValueError:
        message = f"{what}: {text[:20]!r}... ({len(text)} characters) is no number that fits"
        raise ParseError(source, message, line=line) from Unfit(message)
