"""Plain-data hosts for domain tests: a clean 8x H100 SXM HGX host, its pool spec and baseline.

Tests derive broken hosts from the clean one with ``make_facts(...)`` overrides. The factories
ship with the package in :mod:`gpufleet.testing`; these fixtures hand them to the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import pytest

from gpufleet.collect.active import parse_dcgm_diag_json
from gpufleet.domain.checks import ActiveEvidence
from gpufleet.domain.evidence import NcclResult
from gpufleet.domain.facts import Gpu, HostFacts, IbPort
from gpufleet.domain.spec import Baseline, ExpectedSpec
from gpufleet.lab.captures import captures_dir
from gpufleet.testing import BASELINE, NOW, SPEC, ib_port, make_facts, make_gpu


@pytest.fixture
def facts_factory() -> Callable[..., HostFacts]:
    return make_facts


@pytest.fixture
def gpu_factory() -> Callable[..., Gpu]:
    return make_gpu


@pytest.fixture
def port_factory() -> Callable[..., IbPort]:
    return ib_port


@pytest.fixture
def facts() -> HostFacts:
    return make_facts()


@pytest.fixture
def spec() -> ExpectedSpec:
    return SPEC


@pytest.fixture
def baseline() -> Baseline:
    return BASELINE


@pytest.fixture
def now() -> datetime:
    return NOW


#: A DCGM diag that passed: NVIDIA's published real 8-GPU output, run at level 2.
DCGM_L2 = parse_dcgm_diag_json(
    (captures_dir() / "dcgm/nvidia-dcgm_JsonResultTests_real-output_diag-3.1.0_8gpu.txt")
    .read_text(),
    level=2,
)
#: An all-reduce result (values, not a tool's output: no 8x H100 nccl-tests capture is
#: stored) above the H100 SXM floor of data/nccl_floors.yaml.
NCCL_H100 = NcclResult(
    op="all_reduce", max_bus_bw_gbps=360.0, avg_bus_bw_gbps=110.0, size_max_bytes=8 << 30
)


@pytest.fixture
def proof() -> ActiveEvidence:
    """What the training profiles ask of the clean H100 host: DCGM level 2 and NCCL."""
    return ActiveEvidence(dcgm_diag=DCGM_L2, nccl=NCCL_H100)
