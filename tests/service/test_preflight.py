"""``gpufleet preflight``: the real collection script run locally against fake tools that
replay real captures (the lab's renderers), judged with no database."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend
from tests.sshlab import materialize_host

from gpufleet.collect.bundle import Section
from gpufleet.config import load_settings
from gpufleet.domain.preflight import EXIT_CODES, Action, Verdict
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.renderers import render_sections
from gpufleet.service.hosts.preflight import run_preflight

NOW = datetime.now(UTC)


def _host_env(tmp_path: Path, model: str = "h100-8x", faults: list[str] | None = None,
              edit: dict[str, Section] | None = None) -> dict[str, str]:
    host = LabHost(name="gpu-01", model=model, serial_salt=1, faults=faults or [], xid_at=NOW)
    sections = {**render_sections(host), **(edit or {})}
    return materialize_host(tmp_path / "node", sections)


def _run(tmp_path: Path, env: dict[str, str], profile: str | None = None):  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    report = run_preflight(load_settings(home=home), profile=profile, env=env, now=NOW)
    assert not (home / "gpufleet.db").exists()  # no database was created
    return report


@pytest.mark.parametrize("model", ["h100-8x", "a100-8x"])
def test_healthy_node_passes(tmp_path: Path, model: str) -> None:
    r = _run(tmp_path, _host_env(tmp_path, model))
    assert (r.verdict, r.exit_code, r.actions) == (Verdict.PASS, 0, [Action.NONE])
    assert r.host == "gpu-01"
    assert "test" in r.profiles_passed and "training-single" in r.profiles_passed
    assert r.duration_s is not None and r.duration_s < 60


def test_lost_gpu_is_critical(tmp_path: Path) -> None:
    r = _run(tmp_path, _host_env(tmp_path, faults=["gpu-missing"]))
    assert (r.verdict, r.exit_code) == (Verdict.CRITICAL, 1)
    assert r.actions == [Action.REBOOT]
    assert "driver sees 7 of 8 NVIDIA GPUs" in r.reason


def test_nvidia_smi_missing_is_critical(tmp_path: Path) -> None:
    r = _run(tmp_path, _host_env(tmp_path, faults=["nvidia-smi-missing"]))
    assert r.verdict is Verdict.CRITICAL and r.exit_code != 0
    assert "driver not loaded" in r.reason


def test_fatal_xid_takes_the_catalog_action(tmp_path: Path) -> None:
    """Xid 79 (GPU fallen off the bus): the catalog says RESTART_BM -> reboot."""
    r = _run(tmp_path, _host_env(tmp_path, faults=["xid:79:2"]))
    assert (r.verdict, r.actions) == (Verdict.CRITICAL, [Action.REBOOT])
    xid = next(f for f in r.findings if f.check == "xid")
    assert "Xid 79" in xid.message


def test_fabric_not_completed_is_critical(tmp_path: Path) -> None:
    """EDITED: the real 590 H100 -q text with every GPU's fabric state 'In Progress'."""
    sections = render_sections(LabHost(name="gpu-01", model="h100-8x", serial_salt=1))
    smi = sections["nvidia-smi-q"]
    edited = smi.stdout.replace(
        "State                                          : Completed",
        "State                                          : In Progress",
    )
    assert edited != smi.stdout
    env = _host_env(tmp_path, edit={"nvidia-smi-q": dataclasses.replace(smi, stdout=edited)})
    r = _run(tmp_path, env)
    assert (r.verdict, r.exit_code) == (Verdict.CRITICAL, 1)
    assert any(f.check == "fabric_ready" and "In Progress" in f.message for f in r.findings)


def test_a_profile_the_node_cannot_prove_is_unknown(tmp_path: Path) -> None:
    """No inventory says which IB ports to expect: training-multinode cannot be vouched for."""
    r = _run(tmp_path, _host_env(tmp_path), profile="training-multinode")
    assert (r.verdict, r.exit_code, r.actions) == (Verdict.UNKNOWN, 2, [Action.ESCALATE])
    assert "ib_ports" in r.reason


def test_exit_table() -> None:
    assert EXIT_CODES == {
        Verdict.PASS: 0, Verdict.WARNING: 0, Verdict.CRITICAL: 1, Verdict.UNKNOWN: 2
    }


# ----------------------------------------------------------------------------------- CLI


@pytest.fixture(params=["sqlite", "postgres"])
def cli(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    return cli_for_backend(request, tmp_path, "preflight-test")


def _cli_env(cli: Cli, env: dict[str, str]) -> Cli:
    return Cli(cli.global_args, cli.tmp, {**cli.env, **env})


def test_cli_json_and_exit_codes_without_a_database(tmp_path: Path) -> None:
    home = tmp_path / "home"
    base = Cli(["--home", str(home)], tmp_path,
               {"GPUFLEET_DATABASE_URL": None, "GPUFLEET_HOME": None})
    ok = _cli_env(base, _host_env(tmp_path / "a")).json("preflight")
    assert (ok["verdict"], ok["exit_code"], ok["actions"]) == ("PASS", 0, ["none"])
    bad = json.loads(
        _cli_env(base, _host_env(tmp_path / "b", faults=["gpu-missing"]))
        .run("preflight", "--json", code=1).stdout
    )
    assert (bad["verdict"], bad["actions"]) == ("CRITICAL", ["reboot"])
    text = _cli_env(base, _host_env(tmp_path / "c", faults=["gpu-missing"])).run(
        "preflight", "--post", code=1
    )
    assert "CRITICAL" in text.stdout and "recommended: reboot" in text.stdout
    assert "no store configured" in text.stderr
    assert not (home / "gpufleet.db").exists()


def test_cli_post_records_the_verdict(cli: Cli, tmp_path: Path) -> None:
    inv = tmp_path / "inv.ini"
    inv.write_text("[gpu]\ngpu-01 ansible_host=10.0.0.1\n")
    cli.run("enroll", "-i", str(inv))
    node = _cli_env(cli, _host_env(tmp_path, faults=["gpu-missing"]))
    node.run("preflight", "--post", code=1)
    events = cli.json("events", "gpu-01")
    posted = [e for e in events if e["kind"] == "preflight"]
    assert len(posted) == 1
    assert posted[0]["data"]["verdict"] == "CRITICAL"
    assert posted[0]["data"]["actions"] == ["reboot"]


# --------------------------------------------------------------------------------- DCGM

DCGM_CAPTURE = (
    Path(__file__).resolve().parents[1]
    / "fixtures/captured/dcgm/nvidia-dcgm_JsonResultTests_real-output_diag-3.1.0_8gpu.txt"
)


def _with_dcgmi(tmp_path: Path, env: dict[str, str]) -> tuple[dict[str, str], Path]:
    """A fake dcgmi on PATH that logs its arguments and replays NVIDIA's real level-1 output."""
    bin_dir, log = tmp_path / "dcgm-bin", tmp_path / "dcgmi.log"
    bin_dir.mkdir()
    tool = bin_dir / "dcgmi"
    tool.write_text(f'#!/bin/sh\necho "$@" >> {log}\ncat {DCGM_CAPTURE}\n')
    tool.chmod(0o755)
    return {**env, "PATH": f"{bin_dir}:{env['PATH']}"}, log


def test_dcgm_level_1_counts(tmp_path: Path) -> None:
    env, log = _with_dcgmi(tmp_path, _host_env(tmp_path))
    r = run_preflight(load_settings(home=tmp_path / "home"), env=env, dcgm=True, now=NOW)
    assert log.read_text().split() == ["diag", "-r", "1", "-j"]  # level 1 only
    assert r.verdict is Verdict.PASS, r.reason
    assert "dcgm" not in r.reason


def test_dcgm_never_runs_under_mig(tmp_path: Path) -> None:
    """The real A100 capture has MIG enabled (the lab turns it off; here its GPU report is the
    capture as captured): dcgmi is not called at all."""
    host = LabHost(name="gpu-01", model="a100-8x", serial_salt=1)
    smi = render_sections(host)["nvidia-smi-xml"]
    mig = (DCGM_CAPTURE.parents[1] / "nvidia-smi-xml/telegraf_a100-sxm4-v12.xml").read_text()
    edit = {"nvidia-smi-xml": dataclasses.replace(smi, stdout=mig)}
    env, log = _with_dcgmi(tmp_path, _host_env(tmp_path, "a100-8x", edit=edit))
    r = run_preflight(load_settings(home=tmp_path / "home"), env=env, dcgm=True, now=NOW)
    assert not log.exists()
    assert "dcgm level 1 not run: MIG is enabled" in r.reason
