"""The lab plugs into the product: the transport registry and the lazily loaded CLI group."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.collect import transport as tr
from gpufleet.collect.transport import (
    Outcome,
    RawResult,
    Target,
    Transport,
    TransportOptions,
    TransportPlugin,
    get_transport_factory,
    known_transports,
    open_transport,
    register_transport,
    transport_key,
    unregister_transport,
)
from gpufleet.errors import ConfigError
from gpufleet.lab.fleet import create_fleet, write_inventory
from gpufleet.lab.transport import SimTransport
from gpufleet.testing import NOW


def test_builtin_and_entry_point_transports_are_known() -> None:
    assert {"ssh", "local", "sim"} <= set(known_transports())
    assert get_transport_factory("sim").host_vars == ("gpufleet_lab_dir",)


def test_unknown_transport_names_the_known_ones() -> None:
    with pytest.raises(ConfigError) as exc:
        transport_key("telnet", {})
    msg = str(exc.value)
    assert "unknown transport 'telnet'" in msg
    assert "local, sim, ssh" in msg and "gpufleet.transports" in msg


def test_hosts_share_a_transport_per_lab_directory(tmp_path: Path) -> None:
    a = {"gpufleet_transport": "sim", "gpufleet_lab_dir": "/labs/a", "rack": "r1"}
    b = {**a, "rack": "r2"}
    c = {**a, "gpufleet_lab_dir": "/labs/c"}
    assert transport_key("sim", a) == transport_key("sim", b) == ("sim", ("/labs/a",))
    assert transport_key("sim", c) != transport_key("sim", a)
    # ssh reads no host variable: one transport for every ssh host
    assert transport_key("ssh", a) == transport_key("ssh", c) == ("ssh", ())


def test_sim_without_a_lab_directory_is_refused() -> None:
    with pytest.raises(ConfigError, match="gpufleet_lab_dir"):
        open_transport(transport_key("sim", {}))


def test_sim_transport_opens_from_the_registry(tmp_path: Path) -> None:
    fl = create_fleet(2, faults={}, seed=0, now=NOW)
    fl.save(tmp_path)
    write_inventory(fl, tmp_path / "inventory.ini", transport="sim", lab_dir=tmp_path)
    t = open_transport(transport_key("sim", {"gpufleet_lab_dir": str(tmp_path)}))
    assert isinstance(t, SimTransport) and set(t.hosts) == {"gpu-01", "gpu-02"}
    res = asyncio.run(t.run(Target("gpu-02", "10.0.0.2"), "echo @@gpufleet:script", 5))
    assert res.outcome is Outcome.OK and res.output and "gpu-02" in res.output


class _Echo:
    name = "echo"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    async def run(self, target: Target, script: str, timeout_s: float) -> RawResult:
        return RawResult(target.name, Outcome.OK, output=f"{self.prefix}:{target.name}")


def test_a_registered_transport_is_built_with_its_declared_host_vars() -> None:
    seen: list[TransportOptions] = []

    def factory(options: TransportOptions) -> Transport:
        seen.append(options)
        return _Echo(options.host_vars.get("echo_prefix", "-"))

    register_transport("echo", TransportPlugin(factory, host_vars=("echo_prefix",)))
    try:
        key = transport_key("echo", {"echo_prefix": "hi", "other": "x"})
        t = open_transport(key, connect_timeout_s=3)
        assert seen == [TransportOptions(host_vars={"echo_prefix": "hi"}, connect_timeout_s=3)]
        res = asyncio.run(tr.run_many(t, [Target("h1", "h1")], "true"))
        assert res[0].output == "hi:h1"
        assert "echo" in known_transports()
        with pytest.raises(ConfigError, match="transport name"):
            register_transport("bad name", TransportPlugin(factory))
    finally:
        unregister_transport("echo")
    assert "echo" not in known_transports()
    with pytest.raises(ConfigError, match="unknown transport 'echo'"):
        transport_key("echo", {})


def test_gpufleet_help_lists_the_lab_plugin_and_runs_it(tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["--help"], env={"COLUMNS": "120"})
    assert r.exit_code == 0 and " lab " in r.stdout
    r = runner.invoke(app, ["--home", str(tmp_path), "lab", "create", "--hosts", "2",
                            "--no-default-faults", "--json"])
    assert r.exit_code == 0, r.stdout
    assert (tmp_path / "lab" / "inventory.ini").is_file()

