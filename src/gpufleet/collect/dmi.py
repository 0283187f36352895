"""``/sys/class/dmi/id``: the machine's SMBIOS identity as the kernel exports it.

The collection script prints one ``name=value`` line per file it could read (shell builtins, no
process). ``product_serial``, ``product_uuid`` and ``board_serial`` are mode 0400 root: read as
an ordinary user they are simply absent from the output, which is "not collected" (``None``),
never a problem for the host. Pure: text in, :class:`~gpufleet.domain.facts.DmiIdentity` out.
"""

from __future__ import annotations

from typing import Any

from gpufleet.collect.fit import build
from gpufleet.domain.facts import DmiIdentity

__all__ = ["DMI_FILES", "parse_dmi"]

#: The files read, in output order (``/sys/class/dmi/id/<name>``).
DMI_FILES: tuple[str, ...] = (
    "sys_vendor",
    "product_name",
    "product_serial",
    "product_uuid",
    "board_serial",
    "bios_version",
)

_FIELDS = {
    "sys_vendor": "vendor",
    "product_name": "product",
    "product_serial": "serial",
    "product_uuid": "uuid",
    "board_serial": "board_serial",
    "bios_version": "bios_version",
}


def parse_dmi(text: str, source: str = "/sys/class/dmi/id") -> DmiIdentity:
    """The ``name=value`` lines of the ``dmi`` section. An empty value, a file that was not
    printed (unreadable: not root) and an unknown name are all "not collected" (``None``).

    Two lines without ``=`` (``vendor`` then ``product``) are the pre-identity layout of this
    section (older lab captures): read as vendor and product. A value longer than its field
    allows raises a :class:`~gpufleet.errors.ParseError` naming ``source`` and the field."""
    values: dict[str, Any] = {}
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if lines and not any("=" in ln for ln in lines):
        for key, value in zip(("vendor", "product"), lines, strict=False):
            values[key] = value
    else:
        for line in lines:
            name, sep, value = line.partition("=")
            field = _FIELDS.get(name.strip())
            if sep and field and value.strip():
                values[field] = value.strip()
    return build(DmiIdentity, source, **values)
