"""The vendor plugins' part of the inspection probe (issue 24 item 3): the probe of an Ascend or
AMD host asks that vendor's tools (never nvidia-smi), its answer is read through the plugin
into vendor-neutral samples, and a tool that is missing, fails or prints what cannot be read
is a failure to observe with the devices unknown (fail closed). Main 84be469 has no
vendor parts in the probe (these tests fail there: the module does not exist)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from tests.sshlab import materialize_host

from gpufleet.collect.inspect import parse_probe, probe_script, split_probe
from gpufleet.collect.inspect_vendors import parse_vendor_parts
from gpufleet.collect.local import LocalTransport
from gpufleet.collect.transport import Outcome, Target
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.probe import render_probe
from gpufleet.lab.renderers import render_sections
from gpufleet.vendors.huawei.plugin import split_chip_answers

AT = datetime(2026, 12, 5, 11, 0, tzinfo=UTC)


def _answer(model: str, faults: list[str] | None = None) -> str:
    return render_probe(LabHost(name="x-01", model=model, serial_salt=1, faults=faults or []))


def test_the_probe_of_a_vendor_host_asks_its_plugin_and_not_nvidia_smi() -> None:
    ascend = probe_script(("/",), vendors=("huawei",))
    assert "@@probe huawei.npu_smi_info" in ascend
    assert "@@probe huawei.npu_smi_health" in ascend
    assert "@@probe huawei.hccn_link" in ascend
    assert ascend.count("npu_each() {") == 1  # the plugin's sh function, defined once
    assert "nvidia-smi" not in ascend
    assert "/sys/module/nvidia" not in ascend
    amd = probe_script(("/",), vendors=("amd",))
    assert "@@probe amd.rocm_smi_json" in amd and "rocm-smi" in amd
    assert "nvidia-smi" not in amd
    # a host of NVIDIA GPUs (or one never collected) gets the probe of old
    assert probe_script(("/",)) == probe_script(("/",), vendors=("nvidia",))
    assert "@@probe huawei" not in probe_script(("/",))


def test_healthy_answers_read_as_devices_without_faults() -> None:
    npu = parse_probe(_answer("ascend-910b3-8x"), AT)
    assert npu.problems == () and npu.faults == () and npu.observed
    assert npu.sample.gpus is not None and len(npu.sample.gpus) == 8
    assert {g.model for g in npu.sample.gpus} == {"910B3"}
    assert {p.state for p in npu.sample.ports} == {"UP"}
    amd = parse_probe(_answer("mi100-4x"), AT)
    assert amd.problems == () and amd.faults == () and amd.observed
    assert amd.sample.gpus is not None and len(amd.sample.gpus) == 4


def test_a_missing_tool_run_by_a_real_shell_is_a_failure_to_observe(tmp_path: Path) -> None:
    """The probe run by sh on this machine, where npu-smi is not installed: coreutils'
    ``timeout`` answers 127 and the devices are unknown, never healthy."""
    script = probe_script(("/",), vendors=("huawei",))
    env = {"PATH": "/usr/bin:/bin", "GPUFLEET_SYSROOT": str(tmp_path), "LC_ALL": "C"}
    assert "npu-smi" not in os.listdir("/usr/bin")
    out = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    res = parse_probe(out.stdout, AT)
    assert res.sample.gpus is None and not res.observed
    assert res.faults == ()  # nothing the tool said is believed
    kinds = {f.kind for f in res.sample.failures}
    assert "gpu_tool_missing" in kinds and kinds <= {"gpu_tool_missing", "gpu_tool_error"}
    assert any("npu_smi_info" in p and "exited 127" in p for p in res.problems), res.problems


def test_an_answer_cut_short_is_unobserved_not_fewer_devices() -> None:
    """The real table cut inside a chip row (the stream stopped): unreadable (the reader
    refuses a table without its closing separator), so no device count is believed."""
    parts = split_probe(_answer("ascend-910b3-8x"))
    table = parts["huawei.npu_smi_info"].split("\n@@rc")[0].splitlines()
    cut = next(i for i in range(len(table) // 2, len(table)) if table[i].startswith("|"))
    parts["huawei.npu_smi_info"] = "\n".join(table[: cut + 1]) + "\n@@rc 0"
    res = parse_vendor_parts(parts)
    assert res is not None and res.devices is None and res.faults == ()
    assert [f.kind for f in res.failures] == ["gpu_tool_error"]
    assert "truncated" in res.failures[0].detail


def test_faults_from_the_real_captures() -> None:
    alarm = parse_probe(_answer("ascend-910b3-8x", ["npu-alarm:3"]), AT)
    assert [(f.kind, f.index) for f in alarm.faults] == [("unhealthy", 3)]
    assert "A4025021 8C03A000 8C084E00" in alarm.faults[0].message
    down = parse_probe(_answer("ascend-910b3-8x", ["npu-link-down:5"]), AT)
    assert [(f.kind, f.subject) for f in down.faults] == [("link-down", "huawei:5/roce")]
    # a card missing is one device fewer (the gpu-count-low rule judges it, as for NVIDIA)
    gone = parse_probe(_answer("mi100-4x", ["gpu-missing"]), AT)
    assert gone.faults == () and gone.observed
    assert gone.sample.gpus is not None and len(gone.sample.gpus) == 3
    lost = parse_probe(_answer("ascend-910b3-8x", ["npu-smi-error:4"]), AT)
    assert lost.sample.gpus is None and lost.faults == ()
    assert [f.kind for f in lost.sample.failures] == ["gpu_tool_error"]
    assert "Invalid card id." in lost.sample.failures[0].detail


def test_the_real_probe_runs_the_per_chip_loops(tmp_path: Path) -> None:
    """The probe itself (POSIX sh, the plugin's ``npu_each``) on a host whose npu-smi and
    hccn_tool answer per chip (fakes serving the lab host's captures, as the collection's
    test of the same loops does; NPU 5 in Alarm, the port of NPU 1 down) reads what the lab
    answer reads: the shell framing and the lab's agree."""
    host = LabHost(
        name="h1", model="ascend-910b3-8x", serial_salt=7, faults=["npu-alarm:5", "npu-link-down:1"]
    )
    given = render_sections(host)
    env = materialize_host(tmp_path / "host", given)
    data = tmp_path / "host" / "chips"
    data.mkdir()
    for a in split_chip_answers(given["npu_smi_health"].stdout, "health"):
        (data / f"health.{a.npu_id}.{a.chip_id}").write_text(a.text.rstrip("\n") + "\n")
    for name, kind in (("hccn_link", "-link"), ("hccn_net_health", "-net_health")):
        for a in split_chip_answers(given[name].stdout, name):
            (data / f"{kind}.{a.logic_id}").write_text(a.text.rstrip("\n") + "\n")
    for name in ("npu_smi_info", "npu_smi_mapping"):
        (data / name).write_text(given[name].stdout + "\n")
    bin_dir, d = tmp_path / "host" / "bin", str(data)
    (bin_dir / "npu-smi").write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f'  "info") cat {d}/npu_smi_info ;;\n'
        f'  "info -m") cat {d}/npu_smi_mapping ;;\n'
        f'  "info -t health -i "*) cat {d}/health.$5.$7 ;;\n'
        '  *) echo "npu-smi: unsupported $*" >&2; exit 2 ;;\n'
        "esac\n"
    )
    (bin_dir / "hccn_tool").write_text(f'#!/bin/sh\ncat {d}/"$3.$2"\n')
    for tool in ("npu-smi", "hccn_tool"):
        (bin_dir / tool).chmod(0o755)
    script = probe_script(("/",), vendors=("huawei",))
    res = asyncio.run(LocalTransport(env).run(Target("local", "localhost"), script, 120.0))
    assert res.outcome is Outcome.OK and res.output is not None, res.reason
    real = parse_probe(res.output, AT)
    lab = parse_probe(render_probe(host), AT)
    assert real.problems == ()
    assert real.faults == lab.faults
    assert [(f.kind, f.index) for f in real.faults] == [("unhealthy", 5), ("link-down", 1)]
    assert real.sample.gpus == lab.sample.gpus and real.sample.ports == lab.sample.ports
