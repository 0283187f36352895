"""Per-model NCCL all-reduce floors (``data/nccl_floors.yaml``: the figures and where each
comes from). Pure: the packaged table is read once, a product name is looked up."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

from gpufleet.errors import ConfigError


@dataclass(frozen=True, slots=True)
class NcclFloor:
    """The peak all-reduce bus bandwidth (GB/s) a host of ``model`` must reach."""

    model: str
    match: re.Pattern[str]
    unless: re.Pattern[str] | None
    nvlink_gbps: float
    floor_gbps: float

    def applies(self, product_name: str) -> bool:
        name = product_name.lower()
        return bool(self.match.search(name)) and not (
            self.unless is not None and self.unless.search(name)
        )


def parse_floors(text: str, source: str = "nccl_floors.yaml") -> tuple[NcclFloor, ...]:
    """The floors in ``text``; a malformed entry is a ConfigError naming it."""
    data = yaml.safe_load(text) or {}
    rows = data.get("floors") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise ConfigError(f"{source}: expected a top-level 'floors' list")
    out = []
    for i, row in enumerate(rows):
        where = f"{source}: floors[{i}]"
        try:
            unless = row.get("unless")
            out.append(
                NcclFloor(
                    model=str(row["model"]),
                    match=re.compile(str(row["match"])),
                    unless=re.compile(str(unless)) if unless else None,
                    nvlink_gbps=float(row["nvlink_gbps"]),
                    floor_gbps=float(row["floor_gbps"]),
                )
            )
        except (AttributeError, KeyError, TypeError, ValueError, re.error) as exc:
            raise ConfigError(f"{where}: {exc!r}") from None
    return tuple(out)


@cache
def nccl_floors() -> tuple[NcclFloor, ...]:
    """The packaged table, loaded once."""
    text = resources.files("gpufleet.domain").joinpath("data/nccl_floors.yaml").read_text()
    return parse_floors(text)


def floor_for(product_name: str | None) -> NcclFloor | None:
    """The first floor whose pattern matches ``product_name``; None when none does."""
    if not product_name:
        return None
    return next((f for f in nccl_floors() if f.applies(product_name)), None)
