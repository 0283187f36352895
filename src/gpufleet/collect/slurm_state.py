"""Parsers for what Slurm says is in use: GPUs configured and allocated per node and partition
(``sinfo --json``: ``gres``, ``gres_used``, ``partitions``), and the jobs on a node
(``squeue -h -o '%i|%u|%T|%e|%N'``). Pure; an unreadable value is a ParseError naming the
command and the node or line, never a guessed 0.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from gpufleet.errors import ParseError

_GRES = re.compile(r"^([A-Za-z0-9_]+)(?::([^:()]+))?:(\d+)(?:\(([^)]*)\))?$")


def _split_gres(text: str) -> list[str]:
    """``gpu:h100:3(IDX:0,2-3),npu:1`` -> entries (commas inside parentheses kept)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def gres_gpus(text: str | None, where: str, source: str = "sinfo --json") -> tuple[int, str]:
    """(GPUs, type) of a GRES string (``gpu:h100:8``, ``gpu:h100:3(IDX:0-2)``, ``gpu:2``);
    (0, "") for none (``""``, ``(null)``, ``N/A``)."""
    if text is None or text.strip() in ("", "(null)", "N/A"):
        return 0, ""
    total, kind = 0, ""
    for entry in _split_gres(text):
        m = _GRES.match(entry)
        if m is None:
            raise ParseError(source, f"{where}: GRES {entry[:60]!a} cannot be read")
        name, typ, count, _ = m.groups()
        if name == "gpu":
            total += int(count)
            kind = kind or (typ or "")
    return total, kind


@dataclass(frozen=True)
class NodeGres:
    """One node as the scheduler counts its GPUs."""

    name: str
    partitions: tuple[str, ...]
    gpu_type: str
    gpus: int  # configured (``gres``)
    used: int  # allocated to jobs (``gres_used``)
    state: str  # idle, mixed, allocated, down...
    flags: frozenset[str]

    @property
    def schedulable(self) -> bool:
        """New work can land here: not drained, down, failing or reserved."""
        bad = {"DRAIN", "DRAINING", "DRAINED", "FAIL", "NOT_RESPONDING", "RESERVED",
               "MAINTENANCE", "POWERED_DOWN", "POWER_DOWN", "REBOOT_REQUESTED"}
        return self.state in ("idle", "mixed", "allocated") and not (self.flags & bad)

    @property
    def free(self) -> int:
        return max(self.gpus - self.used, 0) if self.schedulable else 0


def parse_node_gres(text: str, source: str = "sinfo --json") -> list[NodeGres]:
    """Per node of ``sinfo --json`` its partitions and GPUs configured and in use (22.05:
    ``state`` a string plus ``state_flags``; newer: ``state`` a list)."""
    try:
        doc: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(source, f"not JSON: {exc.msg}", line=exc.lineno,
                         column=exc.colno) from None
    except (ValueError, RecursionError) as exc:
        raise ParseError(source, f"not JSON that can be read: {str(exc)[:80]}") from None
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(nodes, list):
        raise ParseError(source, "no 'nodes' list: not sinfo --json output")
    out: dict[str, NodeGres] = {}
    for n, node in enumerate(nodes):
        if not isinstance(node, dict) or not isinstance(node.get("name"), str):
            raise ParseError(source, f"node #{n}: no name")
        name = node["name"]
        where = f"node {name[:64]!a}"
        if "gres" not in node or "gres_used" not in node:
            raise ParseError(source, f"{where}: no gres/gres_used (GPUs in use unknown)")
        for key in ("gres", "gres_used"):
            if node[key] is not None and not isinstance(node[key], str):
                raise ParseError(source, f"{where}: {key} is not a string")
        gpus, kind = gres_gpus(node["gres"], where, source)
        used, _ = gres_gpus(node["gres_used"], where, source)
        parts = node.get("partitions") or []
        state_flags = node.get("state_flags") or []
        if not isinstance(parts, list) or not isinstance(state_flags, list):
            raise ParseError(source, f"{where}: partitions or state_flags is not a list")
        state: Any = node.get("state")
        flags = {str(f).upper() for f in state_flags}
        if isinstance(state, list):
            words = [str(s).upper() for s in state]
            state = words[0] if words else ""
            flags |= set(words[1:])
        if not isinstance(state, str) or not state:
            raise ParseError(source, f"{where}: no state")
        out[name] = NodeGres(name, tuple(str(p) for p in parts), kind, gpus, used,
                             state.lower(), frozenset(flags))
    return list(out.values())


@dataclass(frozen=True)
class NodeJob:
    """A job on a node (``squeue``): what keeps a drain from being done."""

    job_id: str
    user: str
    state: str
    end: str  # Slurm's expected end time as it prints it (local), or NONE/Unknown

    def __str__(self) -> str:
        return f"job {self.job_id} ({self.user}, {self.state.lower()}, ends {self.end})"


def parse_squeue(text: str, source: str = "squeue") -> list[NodeJob]:
    """Jobs of ``squeue -h -o '%i|%u|%T|%e|%N'`` (empty output: none)."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cols = line.split("|")
        if len(cols) != 5 or not cols[0].strip():
            raise ParseError(source, f"expected 5 '|' columns (id|user|state|end|nodes), got "
                             f"{len(cols)}", line=n)
        out.append(NodeJob(cols[0].strip(), cols[1].strip(), cols[2].strip(), cols[3].strip()))
    return out
