"""service/core/pipeline.py: ``evidence run`` on the claim -> run -> apply engine of ``collect``,
over real sshd hosts, on SQLite and PostgreSQL: --forks hosts at once, --timeout per host,
hosts held by another worker left alone, every claim released (also on Ctrl-C)."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from tests.sshlab_fixtures import SshLabFactory, sample_sections

from gpufleet.collect.transport import RawResult, Target
from gpufleet.domain.events import EvidenceKind
from gpufleet.inventory import load_inventory
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import claim
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.evidence import run_active
from gpufleet.store.tables import EvidenceRow, Host

DCGM = (
    Path(__file__).parents[1]
    / "fixtures/captured/dcgm/nvidia-dcgm_JsonResultTests_real-output_diag-3.1.0_8gpu.txt"
)
PAUSE_S = 1.5


def _claims(fleet: Fleet) -> dict[str, str | None]:
    with fleet.db.session() as s:
        return {h.name: h.claim_token for h in s.scalars(select(Host).order_by(Host.name))}


def _enroll(fleet: Fleet, tmp_path: Path, targets: list[Target]) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "\n".join(
            f"{t.name} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user} "
            f"ansible_ssh_private_key_file={t.key_file}"
            for t in targets
        )
        + "\n"
    )
    enroll(fleet, load_inventory(inv))


@pytest.fixture
def lab(sshlab_factory: SshLabFactory) -> tuple[list[Target], str]:
    """Four real sshd hosts and a command that takes PAUSE_S, then prints real DCGM output."""
    lab_ = sshlab_factory()
    targets = [lab_.add_host(f"node-{i}", sample_sections(f"node-{i}")) for i in (1, 2, 3, 4)]
    lab_.start()
    capture = lab_.root / "dcgm.json"  # readable by the lab's login user
    capture.write_text(DCGM.read_text())
    capture.chmod(0o644)
    return targets, f"sleep {PAUSE_S}; cat {capture}"


def test_evidence_run_honours_forks_and_releases_claims(
    fleet: Fleet, tmp_path: Path, lab: tuple[list[Target], str]
) -> None:
    targets, command = lab
    _enroll(fleet, tmp_path, targets)
    started: list[int] = []
    t0 = time.monotonic()
    runs = run_active(fleet, None, "dcgm", command=command, forks=4, on_start=started.append)
    parallel = time.monotonic() - t0
    assert started == [4]
    assert [(r.host, r.ok) for r in runs] == [(f"node-{i}", True) for i in (1, 2, 3, 4)]
    assert all("8 GPUs" in r.summary for r in runs)
    # One at a time it takes at least 4 pauses; four at once well under that.
    assert parallel < 3 * PAUSE_S, parallel
    t0 = time.monotonic()
    run_active(fleet, None, "dcgm", command=command, forks=1)
    assert time.monotonic() - t0 >= 4 * PAUSE_S
    assert set(_claims(fleet).values()) == {None}
    with fleet.db.session() as s:
        rows = list(s.scalars(select(EvidenceRow)))
    assert len(rows) == 8 and {r.kind for r in rows} == {EvidenceKind.DCGM}
    assert all(r.passed for r in rows)


def test_evidence_run_timeout_held_hosts_and_ctrl_c(
    fleet: Fleet, tmp_path: Path, lab: tuple[list[Target], str]
) -> None:
    targets, command = lab
    _enroll(fleet, tmp_path, targets)
    # --timeout: a test longer than the timeout fails that host, nothing is stored.
    runs = run_active(fleet, "node-1", "dcgm", command="sleep 30; cat x", timeout_s=2)
    assert not runs[0].ok and runs[0].summary.startswith("timeout")
    assert _claims(fleet)["node-1"] is None
    # A host another worker holds (a collection) is reported, not tested twice.
    claim(fleet, "node-2", None, timedelta(minutes=10))
    runs = run_active(fleet, "node-1,node-2", "dcgm", command=command)
    by = {r.host: r for r in runs}
    assert by["node-1"].ok and not by["node-2"].ok
    assert "another worker holds" in by["node-2"].summary
    held = _claims(fleet)
    assert held["node-1"] is None and held["node-2"] is not None  # the other worker's claim

    # Ctrl-C while the first result arrives: every claim of this run is released.
    def interrupt(_r: RawResult) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_active(fleet, "node-1,node-3,node-4", "dcgm", command=command, forks=1,
                   on_result=interrupt)
    after = _claims(fleet)
    assert after["node-1"] is None and after["node-3"] is None and after["node-4"] is None
    with fleet.db.session() as s:
        assert s.scalar(select(EvidenceRow).where(EvidenceRow.host_id.is_not(None))) is not None
