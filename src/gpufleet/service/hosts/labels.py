"""One host's Kubernetes labels and taints from its row: the one place that turns a host's
lifecycle, pool, baseline, spec and its snapshot's facts into :func:`derive_labels` arguments
(:func:`gpufleet.service.views.summary.host_labels` for a selection; :func:`lean_host_labels` for
``gpufleet labels HOST``, which must start fast).

Light on purpose (issue 8, start-up): importing this module imports no SQLAlchemy, ORM
table or service; the facts model and the spec model are imported when used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gpufleet.domain.health import Fault
from gpufleet.domain.labels import (
    FactTail,
    LeaseTag,
    Taint,
    derive_labels,
    derive_taints,
    fact_tail,
    lease_labels,
    lease_taint,
    own_labels,
    usable_fact_labels,
    with_fact_labels,
)
from gpufleet.domain.roles import HostRole
from gpufleet.domain.states import HostState

if TYPE_CHECKING:
    from gpufleet.domain.facts import HostFacts
    from gpufleet.domain.spec import ExpectedSpec
    from gpufleet.domain.spec_stored import LabelSpec


@dataclass
class HostLabels:
    """Labels and taints of one host."""

    host: str
    labels: dict[str, str]
    taints: list[Taint]


def with_lease(hl: HostLabels, tag: LeaseTag) -> HostLabels:
    """Issue 26: an allocated host's labels and taints with its lease's
    (:func:`~gpufleet.domain.labels.lease_labels`, :func:`~gpufleet.domain.labels.lease_taint`):
    only the lessee's pods, which tolerate that taint, land on it."""
    return HostLabels(hl.host, {**hl.labels, **lease_labels(tag)}, [*hl.taints, lease_taint(tag)])


class LabelledHost(Protocol):
    """What labels read of a host (the ``Host`` table row, or the lean read's row)."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def fault(self) -> str | None: ...
    @property
    def pool(self) -> str | None: ...
    @property
    def rack(self) -> str | None: ...
    @property
    def profiles(self) -> list[str]: ...
    @property
    def expected(self) -> dict[str, Any]: ...
    @property
    def usable_gpus(self) -> int | None: ...
    @property
    def unusable_gpus(self) -> list[dict[str, Any]] | None: ...
    @property
    def role(self) -> str: ...


def labels_of(
    h: LabelledHost, facts: HostFacts | dict[str, Any] | None, baseline: str | None
) -> HostLabels:
    """``h``'s labels and taints; ``facts`` its latest facts, or their stored
    ``fact_labels`` (None before the first collection)."""
    from gpufleet.domain.spec import ExpectedSpec

    spec = ExpectedSpec.model_validate(h.expected)
    return _labels(h, spec, facts, _accelerator_labels(facts), baseline)


def _accelerator_labels(facts: HostFacts | dict[str, Any] | None) -> dict[str, str] | None:
    """Issue 15: the vendors' own accelerator labels of ``facts`` (or of their stored
    ``fact_labels``); None without facts."""
    if facts is None:
        return None
    from gpufleet.service.hosts.vendor_exports import (
        digest_accelerator_labels,
        host_accelerator_labels,
    )

    if isinstance(facts, dict):
        return digest_accelerator_labels(facts.get("accelerators"))
    return host_accelerator_labels(facts)


def _labels(
    h: LabelledHost,
    spec: LabelSpec,
    facts: HostFacts | dict[str, Any] | None,
    accelerators: dict[str, str] | None,
    baseline: str | None,
) -> HostLabels:
    """:func:`labels_of` given the host's expected spec and its facts' accelerator labels."""
    state = HostState(h.state)
    fault = _fault(h.fault)
    if h.role != HostRole.GPU.value:
        return _node_labels(h, spec, state, fault, baseline)
    labels = derive_labels(
        h.name,
        facts,
        state,
        h.pool,
        baseline,
        h.rack,
        _profiles(h, state),
        spec,
        fault,
        usable_gpus=h.usable_gpus,
        unusable_gpus=len(h.unusable_gpus or []),
        accelerator_labels=accelerators,
    )
    return HostLabels(h.name, labels, derive_taints(state, fault))


def _node_labels(
    h: LabelledHost,
    spec: LabelSpec,
    state: HostState,
    fault: Fault | None,
    baseline: str | None,
) -> HostLabels:
    """A cpu/storage node's labels (issue 26 item 9): its own (state, pool, baseline, rack,
    fault, validated profiles) and its role; no GPU, CUDA or accelerator label, so no GPU
    selector ever matches it."""
    own = own_labels(state, h.pool, baseline, h.rack, _profiles(h, state), spec, fault)
    own[ROLE_LABEL] = h.role
    return HostLabels(h.name, own, derive_taints(state, fault))


#: The label naming a node's role on the hosts that are not GPU nodes.
ROLE_LABEL = "gpufleet.io/role"


def _profiles(h: LabelledHost, state: HostState) -> list[str]:
    """The profiles a host is labelled with: those it passed, while it may take work."""
    return h.profiles if state in (HostState.AVAILABLE, HostState.ALLOCATED) else []


def _fault(fault: str | None) -> Fault | None:
    """The host's fault as a :class:`Fault`; None when it has none or another kind."""
    return Fault(fault) if fault and fault in Fault.__members__.values() else None


class FleetLabels:
    """:func:`labels_of` for many hosts (``gpufleet labels`` of a selection, issue 8): what
    hosts share is decoded and derived once per distinct stored value, not once per host:
    the expected spec per distinct ``expected`` text, the stored ``fact_labels`` and the
    vendors' accelerator labels per distinct ``fact_labels`` text (a fleet has a few
    hardware configurations and many hosts of each). The labels are those of
    :func:`labels_of`."""

    def __init__(self) -> None:
        self._specs: dict[str, ExpectedSpec] = {}
        self._facts: dict[str, tuple[dict[str, Any] | None, dict[str, str] | None]] = {}
        self._tails: dict[tuple[Any, ...], FactTail] = {}

    def spec(self, expected: str | None) -> ExpectedSpec:
        """The expected spec stored as ``expected`` (the column's JSON text)."""
        key = expected or "{}"
        spec = self._specs.get(key)
        if spec is None:
            from gpufleet.domain.spec import ExpectedSpec

            spec = ExpectedSpec.model_validate(json.loads(key) or {})
            self._specs[key] = spec
        return spec

    def stored(self, text: str | None) -> dict[str, Any] | None:
        """The usable ``fact_labels`` stored as ``text`` (its JSON text), None when there
        are none or they are of another version (the caller decodes the facts)."""
        return self._stored(text)[0]

    def _stored(self, text: str | None) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
        if text is None:
            return None, None
        got = self._facts.get(text)
        if got is None:
            fl = usable_fact_labels(json.loads(text))
            got = (fl, _accelerator_labels(fl))
            self._facts[text] = got
        return got

    def labels(
        self, h: LabelledHost, expected: str | None, fact_labels: str | None, baseline: str | None
    ) -> HostLabels:
        """``h``'s labels from its stored ``expected`` and usable ``fact_labels`` texts: the
        part the facts give (:func:`~gpufleet.domain.labels.fact_tail`) is derived once per
        distinct stored value, expected fabric and partial GPU counts, then each host's own
        labels are put before it (:func:`~gpufleet.domain.labels.with_fact_labels`): the
        labels of :func:`labels_of`."""
        fl, accelerators = self._stored(fact_labels)
        spec = self.spec(expected)
        if fl is None or fact_labels is None or h.role != HostRole.GPU.value:
            return _labels(h, spec, fl, accelerators, baseline)
        unusable = len(h.unusable_gpus or [])
        key = (fact_labels, spec.ib_rate_gbps, spec.ib_ports, spec.mig_strategy, h.usable_gpus,
               unusable)
        tail = self._tails.get(key)
        if tail is None:
            tail = fact_tail(fl, spec, h.usable_gpus, unusable, accelerators)
            self._tails[key] = tail
        state = HostState(h.state)
        fault = _fault(h.fault)
        own = own_labels(state, h.pool, baseline, h.rack, _profiles(h, state), spec, fault)
        return HostLabels(h.name, with_fact_labels(own, tail), derive_taints(state, fault))

    def from_facts(
        self, h: LabelledHost, expected: str | None, facts: HostFacts | None, baseline: str | None
    ) -> HostLabels:
        """``h``'s labels from its decoded facts (None before the first collection)."""
        return _labels(h, self.spec(expected), facts, _accelerator_labels(facts), baseline)


#: Characters that make a selector more than one plain host name.
_NOT_A_NAME = frozenset(",:*?[")


def lean_host_labels(db_url: str, selector: str | None) -> list[HostLabels] | None:
    """The labels of the one host ``selector`` names, read without SQLAlchemy or the facts
    document (:func:`gpufleet.store.readmodel.host_label_row` and the snapshot's stored
    ``fact_labels``); None when the lean read cannot give exactly what
    :func:`~gpufleet.service.views.summary.host_labels` would (a selector that is not one plain
    name, no such host, a snapshot without usable ``fact_labels``, a database it cannot
    read): then call that."""
    name = (selector or "").strip()
    if not name or _NOT_A_NAME & set(name):
        return None
    from gpufleet.store.readmodel import host_label_row

    row = host_label_row(db_url, name)
    if row is None or row.state == HostState.ALLOCATED:  # its lease is read by the full path
        return None
    stored = usable_fact_labels(row.fact_labels)
    if row.has_snapshot and stored is None:
        return None
    from gpufleet.domain.spec_stored import stored_spec

    spec = stored_spec(row.expected)  # without pydantic when the model would take it as is
    if spec is None:
        return [labels_of(row, stored, row.baseline)]
    return [_labels(row, spec, stored, _accelerator_labels(stored), row.baseline)]
