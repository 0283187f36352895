"""Real TLS to a BMC, on SQLite and PostgreSQL: sushy-static serves the unedited DMTF
public-tower mockup over HTTPS with a self-signed certificate made here by ``openssl req
-x509``. Default verification refuses it (a clear per-host ``tls`` outcome, the other BMC still
read); the certificate as CA bundle (``gpufleet_bmc_ca_bundle`` in the inventory, or ``bmc set
--ca-bundle``) is accepted; ``--insecure`` (``gpufleet_bmc_insecure``) is accepted too."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.bmc.conftest import BMC_PASSWORD, BMC_USER
from tests.bmc.redfishlab import TOWER, Emulator, free_port, start_static

from gpufleet.inventory import load_inventory
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.bmc import bmc_status, set_bmc
from gpufleet.service.hosts.enroll import enroll

pytestmark = pytest.mark.xdist_group("redfish")

TOWER_SERIAL = "437XR1238R2"


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    crt, key = d / "bmc.crt", d / "bmc.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(crt)],
        check=True, capture_output=True,
    )
    return crt, key


@pytest.fixture(scope="module")
def tls_bmc(
    cert: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Emulator]:
    em = start_static(TOWER, tmp_path_factory.mktemp("tls-static"), tls=cert)
    yield em
    em.stop()


def test_self_signed_bmc_refused_by_default_accepted_with_its_ca_or_insecure(
    fleet: Fleet, tls_bmc: Emulator, cert: tuple[Path, Path], tmp_path: Path
) -> None:
    assert tls_bmc.url.startswith("https://")
    pw = tmp_path / "bmc.pw"
    pw.write_text(BMC_PASSWORD + "\n")
    common = (f"gpufleet_bmc_address={tls_bmc.url} gpufleet_bmc_username={BMC_USER} "
              f"gpufleet_bmc_password_file={pw}")
    (tmp_path / "hosts.ini").write_text(
        "[gpu]\n"
        f"gpu-verify ansible_host=127.0.0.1 ansible_port={free_port()} {common}\n"
        f"gpu-later ansible_host=127.0.0.1 ansible_port={free_port()} {common}\n"
        f"gpu-ca ansible_host=127.0.0.1 ansible_port={free_port()} {common} "
        f"gpufleet_bmc_ca_bundle={cert[0]}\n"
        f"gpu-insecure ansible_host=127.0.0.1 ansible_port={free_port()} {common} "
        "gpufleet_bmc_insecure=true\n"
    )
    enroll(fleet, load_inventory(tmp_path / "hosts.ini"))
    by = {st.host: st for st in bmc_status(fleet)}
    refused = by["gpu-verify"]
    assert refused.outcome == "tls", refused.reason
    assert refused.reason and "TLS certificate not trusted" in refused.reason
    assert "gpu-verify" in refused.reason or "127.0.0.1" in refused.reason
    assert by["gpu-later"].outcome == "tls"
    for name in ("gpu-ca", "gpu-insecure"):
        st = by[name]
        assert st.outcome == "ok", st.reason
        assert st.identity and st.identity["serial"] == TOWER_SERIAL

    # bmc set --ca-bundle (the CLI's service) on the refused host: now read over verified TLS.
    set_bmc(fleet, "gpu-later", ca_bundle=str(cert[0]))
    [st] = bmc_status(fleet, "gpu-later")
    assert st.outcome == "ok", st.reason
    # A CA bundle that is not this BMC's issuer is still refused.
    other = tmp_path / "other.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=other", "-keyout", str(tmp_path / "other.key"), "-out", str(other)],
        check=True, capture_output=True,
    )
    set_bmc(fleet, "gpu-later", ca_bundle=str(other))
    [st] = bmc_status(fleet, "gpu-later")
    assert st.outcome == "tls", st.reason
    # bmc set --insecure: verification off for that host only, when asked.
    set_bmc(fleet, "gpu-later", insecure=True)
    [st] = bmc_status(fleet, "gpu-later")
    assert st.outcome == "ok", st.reason
    [again] = bmc_status(fleet, "gpu-verify")
    assert again.outcome == "tls"
