"""Site health rules are validated at load (issue 24 item 4): a kind/scope/metric the engine
cannot evaluate is refused with the file and the line of the rule, exit 2 (config error),
before any host is probed; the rules it can evaluate (``scope: host`` on ``gpus_missing``,
``kind: observe``) are accepted and fire. On main 84be469 ``scope: host`` is accepted and can
never fire, and an error names no line."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat

from gpufleet.domain.rules import RulePolicy
from gpufleet.errors import ConfigError
from gpufleet.lab.fleet import create_fleet, write_inventory

BAD = {
    "scope host on a GPU metric": (
        "  - id: hot-host\n    kind: threshold\n    scope: host\n    metric: temperature_c\n"
        "    value: 90\n    severity: critical\n",
        "metric 'temperature_c' cannot be evaluated for kind threshold scope host",
    ),
    "a flag on a port": (
        "  - id: port-flag\n    kind: flag\n    scope: port\n    metric: link_downed\n"
        "    severity: warning\n",
        "kind flag with scope port cannot be evaluated",
    ),
    "an unknown port counter": (
        "  - id: port-x\n    kind: increase\n    scope: port\n    metric: nonsense\n"
        "    severity: warning\n",
        "metric 'nonsense' cannot be evaluated",
    ),
    "an increase on a disk": (
        "  - id: disk-grow\n    kind: increase\n    scope: disk\n    metric: used_pct\n"
        "    severity: warning\n",
        "kind increase with scope disk cannot be evaluated",
    ),
    "an unknown observe failure": (
        "  - id: obs\n    kind: observe\n    metric: gpu_on_fire\n    severity: critical\n",
        "metric 'gpu_on_fire' cannot be evaluated for kind observe",
    ),
    "an xid rule on a GPU scope": (
        "  - id: x\n    kind: xid\n    scope: gpu\n    codes: [79]\n    severity: critical\n",
        "an xid rule is about the host",
    ),
}
HEAD = 'version: "site-1"\nrules:\n  - id: gpu-temperature\n    value: 88\n'


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_rule_the_engine_cannot_evaluate_is_refused_with_file_and_line(
    case: str, tmp_path: Path
) -> None:
    text, why = BAD[case]
    f = tmp_path / "site-rules.yaml"
    f.write_text(HEAD + text)
    with pytest.raises(ConfigError) as err:
        RulePolicy.load_default().merged(f.read_text(), source=str(f))
    assert err.value.exit_code == 2
    assert f"{f}:5: rule " in str(err.value), str(err.value)  # the second rule starts on line 5
    assert why in str(err.value)


def test_host_rules_the_engine_evaluates_are_accepted() -> None:
    site = RulePolicy.load_default().merged(
        "rules:\n"
        "  - {id: gpu-count-low, consecutive: 1}\n"
        "  - {id: two-missing, kind: threshold, scope: host, metric: gpus_missing, op: '>=',"
        " value: 2, severity: critical, action: reboot}\n"
        "  - {id: cut-lines, kind: observe, metric: kmsg_unreadable, severity: critical,"
        " action: escalate}\n",
        source="site.yaml",
    )
    assert site.rule("gpu-count-low").consecutive == 1
    assert site.rule("two-missing").scope == "host"
    assert site.rule("cut-lines").scope == "host"


@pytest.fixture(params=["sqlite", "postgres"])
def cli(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    c = cli_for_backend(request, tmp_path, "alice")
    d = tmp_path / "lab"
    d.mkdir()
    fl = create_fleet(2, models=["h100-8x"], faults={})
    fl.save(d)
    write_inventory(fl, d / "inventory.ini", transport="sim", lab_dir=d)
    c.run("enroll", "-i", str(d / "inventory.ini"))
    return c


def test_inspect_refuses_a_site_rule_it_cannot_evaluate_exit_2(cli: Cli, tmp_path: Path) -> None:
    f = tmp_path / "site-rules.yaml"
    f.write_text(HEAD + BAD["scope host on a GPU metric"][0])
    cli.env["GPUFLEET_HEALTH_RULES"] = str(f)
    r = cli.run("inspect", code=2)
    out = flat(r.stdout + (r.stderr or ""))
    assert f"{f.name}:5: rule 'hot-host'" in out, out
    assert "cannot be evaluated" in out
    assert "gpu-01" not in out  # refused before any host was probed
