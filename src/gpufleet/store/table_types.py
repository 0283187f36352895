"""The column types every table uses (JSON, enums stored as their text, UTC datetimes) and the
declarative base (moved out of :mod:`gpufleet.store.tables`, which re-exports them)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from sqlalchemy import JSON, DateTime, String
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.types import TypeDecorator

from gpufleet.domain.times import as_utc

JsonType = JSON().with_variant(JSONB(), "postgresql")

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
