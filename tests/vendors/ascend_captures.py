"""Helpers to read the Ascend captures (tests/fixtures/captured/ascend) as tool output.

Some captures carry text that is not the tool's output: the gpustack ones end with the
Huawei documentation URL they were copied from, the ms-swift ones start with the shell
prompt line, and the mind-cluster ones are bundles (each command echoed, then its output).
These helpers cut exactly that away, nothing else.
"""

from __future__ import annotations

import re
from pathlib import Path

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "ascend"

_COMMAND = re.compile(r"^(/?usr/\S+|cat |lspci|pip |npu-smi |hccn_tool |Datetime:)")


def tool_output(name: str) -> str:
    """The capture without a leading shell prompt and without a trailing doc URL line."""
    lines = (FIX / name).read_text().splitlines()
    if lines and "# " in lines[0] and ("npu-smi" in lines[0]):
        lines = lines[1:]  # "(valle) root@valle:~/src# npu-smi info"
    while lines and lines[-1].startswith("https://support.huawei.com/"):
        lines = lines[:-1]
    return "\n".join(lines) + "\n"


def bundle_sections(name: str) -> list[tuple[str, str]]:
    """A mind-cluster bundle as (echoed command, its output) pairs, in file order."""
    sections: list[tuple[str, list[str]]] = []
    for line in (FIX / name).read_text().splitlines():
        if _COMMAND.match(line):
            sections.append((line.strip(), []))
        elif sections:
            sections[-1][1].append(line)
    return [(cmd, "\n".join(body).strip("\n") + "\n") for cmd, body in sections]


def section(name: str, command_suffix: str, nth: int = 0) -> str:
    """The output of the ``nth`` echoed command ending with ``command_suffix``."""
    found = [out for cmd, out in bundle_sections(name) if cmd.endswith(command_suffix)]
    return found[nth]
