"""The parsed inventory: :class:`Inventory` and its :class:`InventoryHost` entries."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpufleet.domain.roles import HostRole, parse_role
from gpufleet.domain.spec import ExpectedSpec
from gpufleet.errors import InventoryError, NotFound
from gpufleet.inventory.hostvars import _SPEC_PREFIX, _check_spec_value, _convert, _scalar_type


class InventoryHost(BaseModel):
    """One host of the inventory with its connection data and merged variables.

    ``groups`` holds every group the host is in, parents included (``all``/``ungrouped``
    left out), in inventory group order. ``vars`` are the merged variables as strings;
    ``var_lines`` says on which line of ``source`` each winning value was set.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    address: str
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    groups: list[str] = Field(default_factory=list)
    vars: dict[str, str] = Field(default_factory=dict, repr=False)  # may hold secrets
    line: int | None = None
    source: str = Field(default="", repr=False)
    var_lines: dict[str, int] = Field(default_factory=dict, repr=False)

    @property
    def pool(self) -> str | None:
        """The pool named by ``gpufleet_pool``, or None."""
        return self.vars.get("gpufleet_pool") or None

    @property
    def baseline(self) -> str | None:
        """The baseline named by ``gpufleet_baseline``, or None."""
        return self.vars.get("gpufleet_baseline") or None

    @property
    def role(self) -> HostRole:
        """The host's role (``gpufleet_role``: gpu, cpu, storage; gpu when unset).

        An unknown value raises :class:`InventoryError` naming the host, the value and the
        closest role, at the line where it was set; :func:`load_inventory` checks every host.
        """
        raw = self.vars.get("gpufleet_role", "")
        try:
            return parse_role(raw)
        except ValueError as exc:
            raise InventoryError(
                self.source or "<inventory>",
                self.var_lines.get("gpufleet_role"),
                f"host {self.name}: variable gpufleet_role={raw!r}: {exc}",
            ) from None

    def expected_spec(self) -> ExpectedSpec:
        """Build the :class:`ExpectedSpec` from the ``gpufleet_<field>`` variables.

        Empty values count as unset. A value that does not convert or is out of range (a
        negative count, NaN, an unknown fabric) raises :class:`InventoryError` at the line
        where it was set; :func:`load_inventory` already checked every host this way.
        """
        values: dict[str, Any] = {}
        for fname, finfo in ExpectedSpec.model_fields.items():
            key = _SPEC_PREFIX + fname
            raw = self.vars.get(key)
            if raw is None or raw.strip() == "":
                continue
            kind = _scalar_type(finfo.annotation)
            try:
                values[fname] = _check_spec_value(fname, _convert(raw.strip(), kind))
            except ValueError as exc:
                raise InventoryError(
                    self.source or "<inventory>",
                    self.var_lines.get(key),
                    f"host {self.name}: variable {key}={raw!r}: {exc}",
                ) from None
        try:
            return ExpectedSpec(**values)
        except ValidationError as exc:  # pragma: no cover - conversions above match the fields
            raise InventoryError(
                self.source or "<inventory>", self.line, f"host {self.name}: {exc}"
            ) from None


class InventoryGroup(BaseModel):
    """One group as the inventory defines it: its child groups and its own variables (not
    merged; may hold secrets), in file order. ``all`` is listed for its variables."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    children: list[str] = Field(default_factory=list)
    vars: dict[str, str] = Field(default_factory=dict, repr=False)  # may hold secrets


class Inventory(BaseModel):
    """Hosts in file order of first appearance; ``groups`` maps a group to all its hosts.

    Group membership is transitive (a host of ``gpu_h800`` is also listed under its parent
    ``gpu``); the implicit ``all`` and ``ungrouped`` groups are not listed.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    hosts: list[InventoryHost] = Field(default_factory=list)
    groups: dict[str, list[str]] = Field(default_factory=dict)
    #: Every group's definition (children, own variables), ``all`` first; not ``ungrouped``.
    definitions: list[InventoryGroup] = Field(default_factory=list)
    source: str = ""
    #: Problems that do not stop the load (a duplicate YAML key), each naming file:line;
    #: the CLI prints them on stderr as ``[WARNING]: ...``.
    warnings: list[str] = Field(default_factory=list)

    def host(self, name: str) -> InventoryHost:
        """Return the host called ``name``; raise :class:`NotFound` when it is absent."""
        for h in self.hosts:
            if h.name == name:
                return h
        raise NotFound(f"host {name!r} is not in inventory {self.source}")

    @property
    def names(self) -> list[str]:
        """Host names in inventory order."""
        return [h.name for h in self.hosts]
