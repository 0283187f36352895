"""Reasons as a code and parameters (issue 29 item 8), rendered in English as before.

A check or a validation step says *why* with a :class:`Reason`: a stable ``code`` (a key of
:data:`TEMPLATES`) and its ``params`` (numbers, names, versions). Its English text
(:attr:`Reason.text`) is what the stored ``message``/``reason`` strings and the JSON hold,
word for word as before; the code and params are stored beside it (a check result's
``code`` and ``params``) for machines, and a person reading Chinese gets the template of
the code translated (:func:`localize` with the caller's ``_``).

Stored text from before the codes, or from a row that only kept the string (a host's
``status_reason``), is read back by :func:`parse`: every template is also a pattern, so
``"nccl: no NCCL all-reduce result (required)"`` is the ``check`` prefix and the code
``active.missing_required`` with ``what="NCCL all-reduce"``. A piece no template matches
stays as it is (English): never a guess.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any


def N_(message: str) -> str:
    """Marks a template for extraction (``make messages``); translated where it is shown."""
    return message


#: code -> English template (``str.format`` fields; ``{x:g}`` formats a number).
TEMPLATES: dict[str, str] = {
    # --- active tests (domain/checks/active.py)
    "active.missing": N_("no {what} result"),
    "active.missing_since": N_("no {what} result since {since}"),
    "active.missing_required": N_("no {what} result (required)"),
    "active.missing_since_required": N_("no {what} result since {since} (required)"),
    "active.dcgm_failed": N_("DCGM diag failed"),
    "active.dcgm_failed_on": N_("DCGM diag failed on GPU {gpus}"),
    "active.dcgm_failed_error": N_("DCGM diag failed ({error})"),
    "active.dcgm_failed_on_error": N_("DCGM diag failed on GPU {gpus} ({error})"),
    "active.dcgm_passed": N_("DCGM diag passed"),
    "active.burn_instead": N_("gpu-burn OK on all GPUs (no DCGM diag)"),
    "active.dcgm_shallow": N_("DCGM diag ran at level {level}, level {min_level} required"),
    "active.dcgm_unknown_level": N_(
        "DCGM diag ran at an unknown level, level {min_level} required"
    ),
    "active.nccl_no_busbw": N_("NCCL test reported no bus bandwidth"),
    "active.nccl_wrong": N_("NCCL test reported {wrong} wrong values (data corruption)"),
    "active.nccl_below": N_("NCCL busbw {busbw:g} GB/s below {floor:g} GB/s"),
    "active.nccl_no_floor": N_(
        "no NCCL bus-bandwidth floor known for {product} (set min_busbw_gbps in the profile)"
    ),
    "active.nccl_below_model": N_(
        "NCCL all-reduce peak busbw {peak:g} GB/s below the {model} floor {floor:g} GB/s"
    ),
    "active.nccl_model_ok": N_("NCCL all-reduce peak busbw {peak:g} GB/s (floor {floor:g} GB/s)"),
    "active.nccl_ok": N_("NCCL busbw {busbw:g} GB/s"),
    "active.burn_failed": N_("gpu-burn failed"),
    "active.burn_failed_on": N_("gpu-burn failed on GPU {gpus}"),
    "active.burn_ok": N_("gpu-burn OK on all GPUs"),
    # --- GPU inventory (domain/checks/gpu.py, accelerator.py)
    "gpu.count_bus_missing": N_(
        "driver sees {n} of {bus} NVIDIA GPUs on the PCI bus (missing from the driver: {missing})"
    ),
    "gpu.count_bus": N_("driver sees {n} of {bus} NVIDIA GPUs on the PCI bus"),
    "gpu.count_expected": N_("driver sees {n} GPUs, expected {expected}"),
    "gpu.count_ok_bus": N_("{n} GPUs (driver and PCI bus agree)"),
    "gpu.count_ok": N_("{n} GPUs"),
    "accel.count_bus_missing": N_(
        "{vendor} tool sees {n} of {bus} accelerators on the PCI bus"
        " (missing from the tool: {missing})"
    ),
    "accel.count_bus": N_("{vendor} tool sees {n} of {bus} accelerators on the PCI bus"),
    "accel.count_expected": N_("{vendor} tool sees {n} accelerators, expected {expected}"),
    # --- Xid (domain/checks/xid.py)
    "xid.fatal_on": N_("fatal Xid {code} ({mnemonic}, {action}) x{count} on {where}"),
    "xid.fatal": N_("fatal Xid {code} ({mnemonic}, {action}) x{count}"),
    "xid.none": N_("no Xid in the last {hours}h"),
    # --- fabric (domain/checks/fabric.py, nvl_fabric.py)
    "fabric.ib_ports_down": N_(
        "{up} of {total} IB/RoCE ports up at >= {speed} Gb/s, need {need}; down: {down}"
    ),
    "fabric.not_nvl_required": N_("not in a multi-node NVLink domain (required)"),
    "fabric.not_nvl": N_("not in a multi-node NVLink domain"),
    # --- drift (domain/checks/drift.py), one pin off the baseline
    "drift.one": N_("drift from baseline {baseline}: {field} {actual}, expected {expected}"),
    "drift.more": N_("{field} {actual}, expected {expected}"),
    "drift.no_baseline": N_("no baseline assigned"),
    # --- memory (domain/checks/memory.py)
    "memory.remap_pending": N_("row remapping pending on GPU {gpus}: needs GPU reset"),
    # --- other vendors' accelerators (domain/checks/accelerator.py)
    "accel.alarm": N_("{vendor} #{index} ({pci}) alarm [{codes}]: {detail}"),
    # --- validation itself (service/hosts/validate.py)
    "validate.not_in_state": N_("not validated in state {state}"),
    "validate.not_collected_here": N_(
        "not collected in this run (another worker is collecting it)"
    ),
    "validate.not_collected": N_("not collected: {outcome} ({error})"),
    "validate.no_facts": N_("no facts collected yet"),
    "validate.no_profiles": N_("no profiles configured"),
    # --- collection and active-test runs (what a run could not do, per host)
    "run.unreachable": N_("unreachable: {error}"),
    "run.timeout": N_("timeout: {error}"),
    "run.auth_failed": N_("auth failed: {error}"),
    "run.host_key_changed": N_("host key changed: {error}"),
    "run.bad_output": N_("bad output: {error}"),
    "run.held_elsewhere": N_(
        "skipped: another worker holds this host (collecting or testing it)"
    ),
    "collect.refused": N_("connect to {target}: Connection refused"),
    "collect.no_route": N_("connect to {target}: No route to host"),
    "collect.malformed_xml": N_("{source}: malformed XML: {detail}"),
    # --- rack incidents (service/hosts/rack_fold.py): the alarm's message, a tray's restriction
    "rack.incident": N_(
        "rack incident: NVLink domain {domain} (rack {rack}): rack-scoped fabric findings on "
        "{n} of {trays} trays ({hosts}); its hosts are restricted (out of NVLink-domain "
        "placement)"
    ),
    "rack.drain": N_(
        "recommended: drain the rack (maintenance of every tray, approve by running the "
        "command in the alarm's data)"
    ),
    "rack.restricted": N_("rack incident (alarm {alarm})"),
}

#: Fragments a parameter may hold (``what``, ``since``), translated as a whole.
FRAGMENTS: dict[str, str] = {
    "what.dcgm_level_or_burn": N_("DCGM diag at level {level} or deeper or gpu-burn"),
    "what.dcgm_level": N_("DCGM diag at level {level} or deeper"),
    "what.dcgm_or_burn": N_("DCGM diag or gpu-burn"),
    "what.dcgm": N_("DCGM diag"),
    "what.nccl": N_("NCCL all-reduce"),
    "what.burn": N_("gpu-burn"),
    "since.change": N_("the {change} on {day}"),
}

#: Parameters whose value is a word or a :data:`FRAGMENTS` text (translated), not data.
WORD_PARAMS = frozenset({"what", "since", "change", "outcome", "state", "actual", "error"})

#: The words of :data:`WORD_PARAMS` values, marked for extraction.
WORDS = (
    N_("driver change"), N_("firmware change"), N_("change"), N_("unset"),
    N_("kernel change"), N_("hardware change"),
)

Param = str | int | float


class _Formatter(string.Formatter):
    """``str.format`` that shows a parsed-back value (text) as it is, whatever its spec."""

    def format_field(self, value: Any, format_spec: str) -> Any:
        if isinstance(value, str):
            return value
        return super().format_field(value, format_spec)


_FMT = _Formatter()


@dataclass(frozen=True, slots=True)
class Reason:
    """Why, as a code of :data:`TEMPLATES` (or :data:`FRAGMENTS`) and its parameters; a
    parameter may itself be a :class:`Reason` (a fragment)."""

    code: str
    params: Mapping[str, Param | Reason] = field(default_factory=dict)

    def render(self, tr: Callable[[str], str] | None = None) -> str:
        """The text, its template translated by ``tr`` (None: English)."""
        template = TEMPLATES.get(self.code) or FRAGMENTS[self.code]
        values: dict[str, Any] = {}
        for k, v in self.params.items():
            if isinstance(v, Reason):
                values[k] = v.render(tr)
            elif tr is not None and k in WORD_PARAMS and isinstance(v, str):
                values[k] = tr(v)
            else:
                values[k] = v
        return _FMT.format(tr(template) if tr else template, **values)

    @property
    def text(self) -> str:
        """The English text (what is stored and in JSON)."""
        return self.render()

    def __str__(self) -> str:
        return self.text

    def as_json(self) -> dict[str, Any]:
        """``{"code": ..., "params": {...}}`` (a fragment as one more such object)."""
        return {
            "code": self.code,
            "params": {
                k: v.as_json() if isinstance(v, Reason) else v for k, v in self.params.items()
            },
        }


def reason(code: str, **params: Param | Reason) -> Reason:
    """A :class:`Reason`; raises KeyError for a code that is not in the registry."""
    if code not in TEMPLATES and code not in FRAGMENTS:
        raise KeyError(f"unknown reason code {code!r}")
    return Reason(code, params)


# ---------------------------------------------------------------------------- parsing back

_FIELD = re.compile(r"\{(\w+)(?::[^}]*)?\}")
_PARAM = r"(?:(?!; ).)+?"


def _pattern(template: str) -> str:
    out, pos = [], 0
    for m in _FIELD.finditer(template):
        out.append(re.escape(template[pos : m.start()]))
        out.append(f"(?P<{m.group(1)}>{_PARAM})")
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return "".join(out)


def _literal(template: str) -> int:
    return len(_FIELD.sub("", template))


@cache
def _compiled(kind: str) -> list[tuple[str, re.Pattern[str]]]:
    table = TEMPLATES if kind == "t" else FRAGMENTS
    # The most literal text first: "failed on GPU {gpus} ({error})" before "on GPU {gpus}".
    codes = sorted(table, key=lambda c: -_literal(table[c]))
    return [(c, re.compile(_pattern(table[c]) + r"\Z", re.DOTALL)) for c in codes]


def parse(text: str, *, fragment: bool = False) -> Reason | None:
    """The :class:`Reason` whose English text is ``text`` exactly (None: no template)."""
    for code, pattern in _compiled("f" if fragment else "t"):
        m = pattern.match(text)
        if m is not None:
            params: dict[str, Param | Reason] = {}
            for k, v in m.groupdict().items():
                sub = (parse(v, fragment=True) or parse(v)) if k in WORD_PARAMS else None
                params[k] = sub if sub is not None else v
            return Reason(code, params)
    return None


_PIECE = re.compile(
    r"(?:not (?P<profile>[\w.-]+): )?(?:(?P<check>[a-z][a-z0-9_]*(?:\[[\w.-]+\])?): )?"
)


def localize(text: str | None, tr: Callable[[str], str]) -> str:
    """A stored reason text (``"check: message; check: message"``, ``"not PROFILE: ..."``)
    with every piece a template matches translated by ``tr``; the rest as it is."""
    if not text:
        return text or ""
    pieces = text.split("; ")
    out: list[str] = []
    i = 0
    while i < len(pieces):
        done = False
        # A message may hold "; " itself (ib_ports' "...; down: ..."): the fewest pieces first.
        for j in range(i + 1, min(len(pieces), i + 3) + 1):
            rendered = _piece("; ".join(pieces[i:j]), tr)
            if rendered is not None:
                out.append(rendered)
                i, done = j, True
                break
        if not done:
            out.append(pieces[i])
            i += 1
    return tr(N_("; ")).join(out)


def _piece(piece: str, tr: Callable[[str], str]) -> str | None:
    head = _PIECE.match(piece)
    assert head is not None  # every group is optional
    check = head.group("check")
    # "unreachable: ..." is a whole message, not a check named "unreachable": whole first.
    found = parse(piece[head.start("check") :]) if check else None
    if found is not None and not TEMPLATES[found.code].startswith("{"):
        check = None
    else:
        found = parse(piece[head.end() :])
    if found is None:
        return None
    message = found.render(tr)
    if check:
        message = tr(N_("{check}: {message}")).format(check=check, message=message)
    if head.group("profile"):
        message = tr(N_("not {profile}: {why}")).format(profile=head.group("profile"), why=message)
    return message
