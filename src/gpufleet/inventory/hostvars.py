"""Host variables: the ``gpufleet_*`` variables gpufleet reads, their accepted values and
ranges, and the conversion of their string values to typed expected-spec values."""

from __future__ import annotations

import json
import math
import types
from typing import Any, Union, get_args, get_origin

from gpufleet.collect.transport import get_transport_factory, known_transports
from gpufleet.domain.spec import ExpectedSpec

_IMPLICIT_GROUPS = ("all", "ungrouped")
_SPEC_PREFIX = "gpufleet_"
# Connection vars in the order ansible-core's ssh plugin resolves them: when both are set, the
# ``ansible_ssh_*`` spelling wins (it is later in the plugin's ``vars`` list).
_HOST_KEYS = ("ansible_ssh_host", "ansible_host")
_PORT_KEYS = ("ansible_ssh_port", "ansible_port")
_USER_KEYS = ("ansible_ssh_user", "ansible_user")
_KEY_FILE_KEYS = ("ansible_ssh_private_key_file", "ansible_private_key_file")
_TRUE = frozenset({"true", "yes", "on", "1", "y"})
_FALSE = frozenset({"false", "no", "off", "0", "n"})

#: Most hosts one inventory (or one host range) may name; a bigger range is refused before
#: it is expanded.
MAX_HOSTS = 100_000
#: Most YAML nodes an inventory may expand to with its aliases resolved (alias bombs).
MAX_YAML_NODES = 1_000_000
#: ``gpufleet_*`` variables that are not expected-spec fields.
_OTHER_GPUFLEET_VARS = (
    "gpufleet_pool",
    "gpufleet_baseline",
    "gpufleet_transport",
    "gpufleet_role",
)
#: The host's BMC (``gpufleet bmc``): address, login, password (sealed like every secret) or
#: a file holding it, system id, CA bundle, insecure, and the serial/UUID the inventory
#: declares for the machine (cross-checked against what the BMC says).
BMC_VARS = (
    "gpufleet_bmc_address",
    "gpufleet_bmc_username",
    "gpufleet_bmc_password",
    "gpufleet_bmc_password_file",
    "gpufleet_bmc_system",
    "gpufleet_bmc_ca_bundle",
    "gpufleet_bmc_insecure",
    "gpufleet_bmc_serial",
    "gpufleet_bmc_uuid",
)
_FABRICS = ("ib", "roce", "none")
_MAX_TEXT = 128
# Accepted ranges of the numeric expected-spec fields: (lowest, highest), both included.
_SPEC_RANGES: dict[str, tuple[float, float]] = {
    "gpu_count": (0, 64),
    "gpu_memory_mib": (1, 4 * 1024 * 1024),
    "nvlink_per_gpu": (0, 64),
    "ib_ports": (0, 64),
    "ib_rate_gbps": (1, 3200),
    "pcie_gen": (1, 7),
    "pcie_width": (1, 32),
}
_PCIE_WIDTHS = (1, 2, 4, 8, 16, 32)


def known_gpufleet_vars() -> frozenset[str]:
    """Every ``gpufleet_*`` variable gpufleet reads: the expected-spec fields, pool, baseline,
    transport, and the variables each registered transport declares (``gpufleet_lab_dir``)."""
    names = {_SPEC_PREFIX + f for f in ExpectedSpec.model_fields} | set(_OTHER_GPUFLEET_VARS)
    names |= set(BMC_VARS)
    for transport in known_transports():
        names |= set(get_transport_factory(transport).host_vars)
    return frozenset(names)


def _first(values: dict[str, str], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        if values.get(key):
            return values[key]
    return None


def _scalar_type(annotation: Any) -> type:
    if get_origin(annotation) in (Union, types.UnionType):
        return next(a for a in get_args(annotation) if a is not type(None))  # type: ignore[no-any-return]
    return annotation  # type: ignore[no-any-return]


def _check_spec_value(fname: str, value: int | float | bool | str) -> int | float | bool | str:
    """Range-check one converted expected-spec value; ValueError says what is accepted."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    if fname in _SPEC_RANGES and not isinstance(value, bool) and isinstance(value, (int, float)):
        low, high = _SPEC_RANGES[fname]
        if not low <= value <= high:
            raise ValueError(f"out of range (expected {low:g} to {high:g})")
        if fname == "pcie_width" and value not in _PCIE_WIDTHS:
            raise ValueError(f"expected one of {', '.join(map(str, _PCIE_WIDTHS))}")
    if fname == "fabric" and value not in _FABRICS:
        raise ValueError(f"unknown fabric (expected {', '.join(_FABRICS)})")
    if isinstance(value, str):
        if len(value) > _MAX_TEXT:
            raise ValueError(f"longer than {_MAX_TEXT} characters")
        if any(not ch.isprintable() for ch in value):
            raise ValueError("contains control characters")
    return value


def _convert(raw: str, kind: type) -> int | float | bool | str:
    if kind is bool:
        low = raw.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError("expected a boolean (true/false)")
    if kind is int:
        try:
            return int(raw)
        except ValueError:
            raise ValueError("expected an integer") from None
    if kind is float:
        try:
            return float(raw)
        except ValueError:
            raise ValueError("expected a number") from None
    return raw


def _var_text(value: Any) -> str:
    """Render a parsed value the way it reads (``8``, ``True``, ``H800``); None -> ''."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, dict, tuple)):
        return json.dumps(value, default=str)
    return str(value)
