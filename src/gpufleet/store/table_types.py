"""The column types every table uses (JSON, enums stored as their text, UTC datetimes) and the
declarative base (moved out of :mod:`gpufleet.store.tables`, which re-exports them)."""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from sqlalchemy import JSON, DateTime, String
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.types import TypeDecorator

from gpufleet.domain.times import as_utc

JsonType = JSON().with_variant(JSONB(), "postgresql")


class EncodedJson(dict[str, Any]):
    """A JSON object whose text was already made (the facts document, encoded once by a C
    encoder, issue 30): :func:`json_serializer` writes ``text`` as it is instead of
    encoding the dict again. The dict is the value, for whoever reads the parameter."""

    __slots__ = ("text",)

    def __init__(self, value: dict[str, Any], text: str) -> None:
        super().__init__(value)
        self.text = text


def json_serializer(value: Any) -> str:
    """The engine's JSON encoder: the text of an :class:`EncodedJson`, else the standard
    library's ``json.dumps`` (every other JSON column is written as before)."""
    if type(value) is EncodedJson:
        return value.text
    return json.dumps(value)

E = TypeVar("E", bound=StrEnum)


class StrEnumType(TypeDecorator[E], Generic[E]):
    """A domain ``StrEnum`` stored as its value in a VARCHAR (the DDL stays ``VARCHAR(n)``).

    Writes accept the enum or its exact value and refuse anything else (a typo never reaches
    the database); reads return the enum, so services compare members, never strings.
    """

    impl = String
    cache_ok = True

    def __init__(self, enum_cls: type[E], length: int) -> None:
        super().__init__(length)
        self.enum_cls = enum_cls

    def process_bind_param(self, value: E | str | None, dialect: Any) -> str | None:
        if value is None:
            return None
        try:
            return str(self.enum_cls(value).value)
        except ValueError:
            known = ", ".join(m.value for m in self.enum_cls)
            raise ValueError(
                f"{value!r} is not a {self.enum_cls.__name__} (known: {known})"
            ) from None

    def process_result_value(self, value: str | None, dialect: Any) -> E | None:
        return None if value is None else self.enum_cls(value)

    @property
    def python_type(self) -> type[E]:
        return self.enum_cls


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware datetimes on both backends (SQLite drops tzinfo otherwise)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime stored; use datetime.now(UTC)")
        return value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        return None if value is None else as_utc(value)  # naive means UTC


class Base(DeclarativeBase):
    """Declarative base for every gpufleet table."""
