"""A host's role in the fleet (issue 26 item 9): not every node is a GPU node.

An inventory names it with ``gpufleet_role`` (``gpu`` when unset). A ``cpu`` or ``storage``
host is collected with the same script, validated against the profiles of its role only (no
GPU checks), and kept out of GPU capacity, placement and GPU labels.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from enum import StrEnum
from typing import Protocol, TypeVar


class HostRole(StrEnum):
    GPU = "gpu"
    CPU = "cpu"
    STORAGE = "storage"


#: Every role, in the order they are listed to a person.
ROLES: tuple[str, ...] = tuple(r.value for r in HostRole)
DEFAULT_ROLE = HostRole.GPU


def parse_role(value: str) -> HostRole:
    """``value`` as a role (empty: the default); ValueError naming the accepted values and
    the closest one."""
    text = value.strip()
    if text == "":
        return DEFAULT_ROLE
    if text in ROLES:
        return HostRole(text)
    close = difflib.get_close_matches(text.lower(), ROLES, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ValueError(f"unknown role {value!r}{hint}; expected one of {', '.join(ROLES)}")


def role_of(value: str | None) -> HostRole:
    """A stored role (None or unknown text, from an older row: the default)."""
    return HostRole(value) if value in ROLES else DEFAULT_ROLE


class _HasRole(Protocol):
    @property
    def role(self) -> str: ...


P = TypeVar("P", bound=_HasRole)


def profiles_for_role(profiles: Mapping[str, P], role: str) -> dict[str, P]:
    """The profiles that judge a host of ``role``: a GPU host is never made available by a
    CPU profile, a CPU host is never failed by GPU checks."""
    return {name: p for name, p in profiles.items() if p.role == role}
