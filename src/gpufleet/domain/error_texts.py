"""Error messages as templates (issue 29 item 8), for the CLI's error line in the operator's
language; the English text, JSON and exit codes stay as they are.

An error's message is English wherever it is made (``NotFound(f"no host named '{n}'...")``),
in JSON, in logs and in what a remote server answers. The CLI's text-mode error line reads
it back here: every :data:`TEMPLATES` entry is also a pattern, so ``"no pool named 'trian'
(did you mean train?)"`` is the code ``pool.unknown`` with ``name="trian"`` and a
did-you-mean of ``train``, rendered with the template translated (:func:`localize`). A
message (or a ``"; "`` piece of one) no template matches stays English: never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache


def N_(message: str) -> str:
    """Marks a template for extraction (``make messages``); translated where it is shown."""
    return message


#: code -> English template. ``{near}`` is a did-you-mean suffix (`` (did you mean a or
#: b?)`` or nothing); a field of :data:`NESTED` is itself a message, read back in turn.
TEMPLATES: dict[str, str] = {
    # --- unknown names, with the nearest known ones (domain/names.did_you_mean)
    "host.unknown": N_("no host named '{name}'{near}"),
    "host.unknown_events": N_(
        "no host named '{name}', and no events recorded for that name{near}"
    ),
    "host.unknown_any": N_("unknown {what} '{name}'"),
    "pool.unknown": N_("no pool named '{name}'{near}"),
    "pool.create": N_("use --create to make a new one"),
    "baseline.unknown": N_("no baseline named '{name}'{near}"),
    "baseline.unknown_create": N_(
        "{where}: host {host}: no baseline named '{name}'{near} (gpufleet baseline create)"
    ),
    "profile.unknown": N_("no profile named '{name}'{near}"),
    "rack.unknown": N_("no rack {name}{near}"),
    "rack.no_domain": N_("no NVLink domain for {name} (a rack id, domain or host)"),
    "rack.no_incident": N_("no open rack incident for {name}"),
    "campaign.unknown": N_("no campaign named '{name}'"),
    "campaign.exists": N_("a campaign named '{name}' exists; pick another name"),
    "lease.unknown": N_("no lease {id}"),
    "run.unknown": N_("no run {id}"),
    "token.unknown": N_("no token named '{name}' (gpufleet token list)"),
    "token.revoked": N_("token '{name}' is already revoked"),
    "gpu.unknown_serial": N_("no GPU with serial '{serial}' was ever seen"),
    "host.no_facts": N_("host '{name}' has no collected facts"),
    "baseline.exists": N_("baseline '{name}' exists (use --replace)"),
    "profile.unknown_known": N_("unknown profile {name}{near} (known: {known})"),
    "inventory.host": N_("host {name} is not in inventory {source}"),
    "inventory.variable": N_("{where}: unknown variable {key}{near}; gpufleet reads: {known}"),
    "inventory.column": N_(
        "{where}: unknown CSV column {name}{near}: use {columns}, a gpufleet_* variable or an "
        "ansible_* variable"
    ),
    "config.invalid": N_("invalid configuration: {cause}"),
    # --- selections
    "select.none": N_("no hosts match selector '{selector}'"),
    "select.none_why": N_("no hosts match selector '{selector}': {why}"),
    "select.none_skipped": N_(
        "no hosts match selector '{selector}' (allocated/retired are skipped)"
    ),
    "select.name_hosts": N_("{verb}: name the hosts (a name, glob or selector), not '{selector}'"),
    "select.unknown_kind": N_("unknown selector '{term}': use {kinds}"),
    # --- holds and races
    "host.held": N_("host {name} is held by another worker; try again"),
    "conflict.held": N_("{what} was changed or is held by someone else; retry"),
    "alarm.closed": N_("alarm {id} is already closed ({why})"),
    "alarm.needs_reason": N_("resolving an alarm by hand needs a reason (--reason)"),
    "rack.needs_reason": N_("resolving a rack incident needs a reason (--reason)"),
    "reason.blank": N_("{what}: give a reason (it is recorded in the events); it is blank"),
    "identity.needs_reason": N_("--override-identity needs --reason TEXT (why the BMC is right)"),
    "transition": N_("host {host}: event '{event}' is not allowed in state '{state}'"),
    "transition_allowed": N_(
        "host {host}: event '{event}' is not allowed in state '{state}' (allowed: {allowed})"
    ),
    # --- BMC
    "bmc.none": N_("{host}: no BMC ({setting} not set)"),
    "bmc.no_user": N_("{host}: {setting} not set"),
    "bmc.power_cycle": N_("{host}: --action power-cycle needs a BMC (bmc set)"),
    # --- command lines that do not parse (UsageError around Click's message)
    "usage": N_("{command}: {cause} (see '{command} --help')"),
    "usage.did_you_mean": N_("{cause} Did you mean {possibility}?"),
    "usage.no_command": N_("No such command {name}."),
    "usage.no_option": N_("No such option: {name}"),
    "usage.missing_argument": N_("Missing argument {name}."),
    "usage.missing_option": N_("Missing option {name}."),
    "usage.missing_command": N_("Missing command."),
    "usage.invalid": N_("Invalid value for {name}: {detail}"),
    "usage.extra": N_("Got unexpected extra argument ({args})"),
    "usage.extras": N_("Got unexpected extra arguments ({args})"),
    "usage.extra_s": N_("Got unexpected extra argument(s) ({args})"),
    # --- remote mode, tokens, settings
    "remote.not_available": N_(
        "{what} is not available over GPUFLEET_URL; run it where the "
        "database is reachable (unset GPUFLEET_URL)"
    ),
    "remote.forbidden": N_("{actor} may not {action} (server {url}; check GPUFLEET_TOKEN)"),
    "remote.unauthorized": N_(
        "not authenticated: {reason} (server {url}; check GPUFLEET_TOKEN)"
    ),
    "forbidden": N_("{actor} may not {action}"),
    "unauthorized": N_("not authenticated: {reason}"),
    "server.unavailable": N_("gpufleet server {url}: {cause}"),
    "store.error": N_("database {url}: {cause}"),
    "server.no_answer": N_("no answer within {seconds} s"),
    "setting.seconds": N_("{what} must be a number of seconds, not {value}"),
    "setting.positive": N_("{what} must be a positive, finite number of seconds, not {value}"),
    "setting.whole": N_("{what} must be a whole number of at least 1, not {value}"),
    "time.period": N_("--since {text}: expected a period like 30m, 24h, 7d"),
    "time.iso": N_("{what} '{text}': not an ISO 8601 time"),
    "time.zone": N_("{what} '{text}': give a time zone (e.g. Z or +02:00)"),
}

#: Fields whose value is a message of its own (read back, translated where known).
NESTED = frozenset({"why", "cause", "reason"})
#: Fields whose value is a word from :data:`WORDS` (translated as a whole).
WORD_FIELDS = frozenset({"what"})
#: The words an error's ``what`` holds (``NotFound(what="host", ...)``), marked for extraction.
WORDS = (
    N_("host"), N_("alarm"), N_("pool"), N_("baseline"), N_("profile"), N_("lease"),
    N_("campaign"), N_("connection refused"), N_("the answer is not JSON"),
    N_("unknown, expired or revoked token"), N_("no reason"), N_("Connection refused"),
    N_("No route to host"), N_("Name or service not known"), N_("Connection timed out"),
)

_FIELD = re.compile(r"\{(\w+)\}")
_PARAM = r"(?:(?!; ).)+?"
_NEAR = re.compile(r" \(did you mean (?P<names>.+?)\?\)\Z")


def _pattern(template: str) -> re.Pattern[str]:
    out, pos, seen = [], 0, set()
    for m in _FIELD.finditer(template):
        out.append(re.escape(template[pos : m.start()]))
        name = m.group(1)  # a field used twice ("{command}" of a usage error): the same text
        if name in seen:
            out.append(f"(?P={name})")
        elif name == "near":
            out.append(r"(?P<near>(?: \(did you mean .+?\?\))?)")
        else:
            out.append(f"(?P<{name}>{_PARAM})")
        seen.add(name)
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out) + r"\Z", re.DOTALL)


@cache
def _compiled() -> list[tuple[str, re.Pattern[str]]]:
    # the most literal text first ("... (allocated/retired are skipped)" before "... '{x}'")
    def literal(code: str) -> int:
        return len(_FIELD.sub("", TEMPLATES[code]))

    return [(c, _pattern(TEMPLATES[c])) for c in sorted(TEMPLATES, key=lambda c: -literal(c))]


def _near(text: str, tr: Callable[[str], str]) -> str:
    m = _NEAR.match(text)
    if not text or m is None:
        return text
    names = m.group("names").split(" or ")
    return tr(N_(" (did you mean {name}?)")).format(name=tr(N_(" or ")).join(names))


def _one(text: str, tr: Callable[[str], str]) -> str | None:
    for code, pattern in _compiled():
        m = pattern.match(text)
        if m is None:
            continue
        values: dict[str, str] = {}
        for k, v in m.groupdict().items():
            if k == "near":
                values[k] = _near(v, tr)
            elif k in NESTED:
                values[k] = localize(v, tr)
            elif k in WORD_FIELDS:
                values[k] = tr(v)
            else:
                values[k] = v
        return tr(TEMPLATES[code]).format(**values)
    return None


def localize(text: str, tr: Callable[[str], str]) -> str:
    """An error message with every ``"; "`` piece a template matches translated by ``tr``
    (the most pieces first: a template may hold ``"; "``); the rest as it is."""
    whole = _one(text, tr)
    if whole is not None:
        return whole
    pieces = text.split("; ")
    if len(pieces) == 1:
        return tr(text)  # a fixed message marked elsewhere ("connection refused"), or itself
    out: list[str] = []
    i = 0
    while i < len(pieces):
        for j in range(min(len(pieces), i + 3), i, -1):
            rendered = _one("; ".join(pieces[i:j]), tr)
            if rendered is not None:
                out.append(rendered)
                i = j
                break
        else:
            out.append(pieces[i])
            i += 1
    return tr(N_("; ")).join(out)
