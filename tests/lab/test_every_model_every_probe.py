"""Every lab model answers every probe (issue 29 item 7): through the ``sim`` transport, each
lab model (no fault) answers the product's collection script (reclaim sections included), the
inspection probe its vendor is asked, the remediation scripts, a campaign's own command and
the active tests, and no answer is "command not found" (exit 127) or "lab host cannot run"
unless that is what such a machine really answers, each case named below with why: another
vendor's tool, NVIDIA's InfiniBand/fabric-manager tools on a machine without the adapters or
NVSwitches, and the modelled absences of the lab vendors (Hygon's DTK rocm-smi)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from gpufleet.collect.bundle import split_bundle
from gpufleet.collect.inspect import probe_script
from gpufleet.collect.script import remote_script
from gpufleet.collect.sections import RECLAIM_REGISTRY, REGISTRY
from gpufleet.collect.transport import Outcome, RawResult, Target
from gpufleet.domain import remediation
from gpufleet.domain.vendors import plugins
from gpufleet.lab.catalogue import all_models, model_spec
from gpufleet.lab.fleet import create_fleet
from gpufleet.lab.transport import ACTIVE_CAPTURES, SimTransport

#: The tools of NVIDIA's stack that the core collection runs.
NVIDIA_TOOLS = frozenset({"nvidia-smi", "nv-fabricmanager", "nvidia-ctk"})
#: (vendor, section): answered "not found" on that vendor's lab hosts by design.
MODELLED_ABSENCES = {
    ("hygon", "hygon_rocm_smi_json"): "the captured Hygon host has hy-smi and no DTK rocm-smi "
    "(lab/vendors/hygon.py; the section is optional)",
}
_NOT_FOUND = re.compile(r"(?:sh: \d+: |: )?(\S+): (?:command )?not found")


def _owners() -> dict[str, str]:
    """Section name -> the vendor whose collector or inspector runs it."""
    out: dict[str, str] = {}
    for p in plugins():
        if p.collector is not None:
            out |= {s.name: str(p.name) for s in p.collector.sections}
        if p.inspector is not None:
            out |= {s.name: str(p.name) for s in p.inspector.inspect_sections}
    return out


def _absent_is_real(model: str, section: str, tool: str) -> str | None:
    """Why ``section`` answering "not found" on a ``model`` host is what such a host answers
    (None: it is not: the lab model should answer it)."""
    spec = model_spec(model)
    vendor = spec.vendor
    owner = _owners().get(section)
    if (vendor, section) in MODELLED_ABSENCES:
        return MODELLED_ABSENCES[(vendor, section)]
    if owner is not None and owner != vendor:
        return f"{owner}'s section on a {vendor} host"
    if owner is None and tool in NVIDIA_TOOLS and vendor != "nvidia":
        return "NVIDIA's tool on a host without NVIDIA GPUs"
    if tool == "ibstat" and spec.ibstat_file is None:
        return "no RDMA adapters"
    if tool == "nv-fabricmanager" and not spec.nvswitch:
        return "no NVSwitch (no fabric manager)"
    return None


def _run(tr: SimTransport, name: str, script: str) -> RawResult:
    return asyncio.run(tr.run(Target(name, name), script, 30))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimTransport, dict[str, str]]:
    models = all_models()
    d = tmp_path_factory.mktemp("everymodel")
    fl = create_fleet(len(models), models=models, faults={})
    fl.save(d)
    return d, SimTransport(d), {h.model: h.name for h in fl.hosts}


@pytest.mark.parametrize("model", all_models())
def test_every_model_answers_the_collection_and_reclaim(
    model: str, lab: tuple[Path, SimTransport, dict[str, str]]
) -> None:
    _, tr, names = lab
    raw = _run(tr, names[model], remote_script(registry=(*REGISTRY, *RECLAIM_REGISTRY)))
    assert raw.outcome is Outcome.OK, raw.reason
    sections = split_bundle(raw.output or "", model)
    asked = [s.name for s in (*REGISTRY, *RECLAIM_REGISTRY)]
    assert sorted(sections) == sorted(asked), f"{model}: unanswered {set(asked) - set(sections)}"
    wrong = []
    for name, sec in sections.items():
        m = _NOT_FOUND.search(sec.stderr or "")
        if sec.rc == 127 or m:
            tool = m.group(1) if m else "?"
            if _absent_is_real(model, name, tool) is None:
                wrong.append(f"{name}: {tool} not found (rc {sec.rc})")
    assert not wrong, f"{model}: " + "; ".join(wrong)


@pytest.mark.parametrize("model", all_models())
def test_every_model_answers_the_inspection_probe(
    model: str, lab: tuple[Path, SimTransport, dict[str, str]]
) -> None:
    _, tr, names = lab
    vendor = model_spec(model).vendor
    vendors = None if vendor == "nvidia" else ([] if vendor == "none" else [vendor])
    script = probe_script(vendors=vendors)
    raw = _run(tr, names[model], script)
    assert raw.outcome is Outcome.OK, raw.reason
    out = raw.output or ""
    asked = re.findall(r"(?m)^echo '@@probe (\S+)'$", script)
    answered = re.findall(r"(?m)^@@probe (\S+)$", out)
    # the fabric part: only rack trays' captures have the fields (lab/probe.py)
    assert [a for a in asked if a != "fabric"] == [a for a in answered if a != "fabric"]
    assert "not found" not in out and "@@rc 127" not in out, f"{model}:\n{out[:2000]}"


@pytest.mark.parametrize("model", all_models())
def test_every_model_answers_remediation_campaign_and_active_tests(
    model: str, lab: tuple[Path, SimTransport, dict[str, str]]
) -> None:
    d, tr, names = lab
    name = names[model]
    for script in (remediation.probe_script(), remediation.reboot_script(),
                   remediation.alive_script(), remediation.restart_script("kubelet")):
        raw = _run(tr, name, script)
        assert raw.outcome is Outcome.OK and "not found" not in (raw.output or ""), (
            f"{model}: {script.splitlines()[0]}: {raw}")
    # a campaign's own command runs, in the host's own directory
    raw = _run(tr, name, 'echo "on $LAB_HOST in $PWD"; true\necho "rc=$?"\n')
    assert raw.outcome is Outcome.OK, raw.reason
    assert (raw.output or "").splitlines() == [f"on {name} in {d / 'hosts' / name}", "rc=0"]
    # NVIDIA's active tests: answered with captures on NVIDIA hosts, refused elsewhere
    for cmd in ACTIVE_CAPTURES:
        raw = _run(tr, name, f"{cmd} -x")
        if model_spec(model).vendor == "nvidia" and model_spec(model).role == "gpu":
            assert raw.outcome is Outcome.OK and raw.output, f"{model}: {cmd}: {raw.reason}"
        else:
            assert raw.outcome is Outcome.ERROR and "cannot run" in raw.reason


def test_a_lab_host_shell_has_a_login_environment_not_gpufleets(
    lab: tuple[Path, SimTransport, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A campaign command on a lab host does not see this process's settings (a secret key)."""
    _, tr, names = lab
    monkeypatch.setenv("GPUFLEET_SECRET_KEY", "not-for-the-lab-host")
    raw = _run(tr, names["a100-8x"], "env")
    assert raw.outcome is Outcome.OK
    names_seen = {line.split("=", 1)[0] for line in (raw.output or "").splitlines()}
    assert "LAB_HOST" in names_seen and "HOME" in names_seen
    assert not {n for n in names_seen if n.startswith("GPUFLEET_")}
