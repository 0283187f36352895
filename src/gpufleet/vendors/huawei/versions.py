"""Parsers for the Ascend software version files (pure).

``/usr/local/Ascend/driver/version.info``, ``/usr/local/Ascend/firmware/version.info`` and
the CANN ``ascend_toolkit_install.info`` / ``ascend_nnae_install.info`` are ``key=value``
lines; the version is ``Version=`` (driver, firmware) or ``version=`` (CANN packages).
"""

from __future__ import annotations

from gpufleet.errors import ParseError


def parse_version_info(text: str, source: str) -> dict[str, str]:
    """``key=value`` lines -> dict (keys as printed). Blank lines are skipped."""
    out: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip() or " " in key.strip():
            raise ParseError(source, f"not a 'key=value' line: {line[:80]!r}", line=lineno)
        out[key.strip()] = value.strip()
    if not out:
        raise ParseError(source, "empty version file")
    return out


def package_version(text: str, source: str) -> str:
    """The package's version (``Version=`` or ``version=``) from a version/install file."""
    values = parse_version_info(text, source)
    for key in ("Version", "version"):
        if values.get(key):
            return values[key]
    raise ParseError(source, "no Version= line")
