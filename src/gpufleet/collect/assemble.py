"""Turn the sections of one collection into :class:`HostFacts`, driven by the registry.

Which sections exist, their parsers, the fields they fill and their failure policy all come
from :data:`gpufleet.collect.sections.REGISTRY`; this module only applies them.

The GPU report is essential: if ``nvidia-smi`` answered (rc 0) but its output cannot be
parsed, the whole collection is refused (:class:`ParseError`) so a garbage answer never
overwrites good facts. Every other section is best effort: a failure is recorded in
``HostFacts.problems`` naming the section, and the rest is kept. A section that failed is
``None`` in the facts (not collected), never ``[]`` (collected, nothing there); the kernel
log is read line by line, keeping every readable Xid and listing the unreadable lines.

A value that parses but does not fit the facts' bounds (an absurd memory size, a
200-character kernel release, 100k GPUs) refuses the whole collection too, with a
:class:`ParseError` naming the host, section and field: the host is ``bad output`` and its
last good facts stay, the same on every database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from gpufleet.collect.bundle import Section
from gpufleet.collect.fit import fit_error, is_unfit
from gpufleet.collect.sections import (
    NOT_FOUND_RC,
    REGISTRY,
    FitError,
    OnFailure,
    Read,
    SectionSpec,
    field_sections,
    first_line,
)
from gpufleet.domain.facts import FACTS_VERSION, HostFacts
from gpufleet.errors import ParseError


def assemble_facts(
    sections: Mapping[str, Section],
    collected_at: datetime,
    host: str,
    *,
    registry: Sequence[SectionSpec] | None = None,
    model: type[HostFacts] = HostFacts,
) -> HostFacts:
    """Build the facts of ``host`` from its sections; raise ParseError on a bad GPU report.

    ``registry`` (default: the product's) says which sections to read and how; ``model`` is
    the facts class built (a subclass of :class:`HostFacts` when a registry adds fields).
    """
    specs = REGISTRY if registry is None else registry
    problems: list[str] = []
    data: dict[str, Any] = {"facts_version": FACTS_VERSION, "collected_at": collected_at}
    # Essential sections first: the others may depend on them (topology needs a GPU report).
    for spec in sorted(specs, key=lambda s: not s.essential):
        if spec.read_with is None:
            data.update(_read(spec, sections, host, problems, data))
    data["problems"] = problems
    try:
        return model(**data)
    except ValidationError as exc:
        loc = exc.errors()[0]["loc"]
        field = str(loc[0]) if loc else ""
        section = field_sections(specs).get(field, "facts")
        raise ParseError(f"{host}:{section}", fit_error(exc)) from None


def _read(
    spec: SectionSpec,
    sections: Mapping[str, Section],
    host: str,
    problems: list[str],
    facts: Mapping[str, Any],
) -> dict[str, Any]:
    """The fields ``spec`` fills, applying its failure policy."""
    assert spec.parse is not None  # checked by SectionSpec
    source = f"{host}:{spec.source_label}"
    if spec.needs_gpu and facts.get("nvidia_smi") is None:
        return spec.missing_values()
    sec = sections.get(spec.name)
    if spec.raw:
        text = sec.stdout if sec is not None else ""
    elif sec is None:
        if spec.on_failure is OnFailure.REPORT:
            problems.append(f"{spec.name}: section missing from collection output")
        return spec.missing_values()
    elif sec.rc != 0:
        quiet = spec.on_failure is OnFailure.SILENT or (
            spec.quiet_missing and sec.rc == NOT_FOUND_RC
        )
        if not quiet:
            problems.append(f"{spec.name}: exited {sec.rc}: {first_line(sec.stderr)}")
        return spec.missing_values()
    elif spec.on_failure is OnFailure.SILENT:
        text = sec.stdout.strip()
        if not text:
            return spec.missing_values()
    else:
        text = sec.stdout
    read = Read(text, source, host, problems, sections, facts)
    try:
        values = dict(spec.parse(read))
    except ParseError as exc:
        if is_unfit(exc):  # parsed, but does not fit: refuse the collection (as below)
            if exc.source == source:
                raise
            raise ParseError(source, f"{exc.where}: {exc.message}") from None
        if spec.essential:
            raise
        problems.append(str(exc))
        return spec.missing_values()
    except ValidationError as exc:  # parsed, but does not fit: refuse the collection
        detail = f"value does not fit: {exc}" if spec.essential else fit_error(exc)
        raise ParseError(source, detail) from None
    except FitError as exc:
        raise ParseError(source, str(exc)) from None
    except ValueError as exc:  # e.g. int() of a 5000-digit number
        raise ParseError(source, f"value does not fit: {exc}") from None
    unknown = set(values) - set(spec.fields)
    if unknown:
        raise ValueError(f"section {spec.name}: parser filled undeclared {sorted(unknown)}")
    return {**spec.missing_values(), **values}
