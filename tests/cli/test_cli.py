"""The ``gpufleet`` CLI end to end on a simulated lab, on SQLite and on the real PostgreSQL.

Every command runs through ``typer.testing.CliRunner`` against ``gpufleet.cli.main:app`` with
the global options a person would type (``--home DIR`` for SQLite, ``--db URL`` for
PostgreSQL); the CLI opens the fleet itself. Output is judged through ``--json`` where the
command has it, exit codes always.

Lab: 8x ``h100-8x`` hosts; gpu-02 runs another driver than the pool baseline
(driver-drift), gpu-03 has an IB port down, gpu-04 lost one of its 8 GPUs from the driver
(still on the PCI bus).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat
from typer.testing import CliRunner

from gpufleet.cli.main import app

ACTOR = "cli-test"
POOL = "train-h100"
DRIFTED_DRIVER = "535.154.05"  # the lab's driver-drift version
LAB_FAULTS = ("gpu-02=driver-drift", "gpu-03=ib-down", "gpu-04=gpu-missing")
ALL_PROFILES = {"training-multinode", "training-single", "inference", "test"}


@dataclass
class Gf(Cli):
    """The CLI plus the standard lab of this module."""

    @property
    def lab(self) -> Path:
        return self.tmp / "lab"

    def build_lab(self, *faults: str, hosts: int = 8) -> None:
        """lab create -> enroll -> collect (exit 0) -> validated baseline from gpu-01 for the
        pool -> DCGM and NCCL evidence on every host."""
        args = ["lab", "create", "--hosts", str(hosts), "--model", "h100-8x",
                "--dir", str(self.lab)]
        for f in faults:
            args += ["--fault", f]
        self.run(*args)
        inventory = self.lab / "inventory.ini"
        assert f"gpufleet_pool={POOL}" in inventory.read_text()
        enrolled = self.json("enroll", "-i", str(inventory))
        assert len(enrolled["added"]) == hosts
        self.run("collect")
        self.run("baseline", "create", "h100-lab", "--from-host", "gpu-01", "--pool", POOL,
                 "--status", "validated")
        # The training profiles' proof (issue 24 item 5): DCGM level 2 and NCCL on every host.
        self.prove("*")


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Gf]:
    c = cli_for_backend(request, tmp_path, ACTOR)
    yield Gf(c.global_args, c.tmp, c.env)


@pytest.fixture
def lab(gf: Gf) -> Gf:
    """The standard 8-host lab, enrolled, collected, with the pool baseline from gpu-01."""
    gf.build_lab(*LAB_FAULTS)
    return gf


# ------------------------------------------------------------------ Kubernetes validity

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-_.A-Za-z0-9]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-_.A-Za-z0-9]*[A-Za-z0-9])?)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def k8s_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid Kubernetes label/taint key (None when it is).

    ``[prefix/]name``: prefix a DNS-1123 subdomain (<= 253 chars, dot-separated DNS labels of
    <= 63 lower-case alphanumerics and '-'), name <= 63 chars of alphanumerics, '-', '_', '.',
    starting and ending alphanumeric.
    """
    prefix, sep, name = key.rpartition("/")
    if sep:
        if not prefix or len(prefix) > 253:
            return f"prefix of {key!r} empty or longer than 253"
        for part in prefix.split("."):
            if len(part) > 63 or not _DNS_LABEL.match(part):
                return f"prefix of {key!r} is not a DNS subdomain"
    if not name or len(name) > 63:
        return f"name of {key!r} empty or longer than 63"
    if not _LABEL_NAME.match(name):
        return f"name of {key!r} has invalid characters"
    return None


def k8s_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid Kubernetes label value (None when it is)."""
    if not isinstance(value, str):
        return f"{value!r} is not a string"
    if len(value) > 63:
        return f"{value!r} longer than 63"
    if not _LABEL_VALUE.match(value):
        return f"{value!r} has invalid characters"
    return None


def test_kubernetes_validator_itself() -> None:
    """The validator used below is not vacuous."""
    long_prefix = ".".join(["a" * 63] * 3) + "." + "b" * 61  # 253 characters
    for good in ("gpufleet.io/state", "nvidia.com/gpu.count", "app", "a.b-c_d",
                 "k8s.io/" + "n" * 63, long_prefix + "/x"):
        assert k8s_key_problem(good) is None, good
    for bad in ("", "/name", "Upper.io/x", "a..b/x", "-a.io/x", "a.io/" + "n" * 64,
                "a.io/-x", "a.io/x_", "a b", "a.io/b/c", long_prefix + "c/x"):
        assert k8s_key_problem(bad) is not None, bad
    for good in ("", "true", "H100-80GB-HBM3", "590.48.01", "gpu_lost", "a" * 63):
        assert k8s_value_problem(good) is None, good
    for bad in ("a" * 64, "-x", "x-", "a b", "a/b", "a:b", "ü"):
        assert k8s_value_problem(bad) is not None, bad


# ------------------------------------------------------------------------------- tests


def test_help_mentions_selectors() -> None:
    runner = CliRunner()
    selectors = ("group:", "pool:", "state:", "model:")
    top = runner.invoke(app, ["--help"])
    assert top.exit_code == 0, top.output
    top_text = flat(top.stdout)
    assert all(s in top_text for s in selectors), top_text
    assert "NAME-GLOB" in top_text
    col = runner.invoke(app, ["collect", "--help"])
    assert col.exit_code == 0, col.output
    text = flat(col.stdout)
    assert all(s in text for s in selectors), text
    assert "NAME-GLOB" in text


def test_onboarding_listing_show_and_summary(lab: Gf) -> None:
    # validate: exit 1 because not every host ends available.
    verdicts = {v["host"]: v for v in lab.json("validate", code=1)}
    assert set(verdicts) == {f"gpu-0{i}" for i in range(1, 9)}
    assert verdicts["gpu-02"]["state"] == "validating"
    assert verdicts["gpu-04"]["state"] == "quarantined"
    assert "gpu_lost" in verdicts["gpu-04"]["faults"]
    assert verdicts["gpu-03"]["state"] == "available"
    assert "training-multinode" not in verdicts["gpu-03"]["profiles"]

    # hosts list --json: states, pools, GPU counts.
    rows = {r["name"]: r for r in lab.json("hosts", "list")}
    assert len(rows) == 8
    states = {n: r["state"] for n, r in rows.items()}
    assert states == {
        "gpu-01": "available", "gpu-02": "validating", "gpu-03": "available",
        "gpu-04": "quarantined", "gpu-05": "available", "gpu-06": "available",
        "gpu-07": "available", "gpu-08": "available",
    }
    assert {r["pool"] for r in rows.values()} == {POOL}
    assert {n: r["gpu_count"] for n, r in rows.items()} == {
        n: (7 if n == "gpu-04" else 8) for n in rows
    }
    assert all("H100" in r["gpu_model"] for r in rows.values())
    assert rows["gpu-04"]["fault"] == "gpu_lost"
    assert set(rows["gpu-01"]["profiles"]) == ALL_PROFILES
    assert rows["gpu-02"]["driver"] == DRIFTED_DRIVER
    assert rows["gpu-01"]["driver"] != DRIFTED_DRIVER
    assert all(r["last_outcome"] == "ok" for r in rows.values())

    # Filters.
    def names(*argv: str) -> list[str]:
        return [r["name"] for r in lab.json("hosts", "list", *argv)]

    assert names("--model", "h100") == sorted(rows)
    lab.run("hosts", "list", "--model", "A100", code=4)  # a selection matching nothing
    assert names("--state", "quarantined") == ["gpu-04"]
    assert names("--state", "available", "--group", "gpu_h100") == [
        n for n, s in sorted(states.items()) if s == "available"
    ]
    assert names("--group", "lab") == sorted(rows)
    lab.run("hosts", "list", "--group", "gpu_a100", code=4)  # a selection matching nothing
    assert names("--pool", POOL, "gpu-01,gpu-02") == ["gpu-01", "gpu-02"]
    assert names("state:validating,gpu-08") == ["gpu-02", "gpu-08"]

    # hosts show gpu-04: 7 GPUs from nvidia-smi, 8 on the PCI bus, fault gpu_lost.
    shown = lab.json("hosts", "show", "gpu-04")
    assert shown["host"]["state"] == "quarantined"
    assert shown["host"]["fault"] == "gpu_lost"
    assert "7 of 8" in shown["host"]["status_reason"]
    facts = shown["facts"]
    assert len(facts["nvidia_smi"]["gpus"]) == 7
    nvidia_pci_gpus = [
        d for d in facts["pci_devices"]
        if d["vendor_id"] == "10de" and (d["class_id"] or "").startswith("03")
    ]
    assert len(nvidia_pci_gpus) == 8
    smi_buses = {g["pci_bus_id"][-7:].lower() for g in facts["nvidia_smi"]["gpus"]}
    off_driver = [d["address"] for d in nvidia_pci_gpus if d["address"][-7:] not in smi_buses]
    assert len(off_driver) == 1 and off_driver[0] in shown["host"]["status_reason"]
    assert shown["expected"]["gpu_count"] == 8
    kinds = [e["kind"] for e in shown["events"]]
    assert "transition" in kinds
    assert shown["collections"] and shown["collections"][0]["outcome"] == "ok"

    # summary --json.
    sm = lab.json("summary")
    assert sm["hosts"] == 8
    assert sum(sm["per_state"].values()) == 8
    assert sm["per_state"] == {"available": 6, "validating": 1, "quarantined": 1}
    assert [(q["host"], q["fault"]) for q in sm["quarantined"]] == [("gpu-04", "gpu_lost")]
    assert [v["host"] for v in sm["validating"]] == ["gpu-02"]
    assert sm["unreachable"] == []
    assert sm["gpus_total"] == 7 * 8 + 7
    assert sm["gpus_available"] == 6 * 8
    assert sm["hosts_per_profile"]["training-multinode"] == 5  # gpu-03's fabric is down
    assert sm["hosts_per_profile"]["inference"] == 6
    # The driver moved and the fabric manager (same version as the driver) with it.
    assert [s["hosts"] for s in sm["drift"]["summary"]] == [["gpu-02"], ["gpu-02"]]

    # The human summary names the quarantined host and its fault.
    human = flat(lab.run("summary").stdout)
    assert "8 hosts" in human and "gpu-04" in human and "gpu_lost" in human


def test_drift_before_and_after_repair(lab: Gf) -> None:
    lab.run("validate", code=1)
    baseline = lab.json("baseline", "show", "h100-lab")
    expected_driver = baseline["driver"]
    assert expected_driver and expected_driver != DRIFTED_DRIVER

    rep = lab.json("drift", code=1)
    assert baseline["fabric_manager"] == expected_driver  # NVSwitch host: FM = driver
    assert rep["summary"] == [
        {"field": "driver", "actual": DRIFTED_DRIVER, "expected": expected_driver,
         "hosts": ["gpu-02"]},
        {"field": "fabric_manager", "actual": DRIFTED_DRIVER, "expected": expected_driver,
         "hosts": ["gpu-02"]},
    ]
    assert rep["hosts"] == {
        "gpu-02": [{"field": "driver", "expected": expected_driver, "actual": DRIFTED_DRIVER},
                   {"field": "fabric_manager", "expected": expected_driver,
                    "actual": DRIFTED_DRIVER}]
    }
    assert set(rep["baselines"]) == {f"gpu-0{i}" for i in range(1, 9)}
    assert set(rep["baselines"].values()) == {"h100-lab"}
    assert rep["no_baseline"] == [] and rep["no_facts"] == []

    human = flat(lab.run("drift", code=1).stdout)
    assert f"driver {DRIFTED_DRIVER} on 1 host, baseline {expected_driver}" in human
    # Selecting only clean hosts: no drift, exit 0.
    assert lab.json("drift", "gpu-05,gpu-06,gpu-07,gpu-08")["summary"] == []

    # The technician installs the baseline driver; validation brings gpu-02 back.
    lab.run("lab", "change", "gpu-02", "--repair", "--dir", str(lab.lab))
    (verdict,) = lab.json("validate", "gpu-02")
    assert verdict["state"] == "available", verdict
    # The driver change makes its DCGM and NCCL results stale (issue 24 item 5): the host is
    # held out of the training profiles, and validate, hosts show and --json say why.
    assert set(verdict["profiles"]) == {"inference", "test"}
    stale = verdict["held_out"]["training-multinode"]
    assert len(stale) == 2 and all(" since the driver change on " in r for r in stale), stale
    assert stale[1].startswith("nccl: no NCCL all-reduce result since the driver change on ")
    shown = flat(lab.run("hosts", "show", "gpu-02").stdout)
    assert "why: not training-single: dcgm_diag: no DCGM diag at level 1" in shown
    assert "since the driver change on" in lab.json("hosts", "show", "gpu-02")["host"][
        "status_reason"]
    assert "(required)" in flat(lab.run("validate", "gpu-02").stdout)  # the reasons column
    lab.prove("gpu-02")  # tested again on the new driver
    (verdict,) = lab.json("validate", "gpu-02")
    assert set(verdict["profiles"]) == ALL_PROFILES and verdict["held_out"] == {}

    after = lab.json("drift")
    assert after["summary"] == [] and after["hosts"] == {}
    human = flat(lab.run("drift").stdout)
    assert "no drift on 8 hosts with a baseline" in human
    row = lab.json("hosts", "list", "gpu-02")[0]
    assert row["driver"] == expected_driver and row["state"] == "available"


def test_labels_and_taints(lab: Gf) -> None:
    lab.run("validate", code=1)
    (one,) = lab.json("labels", "gpu-03")
    assert one["host"] == "gpu-03"
    labels = one["labels"]
    assert labels["gpufleet.io/fabric"] == "none"  # its IB port is down
    assert "gpufleet.io/validated.training-multinode" not in labels
    assert labels["gpufleet.io/validated.inference"] == "true"
    assert labels["gpufleet.io/state"] == "available"
    assert labels["gpufleet.io/pool"] == POOL
    assert labels["nvidia.com/gpu.count"] == "8"
    assert "H100" in labels["nvidia.com/gpu.product"]
    driver = labels["nvidia.com/cuda.driver-version.full"]
    assert driver == lab.json("baseline", "show", "h100-lab")["driver"]
    major, minor, rev = driver.split(".")
    assert labels["nvidia.com/cuda.driver-version.major"] == major
    assert labels["nvidia.com/cuda.driver-version.minor"] == minor
    assert labels["nvidia.com/cuda.driver-version.revision"] == rev
    assert one["taints"] == []

    everyone = {r["host"]: r for r in lab.json("labels")}
    assert set(everyone) == {f"gpu-0{i}" for i in range(1, 9)}
    problems: list[str] = []
    for host, r in everyone.items():
        assert r["labels"], host
        for k, v in r["labels"].items():
            for p in (k8s_key_problem(k), k8s_value_problem(v)):
                if p:
                    problems.append(f"{host}: label {p}")
        for t in r["taints"]:
            for p in (k8s_key_problem(t["key"]), k8s_value_problem(t["value"])):
                if p:
                    problems.append(f"{host}: taint {p}")
            if t["effect"] not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                problems.append(f"{host}: taint effect {t['effect']!r}")
    assert problems == []

    assert everyone["gpu-04"]["taints"] == [
        {"key": "gpufleet.io/quarantined", "value": "gpu_lost", "effect": "NoSchedule"}
    ]
    assert everyone["gpu-04"]["labels"]["nvidia.com/gpu.count"] == "7"
    assert everyone["gpu-01"]["labels"]["gpufleet.io/fabric"] == "ib"
    assert {k for k in everyone["gpu-01"]["labels"] if ".validated." in k or
            k.startswith("gpufleet.io/validated.")} == {
        f"gpufleet.io/validated.{p}" for p in ALL_PROFILES
    }
    # Hosts that are not available carry no validated.* labels.
    for host in ("gpu-02", "gpu-04"):
        assert not [k for k in everyone[host]["labels"] if "validated." in k], host
    # gpu-02 (validating) is kept off as not ready; available hosts carry no taint.
    assert everyone["gpu-02"]["taints"] == [
        {"key": "gpufleet.io/not-ready", "value": "validating", "effect": "NoSchedule"}
    ]
    assert [h for h, r in everyone.items() if r["taints"]] == ["gpu-02", "gpu-04"]
    # A pool selector gives the same hosts.
    assert [r["host"] for r in lab.json("labels", f"pool:{POOL}")] == sorted(everyone)


def test_collect_exit_1_when_a_host_fails(gf: Gf) -> None:
    gf.run("lab", "create", "--hosts", "4", "--model", "h100-8x", "--dir", str(gf.lab),
           "--fault", "gpu-03=unreachable")
    gf.run("enroll", "-i", str(gf.lab / "inventory.ini"))
    rep = gf.json("collect", code=1)
    outcomes = {h["host"]: h["outcome"] for h in rep["hosts"]}
    assert outcomes == {"gpu-01": "ok", "gpu-02": "ok", "gpu-03": "unreachable", "gpu-04": "ok"}
    assert rep["counts"] == {"ok": 3, "unreachable": 1}
    assert next(h for h in rep["hosts"] if h["host"] == "gpu-03")["reason"]

    # The healthy hosts alone collect fine: exit 0.
    ok = gf.json("collect", "gpu-01,gpu-02,gpu-04")
    assert ok["counts"] == {"ok": 3}

    # Human output names the failing host; validate skips it and exits 1.
    human = flat(gf.run("collect", code=1).stdout)
    assert "gpu-03" in human and "unreachable" in human
    verdicts = {v["host"]: v for v in gf.json("validate", code=1)}
    assert verdicts["gpu-03"]["skipped"] and "unreachable" in verdicts["gpu-03"]["skipped"]
    assert verdicts["gpu-03"]["state"] == "enrolled"
    assert all(verdicts[h]["state"] == "available" for h in ("gpu-01", "gpu-02", "gpu-04"))
    # Validating only the collected hosts: all end available, exit 0.
    assert {v["state"] for v in gf.json("validate", "gpu-01,gpu-02,gpu-04")} == {"available"}

    sm = gf.json("summary")
    assert [(u["host"], u["fault"]) for u in sm["unreachable"]] == [("gpu-03", "unreachable")]
    assert sm["per_state"] == {"available": 3, "enrolled": 1}


def test_errors_name_what_is_wrong(lab: Gf) -> None:
    lab.run("validate", code=1)
    # Unknown host: exit 4, message naming the host.
    for argv in (
        ("hosts", "show", "gpu-99"),
        ("maintenance", "on", "gpu-99", "--reason", "x"),
        ("retire", "gpu-99"),
        ("change", "record", "gpu-99", "--kind", "reimage"),
        ("baseline", "create", "other", "--from-host", "gpu-99"),
    ):
        r = lab.run(*argv, code=4)
        assert "gpu-99" in flat(r.stderr), (argv, r.stderr)
        assert r.stdout == "", (argv, r.stdout)
    r = lab.run("baseline", "show", "nope", code=4)
    assert "nope" in r.stderr

    # Illegal transition: exit 5, stderr naming host, state and event.
    r = lab.run("maintenance", "off", "gpu-01", code=5)
    err = flat(r.stderr)
    assert "gpu-01" in err and "'available'" in err and "maintenance_off" in err, err
    r = lab.run("unquarantine", "gpu-01", "--reason", "nothing", code=5)
    assert "unquarantine" in flat(r.stderr) and "gpu-01" in flat(r.stderr)
    # Refusals change nothing.
    assert lab.json("hosts", "list", "gpu-01")[0]["state"] == "available"

    # Bad input: exit 2.
    r = lab.run("hosts", "list", "colour:blue", code=2)
    assert "colour:blue" in flat(r.stderr)
    lab.run("baseline", "create", "h100-lab", "--from-host", "gpu-01", code=2)  # exists


def test_events_and_evidence(lab: Gf) -> None:
    """The audit log listing, and active-test evidence that feeds the next validation."""
    lab.run("validate", code=1)
    alarms = lab.json("events", "--kind", "transition", "--limit", "500")
    hosts = {e["host"] for e in alarms}
    assert {"gpu-01", "gpu-04"} <= hosts
    assert all(e["actor"] == ACTOR for e in alarms)
    only = lab.json("events", "gpu-04", "--limit", "500")
    assert only and {e["host"] for e in only} == {"gpu-04"}
    # A failing gpu-burn on gpu-05 costs it the profiles that require stress tests.
    burn = lab.tmp / "burn.log"
    real = (Path(__file__).parents[1] / "fixtures" / "captured" / "active"
            / "superbench_gpu_burn.excerpt.log").read_text()
    assert "\tGPU 1: OK" in real
    burn.write_text(real.replace("\tGPU 1: OK", "\tGPU 1: FAULTY"))  # the real capture, GPU 1 bad
    lab.run("evidence", "add", "gpu-05", str(burn), "--kind", "gpu-burn")
    assert any(e["kind"] == "evidence" for e in lab.json("events", "gpu-05"))
    verdicts = {v["host"]: v for v in lab.json("validate", "gpu-05", code=0)}
    profiles = set(verdicts["gpu-05"]["profiles"])
    assert "training-single" not in profiles and "training-multinode" not in profiles
    assert {"inference", "test"} <= profiles
