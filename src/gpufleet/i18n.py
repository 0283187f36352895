"""Translated messages (issue 29 item 8): ``_()``, ``ngettext()`` and ``N_()``.

The language comes from ``GPUFLEET_LANG``, then the POSIX ``LC_ALL``, ``LC_MESSAGES`` and
``LANG`` (the first one set); ``zh_CN`` (``zh_CN.UTF-8``, ``zh-CN``, ``zh_Hans``, ``zh``)
selects Simplified Chinese, anything else English, the default. The catalog is the gettext
``.po`` file shipped in the package (``locale/zh_CN/LC_MESSAGES/gpufleet.po``), read here by a
small reader on the first translated message: English costs one look at the environment and
imports nothing (the lean starts, :mod:`gpufleet.cli.entry`). ``make messages`` extracts the
marked messages with Babel (``pybabel extract``, keywords ``_``, ``N_``, ``ngettext`` and the
table headers ``Col``/``num``); tests/test_i18n.py fails when one has no zh_CN entry.

Only what people read is translated: ``--json``, exit codes, label keys and the state values
in JSON never change with the language (a state is shown translated by :func:`state_name`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

#: The languages with a catalog, by the prefixes of the locale names that select them.
LANGUAGES = {"zh_CN": ("zh_cn", "zh-cn", "zh_hans", "zh-hans", "zh_sg", "zh")}

_catalog: dict[str, str | list[str]] | None = None
_language: str | None = None


def language() -> str:
    """The language of the messages: ``zh_CN``, or ``en`` (the default)."""
    global _language
    if _language is None:
        _language = _pick(os.environ)
    return _language


def _pick(env: os._Environ[str] | dict[str, str]) -> str:
    for var in ("GPUFLEET_LANG", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(var, "").strip()
        if not value:
            continue
        name = value.split(".")[0].split("@")[0].lower()
        for lang, prefixes in LANGUAGES.items():
            if any(name == p or name.startswith(p + "_") for p in prefixes):
                return lang
        return "en"
    return "en"


def reset(lang: str | None = None) -> None:
    """Forget the language and catalog (the next message reads the environment again), or
    set ``lang`` (``en``/``zh_CN``): for a process that serves more than one language."""
    global _catalog, _language
    _catalog, _language = None, lang


def catalog_path(lang: str = "zh_CN") -> Path:
    """The ``.po`` file of ``lang``."""
    return Path(__file__).parent / "locale" / lang / "LC_MESSAGES" / "gpufleet.po"


def _messages() -> dict[str, str | list[str]]:
    global _catalog
    if _catalog is None:
        lang = language()
        _catalog = {} if lang == "en" else read_po(catalog_path(lang).read_text("utf-8"))
    return _catalog


def _(message: str) -> str:
    """``message`` in the language of the messages (itself when untranslated)."""
    if language() == "en":
        return message
    found = _messages().get(message)
    return found if isinstance(found, str) and found else message


def N_(message: str) -> str:
    """Marks ``message`` for extraction; translated where it is shown (by ``_()``)."""
    return message


def ngettext(singular: str, plural: str, n: int) -> str:
    """The singular or plural of a message for ``n`` (Chinese has one form)."""
    if language() != "en":
        found = _messages().get(singular)
        if isinstance(found, list) and found and found[0]:
            return found[0]
    return singular if n == 1 else plural


#: The lifecycle states (:class:`gpufleet.domain.states.HostState`), marked for display.
STATES = (
    N_("enrolled"), N_("validating"), N_("available"), N_("allocated"), N_("reclaiming"),
    N_("maintenance"), N_("quarantined"), N_("retired"),
)

#: The leases' states (:class:`gpufleet.domain.leases.LeaseState`), marked for display.
LEASE_STATES = (N_("reserved"), N_("active"), N_("released"), N_("cancelled"))
#: The collection outcomes (:class:`gpufleet.domain.events.CollectionOutcome`), for display.
OUTCOMES = (
    N_("ok"), N_("unreachable"), N_("auth failed"), N_("host key changed"), N_("timeout"),
    N_("bad output"), N_("error"),
)

#: What a summary counts (``FleetSummary.noun``) and the vendors' nouns, for display.
NOUNS = (
    N_("GPUs"), N_("NPUs"), N_("accelerators"), N_("XPUs"), N_("DCUs"), N_("MLUs"), N_("GCUs"),
)


def joined(items: Iterable[str]) -> str:
    """``items`` as a list in a sentence: ``a, b, c`` (Chinese: ``a、b、c``)."""
    return _(", ").join(items)


def gettext_in(lang: str, message: str) -> str:
    """``message`` in ``lang`` (``zh_CN``, ``en``), whatever the process's language: for a
    server that answers each request in its own (the dashboard)."""
    if lang == "en" or lang not in LANGUAGES:
        return message
    if lang == language():
        return _(message)
    if lang not in _others:
        _others[lang] = read_po(catalog_path(lang).read_text("utf-8"))
    found = _others[lang].get(message)
    return found if isinstance(found, str) and found else message


_others: dict[str, dict[str, str | list[str]]] = {}


def reason_text(text: str | None, lang: str | None = None) -> str:
    """A stored reason (``"nccl: no NCCL all-reduce result (required)"``) as shown to people:
    each piece :mod:`gpufleet.domain.reasons` knows in the language of the messages (or
    ``lang``), the rest as stored. English: ``text`` itself."""
    lang = lang or language()
    if not text or lang == "en":
        return text or ""
    from gpufleet.domain.reasons import localize  # only when translating: the lean starts

    return localize(text, lambda m: gettext_in(lang, m))


def state_name(state: str) -> str:
    """A lifecycle state as shown to people (the value itself in English and in JSON)."""
    return _(state)


def read_po(text: str) -> dict[str, str | list[str]]:
    """A gettext ``.po`` file as ``{msgid: msgstr}`` (``[msgstr[0], ...]`` for a plural
    entry); fuzzy entries and the header are left out. Raises ValueError naming the line
    of anything it does not understand (fail closed)."""
    out: dict[str, str | list[str]] = {}
    entry: dict[str, str] = {}
    key: str | None = None
    fuzzy = False

    def flush() -> None:
        nonlocal entry, key, fuzzy
        if "msgid" in entry and entry["msgid"] and not fuzzy:
            if "msgid_plural" in entry:
                forms = sorted(k for k in entry if k.startswith("msgstr["))
                out[entry["msgid"]] = [entry[k] for k in forms]
            else:
                out[entry["msgid"]] = entry.get("msgstr", "")
        entry, key, fuzzy = {}, None, False

    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            flush()
        elif line.startswith("#"):
            if key is not None and key.startswith("msgstr"):
                flush()
            if line.startswith("#,") and "fuzzy" in line:
                fuzzy = True
        elif line.startswith('"'):
            if key is None:
                raise ValueError(f"po line {n}: a string outside an entry")
            entry[key] += _unquote(line, n)
        else:
            word, _sep, rest = line.partition(" ")
            if word not in ("msgctxt", "msgid", "msgid_plural", "msgstr") and not (
                word.startswith("msgstr[") and word.endswith("]")
            ):
                raise ValueError(f"po line {n}: unknown keyword {word!r}")
            if word in ("msgid", "msgctxt") and any(k.startswith("msgstr") for k in entry):
                flush()
            key = word
            entry[key] = _unquote(rest.strip(), n)
    flush()
    return out


_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}


def _unquote(s: str, n: int) -> str:
    if len(s) < 2 or not (s.startswith('"') and s.endswith('"')):
        raise ValueError(f"po line {n}: not a quoted string: {s!r}")
    body, out, i = s[1:-1], [], 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            if i + 1 >= len(body) or body[i + 1] not in _ESCAPES:
                raise ValueError(f"po line {n}: unknown escape in {s!r}")
            out.append(_ESCAPES[body[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)
