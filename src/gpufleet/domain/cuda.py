"""Which CUDA a host's NVIDIA driver can serve (issue 26, the driver/CUDA gate). Pure.

The table is ``data/cuda_drivers.yaml`` (NVIDIA's minimum Linux driver per CUDA release,
from the CUDA Toolkit Release Notes; the file says which column is used and why). A driver
serves a CUDA ``major.minor`` when it is at least that release's toolkit driver; a driver
that cannot be read, or a CUDA newer than the table knows, serves nothing (fail closed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

from gpufleet.errors import ConfigError

__all__ = [
    "CudaTable",
    "cuda_max",
    "cuda_refusal",
    "cuda_table",
    "driver_serves",
    "parse_cuda",
    "parse_table",
]

_CUDA = re.compile(r"^\s*(\d+)\.(\d+)(?:\.\d+)?\s*$")
_DRIVER = re.compile(r"^\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?\s*$")

Version = tuple[int, int]


@dataclass(frozen=True, slots=True)
class CudaTable:
    """``toolkit``: CUDA (major, minor) -> minimum driver, oldest first; ``minor_compat``:
    CUDA major -> minimum driver for minor version compatibility (shown, not used)."""

    toolkit: tuple[tuple[Version, str], ...]
    minor_compat: dict[int, str]


def parse_cuda(text: str) -> Version:
    """``"12.4"`` (or ``"12.4.1"``) -> (12, 4); anything else is a ConfigError."""
    m = _CUDA.match(text or "")
    if m is None:
        raise ConfigError(f"--cuda {text!r}: expected a CUDA version MAJOR.MINOR, e.g. 12.4")
    return int(m.group(1)), int(m.group(2))


def _driver(text: str | None) -> tuple[int, ...] | None:
    m = _DRIVER.match(text or "")
    if m is None:
        return None
    return tuple(int(p) for p in m.groups() if p is not None)


def parse_table(text: str, source: str = "cuda_drivers.yaml") -> CudaTable:
    """The table from its YAML; a row that does not parse is a ConfigError naming it."""
    data = yaml.safe_load(text) or {}
    rows: list[tuple[Version, str]] = []
    for cuda, driver in (data.get("toolkit") or {}).items():
        try:
            version = parse_cuda(str(cuda))
        except ConfigError:
            raise ConfigError(f"{source}: toolkit row {cuda!r} is not MAJOR.MINOR") from None
        if _driver(str(driver)) is None:
            raise ConfigError(f"{source}: CUDA {cuda}: driver {driver!r} is not a version")
        rows.append((version, str(driver)))
    if not rows:
        raise ConfigError(f"{source}: no toolkit rows")
    compat = {int(k): str(v) for k, v in (data.get("minor_compat") or {}).items()}
    return CudaTable(tuple(sorted(rows)), compat)


@cache
def cuda_table() -> CudaTable:
    """The shipped table."""
    text = resources.files("gpufleet.domain").joinpath("data/cuda_drivers.yaml").read_text()
    return parse_table(text)


def cuda_max(driver: str | None, table: CudaTable | None = None) -> str | None:
    """The newest CUDA ``major.minor`` ``driver`` serves (``"535.154.05"`` -> ``"12.2"``);
    None when the driver cannot be read or is older than every row."""
    got = _driver(driver)
    if got is None:
        return None
    best: Version | None = None
    for version, minimum in (table or cuda_table()).toolkit:
        need = _driver(minimum)
        if need is not None and got >= need:
            best = version
    return None if best is None else f"{best[0]}.{best[1]}"


def driver_serves(driver: str | None, cuda: str, table: CudaTable | None = None) -> bool:
    """Whether ``driver`` serves CUDA ``cuda`` (see the module)."""
    return cuda_refusal(driver, cuda, table) is None


def cuda_refusal(driver: str | None, cuda: str, table: CudaTable | None = None) -> str | None:
    """Why ``driver`` cannot serve CUDA ``cuda`` (None: it can):
    ``"driver 535.154.05 serves CUDA up to 12.2"``."""
    t = table or cuda_table()
    want = parse_cuda(cuda)
    newest = t.toolkit[-1][0]
    if want > newest:
        return (
            f"CUDA {want[0]}.{want[1]} is newer than gpufleet's driver table "
            f"(up to {newest[0]}.{newest[1]})"
        )
    if _driver(driver) is None:
        return "no NVIDIA driver version collected" if not driver else (
            f"driver {driver!r} is not an NVIDIA driver version"
        )
    top = cuda_max(driver, t)
    if top is None:
        return f"driver {driver} serves no CUDA release in gpufleet's table"
    if parse_cuda(top) < want:
        return f"driver {driver} serves CUDA up to {top}"
    return None
