"""Plain-data hosts for domain tests: a clean 8x H100 SXM HGX host, its pool spec and baseline.

Tests derive broken hosts from the clean one with ``make_facts(...)`` overrides. The factories
ship with the package in :mod:`gpufleet.testing`; these fixtures hand them to the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import pytest

from gpufleet.domain.facts import Gpu, HostFacts, IbPort
from gpufleet.domain.spec import Baseline, ExpectedSpec
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
