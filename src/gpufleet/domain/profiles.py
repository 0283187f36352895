"""Workload profiles and the validation verdict.

A profile is a named list of checks with parameters (``data/profiles.yaml``; users overlay
their own YAML). :func:`evaluate` runs each distinct (check, parameters) once, shares the
results between profiles, and decides:

* ``quarantine`` if any result carries a hardware fault, whatever the profiles say;
* ``available`` if at least one profile passed;
* ``stay_validating`` otherwise, with the failing checks (drift included) as reasons.

A profile passes when none of its non-advisory checks failed; ``warn`` and ``skip`` pass.
The loader takes YAML *text*: reading the user's file is the caller's I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ConfigDict

from gpufleet.domain.checks import (
    CHECK_PARAMS,
    CHECKS,
    DRIFT_CHECKS,
    ActiveEvidence,
    CheckContext,
    CheckResult,
    CheckStatus,
)
from gpufleet.domain.checks.base import default_xid_policy
from gpufleet.domain.checks.proof import PROOF_CHECKS
from gpufleet.domain.decision import Decision as Decision  # defined there, for the store
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import HARDWARE_FAULTS, Fault, Health, health_for
from gpufleet.domain.roles import DEFAULT_ROLE, ROLES, profiles_for_role
from gpufleet.domain.spec import Baseline, ExpectedSpec
from gpufleet.domain.states import Event
from gpufleet.domain.xid import XidPolicy
from gpufleet.errors import ConfigError

if TYPE_CHECKING:  # device_health -> rules -> preflight -> profiles: a type only
    from gpufleet.domain.device_health import Catalogues

#: Parameter every check accepts: report the failure, don't fail the profile for it.
ADVISORY = "advisory"
#: What validation supplies in the :class:`~gpufleet.domain.checks.CheckContext`: refused as
#: profile parameters, so a profile cannot fake the time, the policy or the evidence.
CONTEXT_PARAMS = frozenset({"now", "xid_policy", "evidence"})
_PROFILE_KEYS = {"description", "extends", "checks", "role"}


@dataclass(frozen=True, slots=True)
class Profile:
    """A resolved profile: check name -> parameters (``advisory`` included), in order;
    ``role``: the hosts it judges (:mod:`gpufleet.domain.roles`; ``gpu`` unless it says)."""

    name: str
    description: str = ""
    checks: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    role: str = DEFAULT_ROLE.value


# ---------------------------------------------------------------------------- loading


def default_profiles_text() -> str:
    """The packaged ``profiles.yaml``."""
    return resources.files("gpufleet.domain").joinpath("data/profiles.yaml").read_text()


def load_profiles(
    user_text: str | None = None, *, source: str = "<user profiles>"
) -> dict[str, Profile]:
    """The packaged profiles with ``user_text`` (YAML, same format) laid over them.

    A user profile with an existing name merges into it check by check: an entry replaces the
    packaged one (all its parameters), ``false`` removes it; a new name adds a profile.
    Raises ConfigError naming the source, profile, check and parameter at fault.
    """
    raw = _parse(default_profiles_text(), "profiles.yaml")
    if user_text is not None:
        for name, overlay in _parse(user_text, source).items():
            raw[name] = _overlay(raw[name], overlay) if name in raw else overlay
    resolved: dict[str, Profile] = {}
    for name in raw:
        resolved[name] = _resolve(name, raw, resolved, ())
    return resolved


def _parse(text: str, source: str) -> dict[str, dict[str, Any]]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict) or not isinstance(data.get("profiles"), dict):
        raise ConfigError(f"{source}: expected a top-level 'profiles' mapping")
    profiles: dict[str, dict[str, Any]] = {}
    for name, body in data["profiles"].items():
        where = f"{source}: profile {name!r}"
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{source}: profile names must be non-empty text, got {name!r}")
        body = body or {}
        if not isinstance(body, dict):
            raise ConfigError(f"{where}: expected a mapping")
        unknown = set(body) - _PROFILE_KEYS
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
        checks = body.get("checks") or {}
        if not isinstance(checks, dict):
            raise ConfigError(f"{where}: 'checks' must map check names to parameters")
        parsed: dict[str, dict[str, Any] | None] = {}
        for check, params in checks.items():
            parsed[check] = _check_params(where, check, params)
        extends = body.get("extends")
        if extends is not None and not isinstance(extends, str):
            raise ConfigError(f"{where}: 'extends' must name a profile")
        role = body.get("role")
        if role is not None and role not in ROLES:
            raise ConfigError(
                f"{where}: unknown role {role!r} (expected one of {', '.join(ROLES)})"
            )
        profiles[name] = {
            "description": str(body.get("description") or ""),
            "extends": extends,
            "checks": parsed,
            "role": role,
        }
    return profiles


def _check_params(where: str, check: object, params: object) -> dict[str, Any] | None:
    """Validate one ``check: params`` entry; None means "remove this check"."""
    if not isinstance(check, str) or check not in CHECKS:
        known = ", ".join(sorted(CHECKS))
        raise ConfigError(f"{where}: unknown check {check!r} (known: {known})")
    if params is False:
        return None
    if params is None or params is True:
        return {}
    if not isinstance(params, dict):
        raise ConfigError(f"{where}: check {check!r}: parameters must be a mapping")
    accepted = {**CHECK_PARAMS[check], ADVISORY: bool}
    for key, value in params.items():
        if key in CONTEXT_PARAMS:
            raise ConfigError(f"{where}: check {check!r}: parameter {key!r} is reserved")
        if key not in accepted:
            names = ", ".join(sorted(accepted))
            raise ConfigError(
                f"{where}: check {check!r}: unknown parameter {key!r} (accepted: {names})"
            )
        want = accepted[key]
        types = want if isinstance(want, tuple) else (want,)
        # bool is an int in Python; a YAML `true` is not a threshold.
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            expected = " or ".join(t.__name__ for t in types)
            raise ConfigError(
                f"{where}: check {check!r}: parameter {key!r} must be {expected}, got {value!r}"
            )
    return dict(params)


def _overlay(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    checks = dict(base["checks"])
    for check, params in overlay["checks"].items():
        checks[check] = params
    return {
        "description": overlay["description"] or base["description"],
        "extends": overlay["extends"] or base["extends"],
        "checks": checks,
        "role": overlay.get("role") or base.get("role"),
    }


def _resolve(
    name: str,
    raw: Mapping[str, dict[str, Any]],
    done: dict[str, Profile],
    chain: tuple[str, ...],
) -> Profile:
    if name in done:
        return done[name]
    if name in chain:
        raise ConfigError(f"profile {name!r}: 'extends' cycle: {' -> '.join((*chain, name))}")
    body = raw[name]
    checks: dict[str, dict[str, Any]] = {}
    role = body.get("role")
    parent = body["extends"]
    if parent is not None:
        if parent not in raw:
            raise ConfigError(f"profile {name!r}: extends unknown profile {parent!r}")
        base = _resolve(parent, raw, done, (*chain, name))
        checks = {k: dict(v) for k, v in base.checks.items()}
        role = role or base.role
    for check, params in body["checks"].items():
        if params is None:
            checks.pop(check, None)
        else:
            checks[check] = dict(params)
    profile = Profile(name, body["description"], checks, role or DEFAULT_ROLE.value)
    done[name] = profile
    return profile


# ------------------------------------------------------------------------- evaluation


class ProfileOutcome(BaseModel):
    """One profile's verdict; ``checks`` maps its check names to keys of ``results``."""

    model_config = ConfigDict(frozen=True)

    name: str
    passed: bool
    checks: dict[str, str]
    failed: list[str]  # result keys of failed, non-advisory checks
    reasons: list[str]


class ValidationOutcome(BaseModel):
    """Everything one validation concluded about one host."""

    model_config = ConfigDict(frozen=True)

    decision: Decision
    reasons: list[str]
    results: dict[str, CheckResult]
    profiles: dict[str, ProfileOutcome]
    profiles_passed: set[str]
    faults: set[Fault]
    health: Health

    @property
    def drift(self) -> list[CheckResult]:
        """Failed drift checks (software off the baseline)."""
        return [
            r
            for r in self.results.values()
            if r.name in DRIFT_CHECKS and r.status is CheckStatus.FAIL
        ]

    @property
    def event(self) -> Event:
        return self.decision.event


def without_proof(profiles: Mapping[str, Profile], *, keep_dcgm: bool) -> dict[str, Profile]:
    """``profiles`` for a point-in-time health check on the node itself (``gpufleet
    preflight``): the proof checks (:data:`~gpufleet.domain.checks.proof.PROOF_CHECKS`: the
    pool's baseline, evidence since the last change) are validation's, judged against the
    store, and left out; a DCGM diag run now (``keep_dcgm``) still fails a profile when it
    fails, at whatever level it ran."""
    out = {}
    for name, p in profiles.items():
        checks = {c: v for c, v in p.checks.items() if c not in PROOF_CHECKS}
        if keep_dcgm and "dcgm_diag" in p.checks:
            checks["dcgm_diag"] = {
                k: v for k, v in p.checks["dcgm_diag"].items() if k == ADVISORY
            }
        out[name] = Profile(p.name, p.description, checks, p.role)
    return out


def held_out(outcome: ValidationOutcome) -> dict[str, list[str]]:
    """Profiles the host did not pass for a reason an operator acts on, with the reasons: a
    check that found something broken (a fault), or missing proof only (no DCGM/NCCL result
    since the last change, no validated baseline, a GPU unusable). Profiles the host was
    never meant for (no fabric expected ...) are left out."""
    out: dict[str, list[str]] = {}
    for p in outcome.profiles.values():
        if p.passed:
            continue
        failed = [outcome.results[k] for k in p.failed]
        if any(r.fault for r in failed) or all(r.name in PROOF_CHECKS for r in failed):
            out[p.name] = list(p.reasons)
    return out


def evaluate(
    facts: HostFacts,
    spec: ExpectedSpec,
    baseline: Baseline | None,
    profiles: Mapping[str, Profile],
    policy: XidPolicy | None,
    now: datetime,
    *,
    evidence: ActiveEvidence | None = None,
    hardware_faults: frozenset[Fault] = HARDWARE_FAULTS,
    unusable: Sequence[str] = (),
    role: str = DEFAULT_ROLE.value,
    catalogues: Catalogues | None = None,
) -> ValidationOutcome:
    """Run the checks of every profile of the host's ``role`` on ``facts`` and decide (see
    the module docstring): a GPU host is never made available by a cpu/storage profile, a
    cpu/storage node never judged by a GPU one (:mod:`gpufleet.domain.roles`).

    ``results`` is keyed by check name; when profiles give one check different parameters,
    the later parameter sets are keyed ``"<check>[<profile>]"``. ``unusable``: the GPUs
    left out of ``facts`` (a partial host), one description each; ``catalogues``: the
    vendors' fault catalogues with the site overlay (None: the shipped ones).
    """
    context = CheckContext(
        now=now,
        spec=spec,
        baseline=baseline,
        evidence=evidence or ActiveEvidence(),
        xid_policy=policy or default_xid_policy(),  # None: the packaged default
        unusable=tuple(unusable),
        fault_catalogues=catalogues,
    )
    results: dict[str, CheckResult] = {}
    run_keys: dict[tuple[str, str], str] = {}  # (check, params repr) -> result key
    outcomes: dict[str, ProfileOutcome] = {}
    profiles = profiles_for_role(profiles, role)

    for pname, profile in profiles.items():
        keys: dict[str, str] = {}
        failed: list[str] = []
        reasons: list[str] = []
        for check, params in profile.checks.items():
            own = {k: v for k, v in params.items() if k != ADVISORY}
            signature = (check, repr(sorted(own.items())))
            key = run_keys.get(signature)
            if key is None:
                key = check if check not in results else f"{check}[{pname}]"
                results[key] = CHECKS[check](facts, context, own)
                run_keys[signature] = key
            keys[check] = key
            result = results[key]
            if result.status is CheckStatus.FAIL and not params.get(ADVISORY):
                failed.append(key)
                reasons.append(f"{check}: {result.message}")
        outcomes[pname] = ProfileOutcome(
            name=pname, passed=not failed, checks=keys, failed=failed, reasons=reasons
        )

    faults = {r.fault for r in results.values() if r.fault is not None}
    passed = {name for name, o in outcomes.items() if o.passed}
    hardware = [r for r in results.values() if r.fault in hardware_faults]
    if hardware:
        decision = Decision.QUARANTINE
        reasons = [f"{r.name}: {r.message}" for r in hardware]
    elif passed:
        decision = Decision.AVAILABLE
        reasons = []
    else:
        decision = Decision.STAY_VALIDATING
        reasons = [
            f"{results[k].name}: {results[k].message}"
            for k in dict.fromkeys(k for o in outcomes.values() for k in o.failed)
        ]
        if not outcomes:
            reasons = ["no profiles configured"]
    warnings = any(r.status is CheckStatus.WARN for r in results.values())
    return ValidationOutcome(
        decision=decision,
        reasons=reasons,
        results=results,
        profiles=outcomes,
        profiles_passed=passed,
        faults=faults,
        health=health_for(faults, warnings=warnings, hardware_faults=hardware_faults),
    )
