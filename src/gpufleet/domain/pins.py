"""What a baseline pins, declared once: baseline field <-> host fact <-> drift field <-> check.

Each :class:`Pin` row says which :class:`~gpufleet.domain.spec.Baseline` field holds the pinned
value, how to read the host's value from :class:`~gpufleet.domain.facts.HostFacts`, how the
two compare, the drift field it is reported as, the check that fails on it, and the
``baseline create`` flag that sets it. Everything else is derived from :data:`PINS`:

* drift (:func:`gpufleet.domain.drift.diff_against_baseline` and the ``drift`` report);
* the drift checks (:mod:`gpufleet.domain.checks.drift`) and ``DRIFT_CHECKS``;
* ``baseline create --from-host`` (:func:`baseline_values`) and the ``baseline create`` flags;
* the pinned fields of ``Baseline``: declared in ``spec.py`` for static typing, and held to
  this table at import (:func:`_agree_with_baseline`), so a row without a field (or a field
  without a row) fails the first import.

Adding a pinned fact: one row here, the ``Baseline`` field, and the check in the profiles.

Comparison rules (:class:`Compare`): only facts that were collected are compared (an unknown
driver version is not drift; the GPU checks report that), except for pins with
``missing_is_drift`` (a pinned tool that is not installed is drift: the host lacks what the
baseline promises).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpufleet.domain.accelerators import SoftwareVersions, Vendor
from gpufleet.domain.facts import HostFacts, OsRelease
from gpufleet.domain.mig import host_layout, pinned_layout
from gpufleet.domain.spec import Baseline

#: A pinned value as a baseline holds it: text, accepted versions, or key -> value.
PinValue = str | list[str] | dict[str, str] | None


class Compare(StrEnum):
    """How a pinned value is compared with the host's."""

    #: Equal text once surrounding whitespace is stripped.
    EXACT = "exact"
    #: Equal to one of the host's names (:attr:`Pin.names`), case and spacing aside.
    NORMALISED = "normalised"
    #: Every value the host reports (one per GPU, per HCA ...) is in the accepted list, case
    #: aside; each unaccepted value is one drift item.
    ONE_OF = "one_of"
    #: Every pinned key has the pinned value (spacing aside); drift items are reported per key
    #: as ``<drift_field>.<key>``. An empty map on the host means "not collected".
    MAP = "map"


def norm(value: str) -> str:
    """Case- and spacing-insensitive form (sysctl values come tab-separated from /proc)."""
    return " ".join(value.split()).lower()


def os_image_name(os: OsRelease | None) -> str | None:
    """How a host's OS is shown: PRETTY_NAME, else ``"ID VERSION_ID"``."""
    if os is None:
        return None
    if os.pretty_name:
        return os.pretty_name
    joined = " ".join(p for p in (os.id, os.version_id) if p)
    return joined or None


def os_image_matches(expected: str, os: OsRelease) -> bool:
    """True if ``expected`` equals PRETTY_NAME or ``"ID VERSION_ID"`` (case and spacing aside)."""
    want = norm(expected)
    return any(norm(c) == want for c in _os_names(os))


def _os_names(os: OsRelease) -> list[str]:
    names = [os.pretty_name, " ".join(p for p in (os.id, os.version_id) if p)]
    return [n for n in names if n]


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One difference between a pin and the host: ``actual`` None means "not on the host"."""

    field: str
    expected: str
    actual: str | None


@dataclass(frozen=True, slots=True)
class Pin:
    """One pinned baseline field and everything derived from it (see the module docstring)."""

    #: ``Baseline`` attribute holding the pinned value.
    field: str
    #: Check that fails on drift of this pin (registered by ``checks.drift``).
    check: str
    #: Human name in check messages ("driver version", "VBIOS version").
    label: str
    #: ``DriftItem.field`` (for MAP pins, the prefix of ``<drift_field>.<key>``).
    drift_field: str
    #: The host's value: text (EXACT, NORMALISED), the reported values in order (ONE_OF; one
    #: per GPU, HCA ...), or a map (MAP). None or empty means "not collected".
    fact: Callable[[HostFacts], PinValue]
    compare: Compare = Compare.EXACT
    #: Absent on the host counts as drift (the check fails instead of skipping).
    missing_is_drift: bool = False
    #: NORMALISED: the names the host answers to (default: the fact).
    names: Callable[[HostFacts], list[str]] | None = None
    #: ONE_OF: (owner, value) pairs for the failure message ("GPU 5", "mlx5_0").
    owners: Callable[[HostFacts], list[tuple[str, str]]] | None = None
    #: ONE_OF: how the failure message names the pin ("VBIOS", "HCA firmware") and owners.
    title: str = ""
    owner_prefix: str = ""
    #: The check's one-line description (its docstring).
    doc: str = ""
    #: ``baseline create`` flag and help (ONE_OF and MAP flags repeat; MAP takes KEY=VALUE).
    flag: str = ""
    help: str = ""
    #: MAP: a pin given on top of the host's (``--from-host``) is merged key by key; False:
    #: it replaces the host's map (a MIG layout on ``all`` replaces the per-GPU keys).
    merge: bool = True
    #: What ``--from-host`` pins (default: the host's value as :meth:`captured` reads it).
    capture: Callable[[HostFacts], PinValue] | None = None

    def expected(self, baseline: Baseline) -> PinValue:
        value: PinValue = getattr(baseline, self.field)
        return value

    def actual(self, facts: HostFacts) -> PinValue:
        return self.fact(facts)

    def mismatches(self, facts: HostFacts, baseline: Baseline) -> list[Mismatch]:
        """Where the host differs from ``baseline`` on this pin (nothing when unpinned)."""
        expected = self.expected(baseline)
        if not expected:
            return []
        actual = self.actual(facts)
        if self.compare is Compare.MAP:
            assert isinstance(expected, dict)
            if not isinstance(actual, Mapping) or not actual:
                return []
            out: list[Mismatch] = []
            for key, want in sorted(expected.items()):
                got = actual.get(key)
                if got is None or norm(got) != norm(want):
                    out.append(Mismatch(f"{self.drift_field}.{key}", want, got))
            return out
        if self.compare is Compare.ONE_OF:
            assert isinstance(expected, list)
            accepted = {v.strip().lower() for v in expected}
            seen: list[str] = []
            for v in actual if isinstance(actual, list) else []:
                if v and v.strip().lower() not in accepted and v not in seen:
                    seen.append(v)
            return [Mismatch(self.drift_field, ", ".join(expected), v) for v in seen]
        assert isinstance(expected, str)
        got = actual if isinstance(actual, str) else None
        if got is None and not self.missing_is_drift:
            return []
        if self.compare is Compare.NORMALISED:
            names = self.names(facts) if self.names else ([got] if got else [])
            if any(norm(n) == norm(expected) for n in names):
                return []
        elif expected.strip() == (got or "").strip():
            return []
        return [Mismatch(self.drift_field, expected, got)]

    def captured(self, facts: HostFacts) -> PinValue:
        """The value ``baseline create --from-host`` pins from a known-good host."""
        if self.capture is not None:
            return self.capture(facts)
        actual = self.actual(facts)
        if self.compare is Compare.ONE_OF:
            return sorted(set(actual)) if isinstance(actual, list) else []
        if self.compare is Compare.MAP:
            return dict(actual) if isinstance(actual, Mapping) else {}
        return actual if isinstance(actual, str) else None


# ---------------------------------------------------------------------- fact accessors


def _os_image(f: HostFacts) -> PinValue:
    return os_image_name(f.os)


def _os_image_names(f: HostFacts) -> list[str]:
    return _os_names(f.os) if f.os else []


def _vbios(f: HostFacts) -> PinValue:
    return [g.vbios_version for g in f.gpus if g.vbios_version]


def _vbios_owners(f: HostFacts) -> list[tuple[str, str]]:
    return [(str(g.index), g.vbios_version) for g in f.gpus if g.vbios_version]


def _vendor_versions(f: HostFacts) -> SoftwareVersions | None:
    """The software stack of the host's accelerator vendor other than NVIDIA (issue 15:
    Ascend driver/firmware/CANN, AMD driver/ROCm); None when there is none, or several."""
    others = [v for vendor, v in f.accelerator_versions.items() if vendor != Vendor.NVIDIA]
    return others[0] if len(others) == 1 else None


def _driver(f: HostFacts) -> PinValue:
    """The NVIDIA driver (nvidia-smi); on a host without one, the other vendor's driver."""
    if f.driver_version:
        return f.driver_version
    v = _vendor_versions(f)
    return v.driver if v else None


def _accelerator_firmware(f: HostFacts) -> PinValue:
    v = _vendor_versions(f)
    return v.firmware if v else None


def _runtime(f: HostFacts) -> PinValue:
    v = _vendor_versions(f)
    return v.runtime if v else None


def _hca_firmware(f: HostFacts) -> PinValue:
    return [fw for _, fw in _hca_owners(f)]


def _hca_owners(f: HostFacts) -> list[tuple[str, str]]:
    # ibstat repeats the CA's firmware on every port: one value per adapter.
    by_ca: dict[str, str] = {}
    for p in f.ib_ports or []:
        if p.firmware:
            by_ca.setdefault(p.ca, p.firmware)
    return sorted(by_ca.items())


#: The pins, in drift-report order.
PINS: tuple[Pin, ...] = (
    Pin(
        field="os_image",
        check="os_image",
        label="OS image",
        drift_field="os_image",
        fact=_os_image,
        compare=Compare.NORMALISED,
        names=_os_image_names,
        doc='OS (os-release PRETTY_NAME or "ID VERSION_ID") equals the baseline\'s image.',
        flag="--os",
        help="OS image, e.g. 'Ubuntu 22.04.5 LTS'.",
    ),
    Pin(
        field="kernel",
        check="kernel_version",
        label="kernel",
        drift_field="kernel",
        fact=lambda f: f.kernel,
        doc="Running kernel equals the baseline's.",
        flag="--kernel",
        help="Kernel release (uname -r).",
    ),
    Pin(
        field="driver",
        check="driver_version",
        label="driver version",
        drift_field="driver",
        fact=_driver,
        doc="Accelerator driver version (NVIDIA's; else the Ascend/AMD one) equals the "
        "baseline's.",
        flag="--driver",
        help="Accelerator driver version (NVIDIA; Ascend or AMD on their hosts).",
    ),
    Pin(
        field="cuda",
        check="cuda_version",
        label="CUDA version",
        drift_field="cuda",
        fact=lambda f: f.cuda_version,
        doc="CUDA version (as nvidia-smi reports it) equals the baseline's.",
        flag="--cuda",
        help="CUDA version nvidia-smi reports.",
    ),
    Pin(
        field="accelerator_firmware",
        check="accelerator_firmware",
        label="accelerator firmware version",
        drift_field="accelerator_firmware",
        fact=_accelerator_firmware,
        doc="The Ascend/AMD accelerator firmware package version equals the baseline's.",
        flag="--accel-firmware",
        help="Accelerator firmware package (Ascend firmware version.info).",
    ),
    Pin(
        field="runtime",
        check="runtime_version",
        label="accelerator runtime version",
        drift_field="runtime",
        fact=_runtime,
        doc="The Ascend/AMD runtime version (CANN toolkit, ROCm) equals the baseline's.",
        flag="--runtime",
        help="Accelerator runtime version: CANN (Ascend) or ROCm (AMD).",
    ),
    Pin(
        field="vbios",
        check="vbios",
        label="VBIOS version",
        drift_field="vbios",
        fact=_vbios,
        compare=Compare.ONE_OF,
        owners=_vbios_owners,
        title="VBIOS",
        owner_prefix="GPU ",
        doc="Every GPU's VBIOS is one of the baseline's accepted versions.",
        flag="--vbios",
        help="Accepted VBIOS version; repeatable.",
    ),
    Pin(
        field="container_toolkit",
        check="container_toolkit",
        label="container toolkit",
        drift_field="container_toolkit",
        fact=lambda f: f.container_toolkit,
        missing_is_drift=True,
        doc="NVIDIA Container Toolkit version equals the baseline's (missing counts as drift).",
        flag="--container-toolkit",
        help="nvidia-container-toolkit version.",
    ),
    Pin(
        field="fabric_manager",
        check="fabricmanager_version",
        label="fabric manager version",
        drift_field="fabric_manager",
        fact=lambda f: f.fabricmanager_version,
        missing_is_drift=True,
        doc="nvidia-fabricmanager version equals the baseline's (missing counts as drift).",
        flag="--fabric-manager",
        help="Fabric manager version.",
    ),
    Pin(
        field="hca_firmware",
        check="hca_firmware",
        label="HCA firmware version",
        drift_field="hca_firmware",
        fact=_hca_firmware,
        compare=Compare.ONE_OF,
        owners=_hca_owners,
        title="HCA firmware",
        doc="Every IB/RoCE adapter's firmware (ibstat) is one of the baseline's accepted versions.",
        flag="--hca-firmware",
        help="Accepted HCA firmware version (ibstat); repeatable.",
    ),
    Pin(
        field="sysctls",
        check="sysctls",
        label="sysctls",
        drift_field="sysctl",
        fact=lambda f: f.sysctls,
        compare=Compare.MAP,
        doc="Every sysctl the baseline pins has the pinned value (whitespace-insensitive).",
        flag="--sysctl",
        help="KEY=VALUE; repeatable.",
    ),
    Pin(
        field="mig",
        check="mig_layout",
        label="MIG layout",
        drift_field="mig",
        fact=host_layout,
        compare=Compare.MAP,
        doc="The GPUs' MIG layout (nvidia-smi -L profiles) is the baseline's (mig-parted).",
        flag="--mig",
        help="MIG layout: all=LAYOUT or GPU=LAYOUT, LAYOUT 'disabled' or e.g. "
        "'1g.10gb:2,3g.40gb:1'; repeatable (or --mig-config FILE:NAME).",
        merge=False,
        capture=pinned_layout,
    ),
)

PINS_BY_FIELD: dict[str, Pin] = {p.field: p for p in PINS}
PINS_BY_CHECK: dict[str, Pin] = {p.check: p for p in PINS}
#: Baseline fields that are not pins.
BASELINE_META = ("name", "purpose", "status", "os_image_url")


def baseline_values(facts: HostFacts) -> dict[str, PinValue]:
    """Every pinned field as a known-good host has it (``baseline create --from-host``)."""
    return {p.field: p.captured(facts) for p in PINS}


@dataclass(frozen=True, slots=True)
class PinChange:
    """Issue 26: a pin given to ``baseline create --from-host`` that differs from the host's
    value: ``host`` what the host has, ``pinned`` what the baseline holds."""

    field: str
    flag: str
    host: PinValue
    pinned: PinValue


def pins_given(options: Mapping[str, PinValue]) -> dict[str, PinValue]:
    """The pins a command was given (a flag left out is None, or an empty list or map)."""
    return {p.field: v for p in PINS if (v := options.get(p.field)) not in (None, [], {})}


def overlay_pins(
    values: Mapping[str, PinValue], given: Mapping[str, PinValue]
) -> tuple[dict[str, PinValue], list[PinChange]]:
    """The host's pinned ``values`` with the ``given`` pins on top (a map pin, sysctls, is
    merged key by key: the host's other keys stay), and what changed, in pin order."""
    out = dict(values)
    changes: list[PinChange] = []
    for pin in PINS:
        if pin.field not in given:
            continue
        current, new = values.get(pin.field), given[pin.field]
        if isinstance(new, dict) and isinstance(current, dict) and pin.merge:
            new = {**current, **new}
        out[pin.field] = new
        if new != current:
            changes.append(PinChange(pin.field, pin.flag, current, new))
    return out, changes


def _agree_with_baseline(pins: Sequence[Pin]) -> None:
    fields = [f for f in Baseline.model_fields if f not in BASELINE_META]
    missing = sorted(set(fields) - {p.field for p in pins})
    unknown = sorted({p.field for p in pins} - set(fields))
    if missing or unknown:
        raise RuntimeError(
            f"gpufleet.domain.pins: Baseline fields without a pin: {missing or 'none'}; "
            f"pins without a Baseline field: {unknown or 'none'}"
        )
    for attr in ("field", "check", "drift_field", "flag"):
        values = [getattr(p, attr) for p in pins]
        if len(set(values)) != len(values):
            raise RuntimeError(f"gpufleet.domain.pins: duplicate pin {attr} in {values}")


_agree_with_baseline(PINS)
