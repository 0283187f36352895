"""MIG as configuration (issue 26 item 7): a host's MIG layout, a pinned layout in NVIDIA's
``mig-parted`` config format, the commands that apply one, and GFD's MIG labels. Pure.

*Layout.* One GPU's layout is canonical text: ``disabled`` (MIG mode off), ``unsupported``
(nvidia-smi prints MIG mode ``N/A``), ``enabled`` (MIG on, no MIG device), or the MIG
devices' profiles with their counts, sorted: ``1g.10gb:2,2g.20gb:1,3g.40gb:1`` (the profile
names are those ``nvidia-smi -L`` prints, ``MIG 3g.40gb Device 0: ...``; a compute instance
of part of a GPU instance is named ``1c.3g.71gb``). A host's layout (:func:`host_layout`) is
a map: ``all`` (the one layout of every GPU, or ``gpu0=...; gpu1=...`` when they differ) and
one key per GPU index, so a pin on ``all`` or on GPU indices compares as a map pin
(:data:`gpufleet.domain.pins.PINS`, ``mig``).

*mig-parted.* :func:`parse_mig_parted` reads the format of NVIDIA/mig-parted
(``api/spec/v1/spec.go``: ``version: v1``, ``mig-configs: NAME: [{devices: all | [0, 1],
mig-enabled: bool, mig-devices: {"1g.10gb": 2}}]``; ``mig-devices`` is required when
``mig-enabled`` is true and must be empty when false), and :func:`pin_of` turns one named
config into the pin.

*Labels.* GPU Feature Discovery's MIG labels (NVIDIA/k8s-device-plugin
``internal/lm/mig-strategy.go`` and ``internal/lm/resource.go``): ``nvidia.com/mig.strategy``;
under ``single`` ``nvidia.com/gpu.product`` is ``<product>-MIG-<profile>`` and
``nvidia.com/gpu.count`` the number of MIG devices (``<product>-MIG-INVALID`` and count 0 when
the node has MIG-disabled GPUs beside enabled ones, an enabled GPU with no MIG device, or more
than one profile); under ``mixed`` ``nvidia.com/mig-<profile>.count`` and ``.product`` per
profile. GFD takes the strategy from its own configuration: here it is the host group's
``gpufleet_mig_strategy`` (``mig_strategy`` of
:class:`gpufleet.domain.spec.ExpectedSpec`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufleet.errors import ConfigError

if TYPE_CHECKING:
    from gpufleet.domain.facts import Gpu, HostFacts

#: Marks a campaign's MIG script, so a lab host knows what it is asked (lab/mig.py).
MARK = "@@gpufleet:mig"
DISABLED = "disabled"
ENABLED = "enabled"
UNSUPPORTED = "unsupported"
#: The strategies GFD knows (``none``: no MIG label beyond ``mig.capable``).
STRATEGIES = ("none", "single", "mixed")
#: A MIG profile as nvidia-smi and mig-parted name it: ``1g.10gb``, ``1c.3g.71gb``,
#: ``1g.10gb+me``.
_PROFILE = re.compile(r"^(\d+c\.)?\d+g\.\d+gb(\+[a-z]+)*$")


def canonical(profiles: Mapping[str, int]) -> str:
    """``{"3g.40gb": 1, "1g.10gb": 2}`` -> ``"1g.10gb:2,3g.40gb:1"``; ``{}`` -> ``enabled``."""
    parts = [f"{p}:{n}" for p, n in sorted(profiles.items()) if n > 0]
    return ",".join(parts) or ENABLED


def gpu_layout(gpu: Gpu) -> str | None:
    """One GPU's canonical layout; None when MIG is on and a device's profile is unknown."""
    if gpu.mig_mode_current is None:
        return UNSUPPORTED
    if not gpu.mig_mode_current:
        return DISABLED
    if any(m.profile is None for m in gpu.mig_devices):
        return None
    return canonical(Counter(str(m.profile) for m in gpu.mig_devices))


def host_layout(facts: HostFacts) -> dict[str, str]:
    """``all`` and one key per GPU index (see the module); ``{}`` (not collected) without
    GPUs or when one GPU's layout is unknown."""
    per = {str(g.index): gpu_layout(g) for g in facts.gpus}
    if not per or any(v is None for v in per.values()):
        return {}
    values = {k: str(v) for k, v in per.items()}
    distinct = set(values.values())
    whole = distinct.pop() if len(distinct) == 1 else "; ".join(
        f"gpu{k}={v}" for k, v in values.items()
    )
    return {"all": whole, **values}


def pinned_layout(facts: HostFacts) -> dict[str, str]:
    """What ``baseline create --from-host`` pins: ``{"all": layout}`` when every GPU has the
    same one (a pool's hosts may miss a GPU: no per-GPU key to drift on), else one key per
    GPU; ``{}`` when unknown."""
    layout = host_layout(facts)
    if not layout:
        return {}
    per = {k: v for k, v in layout.items() if k != "all"}
    return {"all": layout["all"]} if len(set(per.values())) == 1 else per


# ---------------------------------------------------------------------- mig-parted


@dataclass(frozen=True, slots=True)
class MigConfigEntry:
    """One entry of a mig-parted config: the GPUs (``None``: all) and their layout."""

    devices: tuple[int, ...] | None
    layout: str


def _fail(source: str, why: str) -> ConfigError:
    return ConfigError(setting=source, cause=why)


def parse_mig_parted(text: str, source: str) -> dict[str, list[MigConfigEntry]]:
    """The named configs of a mig-parted file (see the module); a :class:`ConfigError`
    naming ``source`` and the config for anything mig-parted itself refuses."""
    import yaml  # only where a config is read (labels HOST starts without it)

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _fail(source, f"not YAML: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != "v1":
        raise _fail(source, "a mig-parted config has 'version: v1'")
    unknown = sorted(set(doc) - {"version", "mig-configs"})
    if unknown:
        raise _fail(source, f"unexpected field(s) {unknown}")
    configs = doc.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        raise _fail(source, "'mig-configs' needs at least one named config")
    return {str(name): _entries(source, str(name), e) for name, e in configs.items()}


def _entries(source: str, name: str, entries: Any) -> list[MigConfigEntry]:
    where = f"{source}: mig-configs.{name}"
    if not isinstance(entries, list) or not entries:
        raise ConfigError(setting=where, cause="at least one entry is required")
    return [_entry(f"{where}[{i}]", e) for i, e in enumerate(entries)]


def _entry(where: str, e: Any) -> MigConfigEntry:
    if not isinstance(e, dict) or "devices" not in e or "mig-enabled" not in e:
        raise ConfigError(setting=where, cause="'devices' and 'mig-enabled' are required")
    unknown = sorted(set(e) - {"devices", "mig-enabled", "mig-devices", "device-filter"})
    if unknown:
        raise ConfigError(setting=where, cause=f"unexpected field(s) {unknown}")
    if "device-filter" in e:  # a filter by PCI device id: gpufleet pins by index only
        raise ConfigError(setting=where, cause="'device-filter' is not supported by gpufleet")
    devices = e["devices"]
    if devices == "all":
        picked: tuple[int, ...] | None = None
    elif isinstance(devices, list) and devices and all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices
    ):
        picked = tuple(sorted(set(devices)))
    else:
        raise ConfigError(setting=where, cause=f"devices {devices!r}: 'all' or GPU indices")
    enabled, mig = e["mig-enabled"], e.get("mig-devices")
    if not isinstance(enabled, bool):
        raise ConfigError(setting=where, cause="'mig-enabled' is true or false")
    if not enabled:
        if mig:
            raise ConfigError(setting=where, cause="MIG devices given with 'mig-enabled: false'")
        return MigConfigEntry(picked, DISABLED)
    if not isinstance(mig, dict):
        raise ConfigError(setting=where, cause="'mig-devices' is required when MIG is enabled")
    counts: dict[str, int] = {}
    for profile, n in mig.items():
        if not _PROFILE.match(str(profile)) or not isinstance(n, int) or n < 0:
            raise ConfigError(setting=where, cause=f"mig-devices {profile!r}: {n!r}")
        counts[str(profile)] = n
    return MigConfigEntry(picked, canonical(counts))


def pin_of(entries: Iterable[MigConfigEntry]) -> dict[str, str]:
    """The baseline pin of one mig-parted config: ``{"all": layout}`` or one key per GPU."""
    pin: dict[str, str] = {}
    for e in entries:
        for key in ("all",) if e.devices is None else (str(d) for d in e.devices):
            pin[key] = e.layout
    return pin


def pin_from_file(text: str, source: str, name: str) -> dict[str, str]:
    """The pin of config ``name`` of a mig-parted file (``source`` names it in errors)."""
    configs = parse_mig_parted(text, source)
    if name not in configs:
        raise ConfigError(
            setting=source, cause=f"no mig-config {name!r} (it has: {', '.join(sorted(configs))})"
        )
    return pin_of(configs[name])


# ---------------------------------------------------------------------- applying a layout


def _profiles(layout: str) -> list[str]:
    """``"1g.10gb:2,3g.40gb:1"`` -> ``["3g.40gb", "1g.10gb", "1g.10gb"]`` (largest first, as
    the GPU places them best)."""
    out: list[str] = []
    for part in layout.split(","):
        profile, _, n = part.partition(":")
        out += [profile] * int(n)
    return sorted(out, key=lambda p: (-int(p.split("g.")[0].split(".")[-1]), p))


def apply_commands(pin: Mapping[str, str]) -> list[str]:
    """The ``nvidia-smi`` commands that give the GPUs ``pin``'s layout (the MIG user guide's
    sequence): MIG mode on or off (``-mig 1|0``), the old compute and GPU instances destroyed
    (``mig -dci``, ``mig -dgi``; none there is not an error), the GPU instances created with
    their default compute instance (``mig -cgi P,P,... -C``). A :class:`ConfigError` for a
    layout these commands cannot give (a compute-instance profile such as ``1c.3g.71gb``:
    ``nvidia-mig-parted apply`` does that) or one that is not a layout."""
    out: list[str] = []
    for key in sorted(pin, key=lambda k: (k != "all", k.zfill(4))):
        layout = pin[key]
        sel = "" if key == "all" else f" -i {int(key)}"
        if layout == DISABLED:
            out.append(f"nvidia-smi{sel} -mig 0")
            continue
        if layout == UNSUPPORTED or not (layout == ENABLED or _is_layout(layout)):
            raise ConfigError(setting=f"mig pin {key}", cause=f"{layout!r} cannot be applied")
        out += [f"nvidia-smi{sel} -mig 1", f"nvidia-smi mig{sel} -dci || true",
                f"nvidia-smi mig{sel} -dgi || true"]
        if layout != ENABLED:
            profiles = _profiles(layout)
            if any("c." in p for p in profiles):
                raise ConfigError(
                    setting=f"mig pin {key}",
                    cause=f"{layout}: compute-instance profiles need nvidia-mig-parted apply",
                )
            out.append(f"nvidia-smi mig{sel} -cgi {','.join(profiles)} -C")
    return out


def check_pin(pin: Mapping[str, str]) -> dict[str, str]:
    """A baseline's MIG pin as given, or a ``ValueError`` naming the key that is not ``all``
    or a GPU index or the value that is not a layout (what Baseline's validator raises)."""
    for key, layout in pin.items():
        if key != "all" and not key.isdigit():
            raise ValueError(f"mig {key}={layout}: the key is 'all' or a GPU index")
        if layout not in (DISABLED, ENABLED, UNSUPPORTED) and not _is_layout(layout):
            raise ValueError(
                f"mig {key}={layout}: a layout is 'disabled' or PROFILE:COUNT,... "
                "(e.g. 1g.10gb:2,3g.40gb:1)"
            )
    return dict(pin)


def _is_layout(layout: str) -> bool:
    for part in layout.split(","):
        profile, sep, n = part.partition(":")
        if not sep or not n.isdigit() or not _PROFILE.match(profile):
            return False
    return True


def apply_script(pin: Mapping[str, str]) -> str:
    """:func:`apply_commands` as one ``sh`` subshell that stops at the first failure (the
    campaign's command action runs it; its exit status is the host's result)."""
    lines = [f"# gpufleet campaign: apply a MIG layout ({MARK})", "(", "set -e"]
    return "\n".join([*lines, *apply_commands(pin), ")"])


# ---------------------------------------------------------------------- GFD labels


def label_digest(facts: HostFacts, product: str | None) -> dict[str, Any]:
    """What the MIG labels take from the facts (stored with ``fact_labels``): GFD's product
    name, and per GPU whether MIG is on and its MIG devices' profiles (None: unknown)."""
    return {
        "product": product,
        "gpus": [
            [g.mig_mode_current, [m.profile for m in g.mig_devices]] for g in facts.gpus
        ],
    }


def mig_labels(digest: Mapping[str, Any], strategy: str | None) -> dict[str, str]:
    """GFD's MIG labels of one node under ``strategy`` (see the module); none for ``none``
    or no strategy, or when a profile is unknown (no label rather than a wrong one)."""
    if strategy not in ("single", "mixed"):
        return {}
    gpus = [(on, list(profiles)) for on, profiles in digest.get("gpus", [])]
    profiles = [p for on, ps in gpus if on for p in ps]
    if any(p is None for p in profiles):
        return {}
    product = digest.get("product") or "unknown"
    labels = {"nvidia.com/mig.strategy": str(strategy)}
    counts = Counter(str(p) for p in profiles)
    if strategy == "mixed":
        for profile, n in sorted(counts.items()):
            labels[f"nvidia.com/mig-{profile}.count"] = str(n)
            labels[f"nvidia.com/mig-{profile}.product"] = f"{product}-MIG-{profile}"
        return labels
    enabled = [ps for on, ps in gpus if on]
    if not enabled:  # no MIG-enabled GPU: single is none
        return labels
    if len(enabled) != len(gpus) or any(not ps for ps in enabled) or len(counts) != 1:
        labels |= {"nvidia.com/gpu.product": f"{product}-MIG-INVALID", "nvidia.com/gpu.count":
                   "0", "nvidia.com/gpu.replicas": "0", "nvidia.com/gpu.memory": "0"}
        return labels
    (profile, n), = counts.items()
    labels |= {"nvidia.com/gpu.product": f"{product}-MIG-{profile}",
               "nvidia.com/gpu.count": str(n)}
    return labels
