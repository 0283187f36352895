"""Issue 29 items 5 and 6 through the real ASGI app on SQLite and PostgreSQL: the host page and
``GET /api/v1/hosts/{name}`` of Ascend, AMD and MetaX lab hosts (the lab replays the real
captures) show each vendor's accelerators and stack, never an NVIDIA phrase; the API docs
pages load only the server's own files (Swagger UI and ReDoc bundled)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.tokens import Role, create_token
from gpufleet.service.hosts.collect import collect
from gpufleet.web.app import attach
from tests.web.test_dashboard import signed_in

MODELS = ["ascend-910b3-8x", "mi100-4x", "c500-8x"]


@pytest.fixture
def mixed(fleet: Fleet, tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    enroll_lab(fleet, tmp_path / "lab", 3, models=MODELS, faults={"gpu-01": ["npu-alarm:5"]})
    collect(fleet)
    token = create_token(fleet, "dash", Role.VIEWER)[1]
    app = create_app(fleet, TokenStore(None))
    attach(app, fleet, app.state.ctx.tokens)
    with TestClient(app) as c:
        yield c, token


def _cells(html: str, row: int) -> list[str]:
    table = html.split('data-testid="gpu-table"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr class=\"[^\"]*\" data-vendor=[^>]*>(.*?)</tr>", table, re.S)
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>",
                                                                 rows[row], re.S)]


def test_other_vendors_host_pages_and_json(mixed: tuple[TestClient, str]) -> None:
    web, token = mixed
    signed_in(web, token)
    want = {
        "gpu-01": ("huawei", 8, ["CANN 7.0.T10", "npu-smi 24.1.rc1.b030"], "910B3", "NPUs"),
        "gpu-02": ("amd", 4, ["Driver 6.3.6", "ROCM -"], "Instinct MI100", "GPUs"),
        "gpu-03": ("metax", 8, ["MACA 3.3.0.15", "mx-smi 2.2.9"], "C500", "GPUs"),
    }
    for host, (vendor, n, stack, model, noun) in want.items():
        html = web.get(f"/hosts/{host}").text
        para = html.split(f'data-testid="vendor-{vendor}"', 1)[1].split("</p>", 1)[0]
        flat = " ".join(re.sub(r"<[^>]+>", " ", para).split())
        assert f"{n} {noun} × {model}" in flat and all(s in flat for s in stack), flat
        assert html.count(f'data-vendor="{vendor}"><td>') == n
        assert _cells(html, 0)[1] == model
        for phrase in ("Never collected", "CUDA", "nvidia-smi", "NVIDIA"):
            assert phrase not in html, (host, phrase)
        doc = web.get(f"/api/v1/hosts/{host}", headers={"Authorization": f"Bearer {token}"})
        assert doc.status_code == 200, doc.text
        d = doc.json()
        assert [(s["vendor"], s["count"]) for s in d["software"]] == [(vendor, n)]
        assert [a["model"] for a in d["accelerators"]] == [model] * n
        assert d["summary"]["nvidia_smi_error"] is None and d["facts"]["nvidia_smi_error"]
    npu5 = _cells(web.get("/hosts/gpu-01").text, 5)
    assert npu5[0] == "5" and npu5[8] == "alarm" and npu5[9].startswith("A4025021")
    assert _cells(web.get("/hosts/gpu-01").text, 4)[8] == "ok"


def test_api_docs_are_served_from_bundled_assets(mixed: tuple[TestClient, str]) -> None:
    web, _ = mixed
    for path in ("/api/v1/docs", "/api/v1/redoc"):
        r = web.get(path)
        assert r.status_code == 200 and "text/html" in r.headers["content-type"]
        csp = r.headers["content-security-policy"]
        assert "https:" not in csp and "unsafe-inline" not in csp.split("style-src")[0]
        assert "<script>" not in r.text  # no inline script: the policy allows none
        srcs = re.findall(r'(?:src|href)="([^"]+)"', r.text)
        assert srcs and all(s.startswith("/api/v1/docs/") for s in srcs), srcs
        for s in srcs:
            got = web.get(s)
            assert got.status_code == 200 and len(got.content) > 500, s
    bundle = web.get("/api/v1/docs/assets/swagger-ui-bundle.js")
    assert len(bundle.content) > 500_000
    r = web.get("/redoc", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/api/v1/redoc"
    assert 'spec-url="/api/v1/openapi.json"' in web.get("/api/v1/redoc").text
