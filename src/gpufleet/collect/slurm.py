"""A small Slurm client: ``sinfo --json`` (node states, GRES in use), ``scontrol update``
(drain, resume), ``scontrol`` reservations, ``squeue`` (jobs on a node), ``sacct --json``
(jobs). Subprocess calls with a timeout; a command that fails or is missing
raises :class:`~gpufleet.errors.LocalIOError` naming it and its error, never returns partial
data. The parser (:func:`parse_sinfo_json`) is pure.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from gpufleet.collect.slurm_state import NodeGres, NodeJob, parse_node_gres, parse_squeue
from gpufleet.domain.slurm import SlurmNode
from gpufleet.domain.slurm_reservations import Reservation, parse_reservations
from gpufleet.errors import LocalIOError, ParseError


def parse_sinfo_json(text: str, source: str = "sinfo --json") -> list[SlurmNode]:
    """Nodes of ``sinfo --json`` (22.05: ``state`` a string and ``state_flags``; 23.02+:
    ``state`` a list whose first item is the base state and the rest flags). One entry per
    node (sinfo lists a node once per partition)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"not JSON: {exc.msg}"
        raise ParseError(source, msg, line=exc.lineno, column=exc.colno) from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit number, nesting past the stack
        raise ParseError(source, f"not JSON that can be read: {str(exc)[:80]}") from None
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(nodes, list):
        raise ParseError(source, "no 'nodes' list: not sinfo --json output")
    out: dict[str, SlurmNode] = {}
    for n, node in enumerate(nodes):
        if not isinstance(node, dict) or not isinstance(node.get("name"), str):
            raise ParseError(source, f"node #{n}: no name")
        state: Any = node.get("state")
        state_flags = node.get("state_flags") or []
        if not isinstance(state_flags, list):
            raise ParseError(source, f"node {node['name'][:64]!a}: state_flags is not a list")
        flags = {str(f).upper() for f in state_flags}
        if isinstance(state, list):
            words = [str(s).upper() for s in state]
            base = next((w for w in words if w in _BASE_STATES), words[0] if words else "")
            flags |= {w for w in words if w != base}
            state = base
        if not isinstance(state, str) or not state:
            raise ParseError(source, f"node {node['name']}: no state")
        reason = node.get("reason")
        if isinstance(reason, dict):  # newer shapes nest it
            reason = reason.get("description")
        out[node["name"]] = SlurmNode(
            node["name"], state.lower(), frozenset(flags),
            reason if isinstance(reason, str) and reason else None,
        )
    return list(out.values())


_BASE_STATES = frozenset(
    {"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN", "INVALID", "FAIL"}
)


@dataclass
class SlurmClient:
    """Runs Slurm's commands; ``conf`` is passed as ``SLURM_CONF`` when set, ``bin_dir``
    is where the commands are (PATH when None)."""

    conf: Path | None = None
    bin_dir: Path | None = None
    timeout: float = 30.0

    def _run(self, args: Sequence[str]) -> str:
        cmd = [str(self.bin_dir / args[0]) if self.bin_dir else args[0], *args[1:]]
        env = dict(os.environ)
        if self.conf is not None:
            env["SLURM_CONF"] = str(self.conf)
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True,
                               timeout=self.timeout, check=False)
        except FileNotFoundError:
            raise LocalIOError(path=cmd[0], cause="not found (is Slurm installed?)") from None
        except subprocess.TimeoutExpired:
            raise LocalIOError(path=" ".join(cmd[:2]),
                               cause=f"no answer within {self.timeout:g}s") from None
        if r.returncode != 0:
            err = " ".join(r.stderr.split())[-500:] or f"exit {r.returncode}"
            raise LocalIOError(path=" ".join(cmd[:3]), cause=err)
        return r.stdout

    def nodes(self) -> list[SlurmNode]:
        return parse_sinfo_json(self._run(["sinfo", "--json"]))

    def drain(self, node: str, reason: str) -> None:
        self._run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"])

    def resume(self, node: str) -> None:
        self._run(["scontrol", "update", f"nodename={node}", "state=resume"])

    def sacct_json(self, since: datetime | None = None) -> str:
        args = ["sacct", "--json", "-a"]
        if since is not None:
            # sacct reads a time without a zone as local time
            args += ["-S", since.astimezone().strftime("%Y-%m-%dT%H:%M:%S")]
        return self._run(args)

    def node_gres(self) -> list[NodeGres]:
        """Per node and partition: GPUs configured and in use (``sinfo --json``)."""
        return parse_node_gres(self._run(["sinfo", "--json"]))

    def reservations(self) -> list[Reservation]:
        return parse_reservations(self._run(["scontrol", "show", "reservation", "-o"]))

    def create_reservation(self, name: str, fields: Mapping[str, str]) -> None:
        self._run(["scontrol", "create", "reservation", f"ReservationName={name}",
                   *(f"{k}={v}" for k, v in fields.items())])

    def update_reservation(self, name: str, fields: Mapping[str, str]) -> None:
        self._run(["scontrol", "update", f"ReservationName={name}",
                   *(f"{k}={v}" for k, v in fields.items())])

    def delete_reservation(self, name: str) -> None:
        self._run(["scontrol", "delete", f"ReservationName={name}"])

    def jobs_on(self, node: str) -> list[NodeJob]:
        """Jobs running, completing or suspended on ``node`` (``squeue -w``)."""
        return parse_squeue(self._run(["squeue", "-h", "-t", "R,CG,S", "-w", node,
                                       "-o", SQUEUE_FORMAT]))


#: ``squeue -o`` of :meth:`SlurmClient.jobs_on`: id, user, state, end time, nodes.
SQUEUE_FORMAT = "%i|%u|%T|%e|%N"
