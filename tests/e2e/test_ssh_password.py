"""SSH password from the encrypted secret store, on real sshd lab hosts, both databases.

An inventory's ``ansible_ssh_pass`` / ``ansible_password`` is stored sealed (``fernet:...``);
collection opens it only when the run's target is built and logs in with it when no key is
accepted (keys are still tried first). Without the operator's key that host fails with a
reason naming GPUFLEET_SECRET_KEY; the clear password is never stored or shown.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select
from tests.sshlab import LAB_PASSWORD
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.collect.transport import Outcome, Target
from gpufleet.config import with_overrides
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet
from gpufleet.lab.renderers import render_sections
from gpufleet.secrets import SEALED_PREFIX, SecretBox
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.store.tables import Base, Host

pytestmark = pytest.mark.sshlab

WRONG = "not-the-lab-password"


def _everything_stored(fleet: Fleet) -> str:
    """Every row of every table, as text (to look for a clear secret)."""
    out: list[str] = []
    with fleet.db.engine.connect() as c:
        for table in Base.metadata.sorted_tables:
            out += [repr(tuple(row)) for row in c.execute(select(table))]
    return "\n".join(out)


def test_password_login_from_the_sealed_inventory_variable(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    names = ["pw-only", "pw-and-key", "pw-wrong"]
    lab_hosts = create_fleet(3, models=["a100-8x"], faults={}).hosts
    lab = sshlab_factory()
    t = {
        n: lab.add_host(n, render_sections(h), password_auth=True)
        for n, h in zip(names, lab_hosts, strict=True)
    }
    lab.start()

    def line(n: str, extra: str) -> str:
        where = f"ansible_host=127.0.0.1 ansible_port={t[n].port} ansible_user={lab.user}"
        return f"{n} {where} {extra}"

    (tmp_path / "hosts.ini").write_text(
        "[gpu]\n"
        + line("pw-only", f"ansible_ssh_pass={LAB_PASSWORD}") + "\n"
        # The key is accepted too: it is tried first, the (wrong) password never matters.
        + line("pw-and-key", f"ansible_password={WRONG} ansible_ssh_private_key_file="
               f"{lab.client_key}") + "\n"
        + line("pw-wrong", f"ansible_password={WRONG}") + "\n"
        + "\n[gpu:vars]\ngpufleet_gpu_count=8\n"
    )
    key = Fernet.generate_key()
    enroll(fleet, load_inventory(tmp_path / "hosts.ini"), box=SecretBox(key))
    with fleet.db.session() as s:
        stored = {h.name: dict(h.vars) for h in s.scalars(select(Host))}
    assert stored["pw-only"]["ansible_ssh_pass"].startswith(SEALED_PREFIX)
    assert LAB_PASSWORD not in _everything_stored(fleet)

    # Without the operator's key: every host holding a sealed password fails, named, no crash.
    no_key = {r.host: r for r in collect(fleet, timeout_s=20).results}
    for n in ("pw-only", "pw-and-key", "pw-wrong"):
        assert no_key[n].outcome is Outcome.ERROR
        assert "GPUFLEET_SECRET_KEY" in no_key[n].reason, no_key[n].reason
        assert "ansible_" in no_key[n].reason
    assert lab.sshd_log("pw-only").count("Accepted") == 0  # refused before connecting

    # A different key cannot open it either.
    fleet.settings = with_overrides(fleet.settings, secret_key=Fernet.generate_key().decode())
    other = {r.host: r for r in collect(fleet, timeout_s=20).results}
    assert other["pw-only"].outcome is Outcome.ERROR
    assert "cannot be decrypted" in other["pw-only"].reason
    assert "GPUFLEET_SECRET_KEY" in other["pw-only"].reason

    fleet.settings = with_overrides(fleet.settings, secret_key=key.decode())
    res = {r.host: r for r in collect(fleet, timeout_s=20).results}
    assert res["pw-only"].outcome is Outcome.OK, res["pw-only"].reason
    assert res["pw-only"].gpus == 8
    assert f"Accepted password for {lab.user}" in lab.sshd_log("pw-only")
    assert res["pw-and-key"].outcome is Outcome.OK, res["pw-and-key"].reason
    log = lab.sshd_log("pw-and-key")
    assert f"Accepted publickey for {lab.user}" in log and "Accepted password" not in log
    assert res["pw-wrong"].outcome is Outcome.AUTH_FAILED
    assert "Permission denied (publickey,password)" in res["pw-wrong"].reason

    everything = _everything_stored(fleet)
    for secret in (LAB_PASSWORD, WRONG):
        assert secret not in everything
        assert all(secret not in r.reason for r in [*res.values(), *no_key.values()])


def test_the_target_never_shows_its_password() -> None:
    t = Target("h", "10.0.0.1", user="u", password=LAB_PASSWORD)
    assert LAB_PASSWORD not in repr(t) and LAB_PASSWORD not in str(t)
    assert t.password == LAB_PASSWORD
