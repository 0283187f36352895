"""The section registry drives the script, the assembler, the lab renderer and the sshd lab.

Every registered section must appear in all four, and a new entry (here in a fixture
registry: ``nvidia_peermem`` loaded, read from ``/sys/module``) must flow through the script
and the assembler with no other edit.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.sshlab import LabError, materialize_host, served_by

from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import Section, split_bundle
from gpufleet.collect.local import LocalTransport
from gpufleet.collect.script import SECTIONS, remote_script
from gpufleet.collect.sections import (
    REGISTRY,
    FitError,
    Read,
    SectionSpec,
    field_sections,
    file_section,
    names,
)
from gpufleet.collect.transport import Outcome, Target
from gpufleet.domain.facts import HostFacts
from gpufleet.errors import ParseError
from gpufleet.lab.catalogue import all_models
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.renderers import RENDERERS as LAB_RENDERERS
from gpufleet.lab.renderers import render_sections

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
HERE = Target("local", "localhost")


def _facts(sections: dict[str, Section], **kw: Any) -> dict[str, Any]:
    return assemble_facts(sections, NOW, "h1", **kw).model_dump(exclude={"collected_at"})


def _run_script(env: dict[str, str], script: str) -> dict[str, Section]:
    res = asyncio.run(LocalTransport(env).run(HERE, script, 120.0))
    assert res.outcome is Outcome.OK, res.reason
    assert res.output is not None
    return split_bundle(res.output)


def test_names_are_unique_and_the_script_order() -> None:
    assert len(set(names())) == len(REGISTRY)
    assert names() == SECTIONS


@pytest.mark.parametrize("spec", REGISTRY, ids=lambda s: s.name)
def test_every_entry_is_in_the_script(spec: SectionSpec) -> None:
    script = remote_script()
    assert f"\nsec {spec.name} {spec.command}\n" in script
    if spec.functions:
        assert spec.functions in script
    if spec.timed:
        assert spec.command.startswith(("$TO ", "${TO:+")) or "$TO " in spec.functions


@pytest.mark.parametrize("spec", REGISTRY, ids=lambda s: s.name)
def test_every_entry_is_read_by_the_assembler(spec: SectionSpec) -> None:
    """Dropping the section from a lab host's answer changes the facts it declares."""
    read_by = (
        spec if spec.read_with is None else next(s for s in REGISTRY if s.name == spec.read_with)
    )
    changed = []
    for model in all_models():  # a vendor's sections change only its own hosts' facts
        full = render_sections(LabHost(name="h1", model=model, serial_salt=3))
        without = {k: v for k, v in full.items() if k != spec.name}
        a, b = _facts(full), _facts(without)
        if any(a[f] != b[f] for f in read_by.fields) or a["problems"] != b["problems"]:
            changed.append(model)
    assert changed, f"no lab model's facts depend on section {spec.name}"
    for f in spec.fields:
        assert field_sections()[f] == spec.source_label


def test_every_field_of_a_full_host_is_filled() -> None:
    host = LabHost(name="h1", model="a100-8x", serial_salt=3, faults=["xid:79"])
    facts = _facts(render_sections(host))
    for spec in REGISTRY:
        for f in spec.fields:
            # Set only when there is no report / an unreadable Xid line.
            # The accelerator fields: set on hosts of other vendors only (an A100 host).
            if f not in ("nvidia_smi_error", "xid_unreadable", "accelerator_versions",
                         "accelerator_errors", "accelerators"):
                assert facts[f] not in (None, [], {}), f"{spec.name} -> {f}"
    assert facts["problems"] == []


def test_every_entry_has_a_lab_renderer() -> None:
    assert set(LAB_RENDERERS) == set(names())
    sections = render_sections(LabHost(name="h1", model="h100-8x", serial_salt=1))
    assert tuple(sections) == names()


@pytest.mark.parametrize("spec", REGISTRY, ids=lambda s: s.name)
def test_every_entry_is_served_by_the_sshd_lab(spec: SectionSpec) -> None:
    how = served_by(spec)
    assert how.startswith(("file:", "tool:"))


@pytest.mark.parametrize("model", ["a100-8x", "h100-8x", "a10g-1x"])
def test_sshd_lab_fake_tools_reproduce_every_lab_section(tmp_path: Path, model: str) -> None:
    """The sshd lab's fake tools + the real script give back what the lab renderer made."""
    given = render_sections(LabHost(name="h1", model=model, serial_salt=5))
    env = materialize_host(tmp_path / "host", given)
    got = _run_script(env, remote_script())
    assert set(got) == set(names())
    for name, sec in given.items():
        assert got[name] == sec, name


def test_an_entry_without_file_or_tool_cannot_be_served(tmp_path: Path) -> None:
    odd = SectionSpec("odd", "true", ("hostname",), lambda r: {"hostname": "x"})
    with pytest.raises(ValueError, match="odd declares no file or tool"):
        materialize_host(tmp_path / "h", {}, (*REGISTRY, odd))
    with pytest.raises(LabError, match="unknown section"):
        materialize_host(tmp_path / "h", {"odd": Section("odd", "", "", 0)})


def test_registry_refuses_an_entry_that_fills_nothing() -> None:
    with pytest.raises(ValueError, match="fills no field"):
        SectionSpec("nothing", "true", (), None)
    with pytest.raises(ValueError, match="essential section reads its raw output"):
        SectionSpec("gpu", "true", ("hostname",), lambda r: {}, essential=True)


# --------------------------------------------------------------------- a new entry, end to end


class PeermemFacts(HostFacts):
    """HostFacts plus the one field the new entry fills."""

    nvidia_peermem: bool | None = None


def _initstate(r: Read) -> dict[str, Any]:
    state = r.text.strip()
    if state not in ("live", "coming", "going"):
        raise ParseError(r.source, f"not a module state: {state[:40]!r}")
    return {"nvidia_peermem": state == "live"}


PEERMEM = file_section(
    "nvidia-peermem", "sys/module/nvidia_peermem/initstate", ("nvidia_peermem",), _initstate
)
FIXTURE_REGISTRY = (*REGISTRY, PEERMEM)


def test_a_new_entry_flows_through_script_and_assembler(tmp_path: Path) -> None:
    base = render_sections(LabHost(name="h1", model="a100-8x", serial_salt=2))
    given = {**base, "nvidia-peermem": Section("nvidia-peermem", "live", "", 0)}
    env = materialize_host(tmp_path / "host", given, FIXTURE_REGISTRY)
    script = remote_script(registry=FIXTURE_REGISTRY)
    assert "sec nvidia-peermem readf" in script
    got = _run_script(env, script)
    assert got["nvidia-peermem"] == Section("nvidia-peermem", "live", "", 0)
    facts = assemble_facts(got, NOW, "h1", registry=FIXTURE_REGISTRY, model=PeermemFacts)
    assert isinstance(facts, PeermemFacts)
    assert facts.nvidia_peermem is True
    assert facts.problems == []
    # The product registry neither runs nor reads it.
    assert "nvidia-peermem" not in remote_script()

    # Module not loaded: the file is missing, the fact is None and the problem names it.
    del given["nvidia-peermem"]
    env = materialize_host(tmp_path / "host", given, FIXTURE_REGISTRY)
    got = _run_script(env, script)
    assert got["nvidia-peermem"].rc == 1
    facts = assemble_facts(got, NOW, "h1", registry=FIXTURE_REGISTRY, model=PeermemFacts)
    assert isinstance(facts, PeermemFacts)
    assert facts.nvidia_peermem is None
    assert facts.problems == [
        "nvidia-peermem: exited 1: cannot read "
        f"{tmp_path.resolve()}/host/sysroot/sys/module/nvidia_peermem/initstate"
    ]


def test_a_new_entry_that_does_not_parse_is_a_problem_not_a_refusal() -> None:
    base = render_sections(LabHost(name="h1", model="a100-8x", serial_salt=2))
    sections = {**base, "nvidia-peermem": Section("nvidia-peermem", "??", "", 0)}
    facts = assemble_facts(sections, NOW, "h1", registry=FIXTURE_REGISTRY, model=PeermemFacts)
    assert facts.problems == ["h1:nvidia-peermem: not a module state: '??'"]


def test_a_value_that_does_not_fit_refuses_naming_host_and_section() -> None:
    def too_big(r: Read) -> dict[str, Any]:
        raise FitError("nvidia_peermem: 7 states")

    bad = file_section("nvidia-peermem", "x", ("nvidia_peermem",), too_big)
    base = render_sections(LabHost(name="h1", model="a100-8x", serial_salt=2))
    sections = {**base, "nvidia-peermem": Section("nvidia-peermem", "live", "", 0)}
    with pytest.raises(ParseError, match=r"h1:nvidia-peermem.*nvidia_peermem: 7 states"):
        assemble_facts(sections, NOW, "h1", registry=(*REGISTRY, bad), model=PeermemFacts)
