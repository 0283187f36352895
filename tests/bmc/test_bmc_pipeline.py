"""``bmc status`` is a pipeline run on the engine (issue 25, item 3), on SQLite and
PostgreSQL, against the sushy-tools emulator: the reads are stored by the engine's database
executor (no statement on the event loop, the Redfish reads in threads of the engine's loop),
a BMC that does not answer is a failed host (``unreachable``, stored so, never ``ok``), and a
host whose collection claim is held elsewhere is read all the same, its claim untouched (a
BMC is read exactly when the in-band work is stuck)."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select
from tests.bmc.conftest import BMC_PASSWORD, BMC_USER
from tests.bmc.redfishlab import Emulator, free_port

from gpufleet.inventory import load_inventory
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts import bmc
from gpufleet.service.hosts.enroll import enroll
from gpufleet.store.tables import BmcRead, Host

pytestmark = pytest.mark.xdist_group("redfish")


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def test_bmc_status_runs_on_the_pipeline_and_an_unreachable_bmc_fails(
    fleet: Fleet, tmp_path: Path, static_bmc: Emulator
) -> None:
    pw = tmp_path / "bmc.pw"
    pw.write_text(BMC_PASSWORD + "\n")
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens: refused
    lines = [f"{name} ansible_host=127.0.0.1 ansible_port={free_port()} "
             f"gpufleet_bmc_address={url}"
             for name, url in (("gpu-01", static_bmc.url), ("gpu-02", down),
                               ("gpu-03", static_bmc.url))]
    (tmp_path / "hosts.ini").write_text(
        "[gpu]\n" + "\n".join(lines) + "\n\n[gpu:vars]\n"
        f"gpufleet_bmc_username={BMC_USER}\ngpufleet_bmc_password_file={pw}\n")
    enroll(fleet, load_inventory(tmp_path / "hosts.ini"))
    until = fleet.now() + timedelta(hours=1)
    with fleet.db.session() as s:  # a collection elsewhere holds gpu-03
        h3 = s.scalars(select(Host).where(Host.name == "gpu-03")).one()
        h3.claim_token, h3.claimed_until = "collect-elsewhere", until
    seen: list[tuple[str, bool]] = []

    def statement(*_args: Any) -> None:
        seen.append((threading.current_thread().name, _on_a_loop()))

    reported: list[str] = []
    event.listen(fleet.db.engine, "before_cursor_execute", statement)
    try:
        got = bmc.bmc_status(fleet, forks=2, timeout_s=3, deadline_s=10,
                             on_result=lambda st: reported.append(st.host))
    finally:
        event.remove(fleet.db.engine, "before_cursor_execute", statement)
    by = {st.host: st for st in got}
    assert sorted(reported) == ["gpu-01", "gpu-02", "gpu-03"]  # each as it was stored
    assert (by["gpu-01"].outcome, by["gpu-01"].power_state) == ("ok", "On")
    assert by["gpu-03"].ok  # read while its collection claim is held elsewhere
    assert by["gpu-02"].outcome == "unreachable" and not by["gpu-02"].ok
    assert by["gpu-02"].power_state is None and by["gpu-02"].health is None
    assert not [name for name, loop in seen if loop], "a statement ran on the event loop"
    assert any(name.startswith("gpufleet-db") for name, _ in seen)  # stored by the executor
    with fleet.db.session() as s:
        stored = {
            name: outcome
            for name, outcome in s.execute(
                select(Host.name, BmcRead.outcome).join(Host, Host.id == BmcRead.host_id))
        }
        h3 = s.scalars(select(Host).where(Host.name == "gpu-03")).one()
        assert (h3.claim_token, h3.claimed_until is not None) == ("collect-elsewhere", True)
    assert {k: str(v) for k, v in stored.items()} == {
        "gpu-01": "ok", "gpu-02": "unreachable", "gpu-03": "ok"}
