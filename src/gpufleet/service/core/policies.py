"""Profiles, Xid policy and fault catalogues of a run, loaded once (operator files from the
settings).

Shared by validation and by collection, which acts on new critical faults at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from gpufleet.domain.device_health import Catalogues, shipped_catalogue, site_catalogues
from gpufleet.domain.names import did_you_mean
from gpufleet.domain.profiles import Profile, load_profiles
from gpufleet.domain.xid import XidPolicy
from gpufleet.errors import NotFound
from gpufleet.service.core.fleet import Fleet


@dataclass
class Policies:
    """Profiles, Xid policy and the vendors' fault catalogues, loaded once per run (user
    files from settings)."""

    fleet: Fleet

    @cached_property
    def profiles(self) -> dict[str, Profile]:
        f = self.fleet.settings.profiles_file
        return load_profiles(f.read_text() if f else None, source=str(f) if f else "<none>")

    @cached_property
    def xid(self) -> XidPolicy:
        f = self.fleet.settings.xid_policy_file
        base = XidPolicy.load_default()
        return XidPolicy.from_yaml(f.read_text(), source=str(f)) if f else base

    @cached_property
    def catalogues(self) -> Catalogues:
        """The vendors' fault catalogues with the site overlay (``GPUFLEET_FAULT_CATALOGUE``):
        the inspection's and the validation's (``accelerator_health``) one judgement."""
        f = self.fleet.settings.fault_catalogue_file
        return site_catalogues(f.read_text(), str(f)) if f else shipped_catalogue

    def check_profile(self, name: str | None) -> None:
        """NotFound (exit 4) for a profile the site does not define, with the nearest
        known names (``allocate --profile``, ``capacity check --profile``)."""
        if name is not None and name not in self.profiles:
            raise NotFound(f"no profile named '{name}'{did_you_mean(name, self.profiles)}")

    def load(self) -> Policies:
        """Read and check them now (before a run claims anything); returns self."""
        _ = self.profiles, self.xid, self.catalogues
        return self
