"""Every string the dashboard shows, by key, per language: ``t(key, lang, **values)``.

English (``en``) is complete and the fallback; a translation (``zh`` ...) is one more
catalog with the same keys (a missing key falls back to English, so a partial catalog
works). Values are ``str.format`` templates with named fields, so a translation may put
them in any order. Host names, states and messages from the fleet are data, not text.
"""

from __future__ import annotations

from gpufleet.web.i18n_ops import OPS_EN
from gpufleet.web.i18n_zh import ZH

EN: dict[str, str] = {
    "app.title": "gpufleet",
    "nav.overview": "Overview",
    "nav.hosts": "Hosts",
    "nav.leases": "Leases",
    "nav.drift": "Drift",
    "nav.alarms": "Alarms",
    "nav.racks": "Racks",
    "nav.search": "Hosts: name, glob or selector",
    "nav.search_hint": "Press / to search",
    "nav.signed_in": "{name} ({role})",
    "nav.sign_out": "Sign out",
    "skip": "Skip to content",
    "overview.title": "Fleet overview",
    "overview.hosts": "Hosts",
    "overview.gpus": "GPUs",
    "overview.gpus_available": "GPUs available",
    "overview.accelerators": "Accelerators",
    "overview.accelerators_available": "Accelerators available",
    "overview.alarms_open": "Open alarms",
    "overview.drifted": "Hosts drifted",
    "overview.expiring": "Leases ending in 24 h",
    "overview.by_state": "Hosts by state",
    "overview.by_model": "Hosts by GPU model",
    "overview.by_pool": "Hosts by pool",
    "overview.gpu_use": "GPUs now",
    "overview.capacity": "Validated capacity (available GPUs per profile)",
    "overview.no_capacity": "No host is available and validated for a profile.",
    "overview.alarms": "Open alarms",
    "overview.no_alarms": "No open alarm.",
    "overview.back": "Coming back",
    "overview.no_back": "No host in maintenance or quarantine has an expected-back time.",
    "overview.leases": "Leases ending soon",
    "overview.no_leases": "No lease ends in the next 24 hours.",
    "overview.drift": "Drift from baselines",
    "overview.no_drift": "Every host with a baseline matches it.",
    "overview.all_alarms": "All alarms",
    "overview.quarantined": "Quarantined",
    "overview.no_baseline": "{n} hosts have no baseline to compare with.",
    "overview.all_leases": "All leases",
    "overview.all_drift": "Drift details",
    "col.host": "Host",
    "col.state": "State",
    "col.health": "Health",
    "col.pool": "Pool",
    "col.gpus": "GPUs",
    "col.model": "Model",
    "col.driver": "Driver",
    "col.cuda": "CUDA",
    "col.profiles": "Profiles",
    "col.collected": "Collected",
    "col.reason": "Why",
    "col.kind": "Kind",
    "col.severity": "Severity",
    "col.opened": "Opened",
    "col.message": "Message",
    "col.acked": "Acknowledged by",
    "col.lease": "Lease",
    "col.owner": "Owner",
    "col.purpose": "Purpose",
    "col.starts": "Starts",
    "col.ends": "Ends",
    "col.hosts": "Hosts",
    "col.eta": "Expected back",
    "col.field": "Field",
    "col.expected": "Baseline",
    "col.actual": "Actual",
    "col.count": "Count",
    "col.profile": "Profile",
    "col.free": "Free",
    "col.allocated": "Allocated",
    "col.reserved": "Reserved",
    "col.quarantined": "Quarantined",
    "col.maintenance": "Maintenance",
    "col.other": "Other",
    "col.when": "When",
    "col.actor": "By",
    "col.index": "#",
    "col.uuid": "UUID",
    "col.serial": "Serial",
    "col.memory": "Memory",
    "col.temp": "Temp.",
    "col.power": "Power",
    "col.ecc": "ECC unc.",
    "col.remap": "Row remap",
    "col.error": "Error",
    "col.bus": "PCI bus",
    "col.baseline": "Baseline",
    "hosts.title": "Hosts",
    "hosts.filter": "Filter",
    "hosts.clear": "Clear",
    "hosts.count": "{n} hosts",
    "hosts.none": "No host matches {query}.",
    "hosts.selector_help": "Selector: NAME-GLOB, group:G, pool:P, state:S, model:M, rack:R; "
    "a comma means or.",
    "hosts.any_state": "any state",
    "hosts.model": "GPU model",
    "hosts.more": "Showing the first {n}; narrow the filter to see the others.",
    "host.title": "Host {name}",
    "host.facts": "Facts",
    "host.address": "Address",
    "host.os": "OS",
    "host.kernel": "Kernel",
    "host.gpus": "GPUs",
    "host.timeline": "Timeline",
    "host.timeline_empty": "Nothing recorded yet.",
    "host.timeline_span": "{first} to {last}",
    "host.validation": "Latest validation",
    "host.never_validated": "Never validated.",
    "host.validated_until": "valid until {at}",
    "host.alarms": "Open alarms",
    "host.leases": "Leases",
    "host.no_leases": "Not leased.",
    "host.events": "History",
    "host.no_facts": "Never collected: no facts.",
    "host.labels": "Scheduling labels",
    "host.labels_count": "{n} labels, {taints} taints",
    "host.back": "expected back {eta}",
    "host.reclaim_due": "Owes a passing reclaim: {why}. It returns only through "
    "'gpufleet reclaim {name}' or 'unquarantine --force --reason' (recorded).",
    "lane.collection": "Collections",
    "lane.change": "Changes",
    "lane.state": "Validation and state",
    "lane.alarm": "Alarms",
    "lane.lease": "Leases",
    "lane.remediation": "Remediation",
    "lane.failure": "Job failures",
    "leases.title": "Leases and reservations",
    "leases.none": "No lease holds a host.",
    "leases.show_all": "Show ended leases too",
    "leases.show_holding": "Show holding leases only",
    "drift.title": "Drift from baselines",
    "drift.none": "No drift.",
    "drift.no_baseline": "Hosts without a baseline: {hosts}",
    "drift.no_facts": "Hosts without facts: {hosts}",
    "drift.by_host": "By host",
    "alarms.title": "Alarms",
    "alarms.none": "No open alarm.",
    "alarms.show_all": "Show closed alarms too",
    "alarms.show_open": "Show open alarms only",
    "racks.title": "Racks",
    "racks.none": "No rack: no host reports a rack-scale chassis (GB200/GB300 NVL72).",
    "racks.rack": "Rack {rack}",
    "racks.domain": "NVLink domain",
    "racks.trays": "Trays",
    "racks.free": "Free GPUs",
    "racks.state": "Rack state",
    "racks.findings": "Manifest findings",
    "racks.incident": "Rack incident",
    "racks.slot": "Slot",
    "racks.tray": "Tray",
    "racks.fabric": "Fabric",
    "racks.profiles": "Validated profiles",
    "racks.lease": "Lease",
    "racks.alarms": "Alarms",
    "racks.restricted": "restricted",
    "login.title": "Sign in",
    "login.token": "API token",
    "login.help": "Paste a token from 'gpufleet token create' (any role: the dashboard "
    "only reads). It is kept in a cookie of this browser until you sign out.",
    "login.submit": "Sign in",
    "login.none": "No API token is configured on this server: create one with "
    "'gpufleet token create --role viewer --name NAME'.",
    "login.failed": "That token was not accepted: {reason}",
    "error.title": "Error {status}",
    "error.back": "Back to the overview",
    "time.ago": "{d} ago",
    "time.in": "in {d}",
    "time.never": "never",
    "empty": "-",
}

#: The keys of this module's catalog (the operations pages' keys come from OPS_EN).
BASE_KEYS = frozenset(EN)
EN.update(OPS_EN)
CATALOGS: dict[str, dict[str, str]] = {"en": EN, "zh": ZH}
DEFAULT = "en"


def languages() -> list[str]:
    return sorted(CATALOGS)


def pick_language(requested: str | None, accept_language: str | None) -> str:
    """``?lang=`` if known, else the first known language of Accept-Language, else English."""
    if requested and requested in CATALOGS:
        return requested
    for part in (accept_language or "").split(","):
        tag = part.split(";")[0].strip().lower()
        for candidate in (tag, tag.split("-")[0]):
            if candidate in CATALOGS:
                return candidate
    return DEFAULT


def t(key: str, lang: str = DEFAULT, **values: object) -> str:
    """The text of ``key`` in ``lang`` (English when missing), with ``values`` filled in."""
    text = CATALOGS.get(lang, EN).get(key) or EN.get(key)
    if text is None:
        raise KeyError(f"no UI text '{key}' in the catalog")
    return text.format(**values) if values else text


def word(kind: str, value: str, lang: str = DEFAULT) -> str:
    """A data value shown as a word (``kind`` ``cstatus``, ``step``, ``health``): its
    translation in ``lang``, else the value itself (English shows it unchanged)."""
    key = f"{kind}.{value}"
    return t(key, lang) if key in EN else value
