"""Access to the real captured tool output the lab serves (package data).

The captures live once, in ``tests/fixtures/captured`` (with a PROVENANCE.md per directory);
``src/gpufleet/lab/data/captured`` is a symbolic link to it, which the wheel build follows, so
an installed ``gpufleet`` carries them as package data under ``gpufleet/lab/data/captured``.
The simulated lab serves these captures as a host's tool output, and tests parse them. The
nvidia_gpu_exporter capture bundles (``nvidia-smi-csv/*.txt``) hold many ``nvidia-smi`` runs
in one file, each framed by a banner::

    ################################################################################
    # idle :: query (-q)
    # $ nvidia-smi -q
    ################################################################################
    <output, verbatim>

:func:`load_exporter_bundle` splits such a file into ``{title: output}``.
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

from gpufleet.errors import ParseError

__all__ = [
    "bundle_output",
    "captures_dir",
    "command_bundle",
    "load_exporter_bundle",
    "split_exporter_bundle",
    "tool_output",
]

_BANNER = "#" * 80
_ENV = "GPUFLEET_CAPTURES"


def captures_dir() -> Path:
    """The captured-fixtures directory: ``$GPUFLEET_CAPTURES`` or the package data.

    The package data is ``gpufleet/lab/data/captured`` next to this file: in a source checkout
    that link resolves to ``tests/fixtures/captured``, in an installed wheel it is a real
    directory.
    """
    override = os.environ.get(_ENV)
    if override:
        return Path(override)
    return (Path(__file__).resolve().parent / "data" / "captured").resolve()


def split_exporter_bundle(text: str, source: str = "<bundle>") -> dict[str, str]:
    """Split the text of a capture bundle into sections keyed by title (see module doc).

    The title is the first ``# `` line inside a banner (``"idle :: query (-q)"``); further
    ``# $ command`` lines are framing, not content. The content is every line up to the next
    banner, verbatim, except that the blank lines separating sections are dropped; a
    non-empty section ends with one newline. The free-form preamble is keyed by its title
    (``"nvidia_gpu_exporter GPU capture"``). Text outside any section, a banner without a
    title, or a repeated title raises :class:`ParseError`.
    """
    sections: dict[str, str] = {}
    title: str | None = None
    body: list[str] = []
    in_header = False
    header_line = 0

    def close() -> None:
        if title is None:
            return
        while body and not body[-1].strip():
            body.pop()
        sections[title] = "".join(line + "\n" for line in body)

    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the file's final newline does not start another line
    for number, line in enumerate(lines, start=1):
        stripped = line.rstrip("\r")
        if in_header:
            if stripped == _BANNER:
                if title is None:
                    raise ParseError(source, "section banner without a title", line=header_line)
                in_header = False
            elif stripped.startswith("#"):
                if title is None:
                    title = stripped.lstrip("#").strip()
                    if title in sections:
                        raise ParseError(source, f"duplicate section {title!r}", line=number)
            else:
                raise ParseError(source, "unterminated section banner", line=number)
        elif stripped == _BANNER:
            close()
            title, body, in_header, header_line = None, [], True, number
        elif title is None:
            if stripped.strip():
                raise ParseError(source, "text before the first section banner", line=number)
        else:
            body.append(line)
    if in_header:
        raise ParseError(source, "file ends inside a section banner", line=header_line)
    close()
    return sections


def load_exporter_bundle(path: Path) -> dict[str, str]:
    """Read an nvidia_gpu_exporter capture bundle and split it into ``{title: output}``."""
    return split_exporter_bundle(path.read_text(encoding="utf-8"), source=str(path))


# Ascend captures (issue 15): the gpustack ones end with the Huawei documentation URL they
# were copied from, the ms-swift ones start with the shell prompt line, the mind-cluster ones
# are bundles (each command echoed, then its output). These cut exactly that away.
_ECHOED = re.compile(r"^(/?usr/\S+|cat |lspci|pip |npu-smi |hccn_tool |Datetime:)")


@cache
def read_capture(rel: str) -> str:
    """A capture file's text, by its path under :func:`captures_dir` (read once)."""
    return (captures_dir() / rel).read_text(encoding="utf-8")


def tool_output(path: Path) -> str:
    """An Ascend capture without a leading shell prompt and a trailing doc URL line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if lines and "# " in lines[0] and "npu-smi" in lines[0]:
        lines = lines[1:]
    while lines and lines[-1].startswith("https://support.huawei.com/"):
        lines = lines[:-1]
    return "\n".join(lines) + "\n"


def command_bundle(path: Path) -> list[tuple[str, str]]:
    """A mind-cluster bundle as (echoed command, its output) pairs, in file order."""
    sections: list[tuple[str, list[str]]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if _ECHOED.match(line):
            sections.append((line.strip(), []))
        elif sections:
            sections[-1][1].append(line)
    return [(cmd, "\n".join(body).strip("\n") + "\n") for cmd, body in sections]


def bundle_output(path: Path, command_suffix: str) -> str:
    """The output of the first echoed command ending with ``command_suffix``."""
    for cmd, out in command_bundle(path):
        if cmd.endswith(command_suffix):
            return out
    raise ParseError(str(path), f"no command ending with {command_suffix!r}")
