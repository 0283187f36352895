"""Shared by the nvidia-smi parsers: value adapters ("N/A" spellings, numbers with units,
booleans, PCI bus ids, GPU error states) and the read-only views over XML and text trees."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from lxml import etree
from pydantic import ValidationError

# ----------------------------------------------------------------------------- adapters

# Lower-cased spellings nvidia-smi uses for "no value". Bracketed forms ("[N/A]") are the CSV
# spelling and are handled generically, so only the bare forms are listed.
_MISSING = frozenset(
    {
        "",
        "n/a",
        "na",
        "none",
        "not supported",
        "not available",
        "unknown error",
        "unknown",
        "insufficient permissions",
        "requested functionality has been deprecated",
        "gpu is lost",
        "gpu requires reset",
        "err!",
    }
)


# Error states (lower-cased, brackets stripped) -> how they are recorded on the GPU.
_ERROR_STATES = {
    "gpu is lost": "GPU is lost",
    "gpu requires reset": "GPU requires reset",
    "unknown error": "Unknown Error",
    "err!": "ERR!",
}
#: States that mean a broken GPU wherever they appear.
_ALWAYS_ERROR = frozenset({"gpu is lost", "gpu requires reset"})
#: Gpu attributes every working GPU reports: "Unknown Error"/"ERR!" there is a broken GPU.
_VITAL = frozenset({"uuid", "product_name", "pci_bus_id", "memory_total_mib"})


def _error_state(attr: str, raw: str | None) -> str | None:
    """``"GPU is lost (product_name)"`` if ``raw`` marks the GPU broken, else None."""
    if raw is None:
        return None
    if raw[:1] in _DIGITS:  # a reading, not an error state (the states are words)
        return None
    low = raw.strip().strip("[]").strip().lower()
    if low in _ALWAYS_ERROR or (low in _ERROR_STATES and attr in _VITAL):
        return f"{_ERROR_STATES[low]} ({attr})"
    return None


def _fit_error(exc: ValidationError) -> str:
    """The first complaint of a bounds check, as "field: message"."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "value"
    return f"{field}: {err['msg']}"


class _BadValue(ValueError):
    """A present value that the adapter cannot read (turned into ParseError by the caller)."""


def _clean(raw: str | None) -> str | None:
    """Strip ``raw``; ``None`` for every nvidia-smi spelling of "no value"."""
    if raw is None:
        return None
    value = raw.strip()
    if not value:
        return None
    if value[0] == "[" and value[-1] == "]":
        return None  # CSV: "[N/A]", "[Not Supported]", "[Unknown Error]", ...
    if value[0] in _DIGITS:  # a reading ("81559 MiB", "535.54.03"): no spelling of none
        return value
    low = value.lower()
    # "Not available in WDDM driver model" (Windows per-process memory) and the like.
    if low in _MISSING or low.startswith(("not available", "not supported")):
        return None
    return value


_DIGITS = frozenset("0123456789")


def _as_str(value: str) -> str:
    return value


def _version(value: str) -> str:
    # R610 appends a note: "610.57.04 [Deprecated; will be removed in CUDA 14.0. ...]".
    return value.split()[0]


_NUMBER = re.compile(r"^(?P<num>[-+]?\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z%]*)$")


def _number(*units: str, integer: bool) -> Callable[[str], float | int]:
    """Adapter for ``"81559 MiB"`` / ``"81559"`` (unit optional: CSV ``nounits`` drops it)."""
    allowed = {u.lower() for u in units}

    def convert(value: str) -> float | int:
        m = _NUMBER.match(value)
        if m is None or (m["unit"] and m["unit"].lower() not in allowed):
            expected = " or ".join(units) if units else "a number"
            raise _BadValue(f"expected {expected}, got {value!r}")
        num = m["num"]
        if len(num) > 30:  # int() refuses > 4300 digits; no reading has 30
            raise _BadValue(f"number too long: {value[:40]!r}...")
        if integer:
            if "." in num:
                raise _BadValue(f"expected a whole number, got {value!r}")
            return int(num)
        return float(num)

    return convert


_int = _number(integer=True)
_mib = _number("MiB", integer=True)
_mhz = _number("MHz", integer=True)
_watts = _number("W", integer=False)
_celsius = _number("C", integer=False)
_percent = _number("%", integer=False)
_link_width = _number("x", integer=True)  # "16x"
_microseconds = _number("us", integer=True)  # clocks event reason counters

_TRUE = frozenset({"enabled", "yes", "on", "active", "true", "1"})
_FALSE = frozenset({"disabled", "no", "off", "not active", "false", "0"})


def _bool(value: str) -> bool:
    low = value.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise _BadValue(f"expected Enabled/Disabled or Yes/No, got {value!r}")


_PCI = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<dev>[0-9a-fA-F]{1,2})\.(?P<fn>[0-7])$"
)


#: Marks "not read before" in the value memos (``None`` is a memoised "no value").
_UNSEEN = object()
#: Per adapter, the values read before: raw text as printed -> its value (``None`` for a
#: "no value" spelling). Adapters are pure functions of the text and their results
#: immutable (str, int, float, bool), and most readings repeat from GPU to GPU and host to
#: host ("Enabled", "N/A", "1410 MHz"), so a dict hit replaces the clean-up and the regex.
#: A text the adapter refuses is never memoised (it raises again, the same way). Each memo
#: is emptied when it grows past :data:`_MEMO_MAX`.
_MEMOS: dict[Callable[[str], object], dict[str, object]] = {}
_MEMO_MAX = 4096


def _memo(convert: Callable[[str], object]) -> dict[str, object]:
    """The value memo of ``convert`` (see :data:`_MEMOS`); the same dict for good."""
    memo = _MEMOS.get(convert)
    if memo is None:
        memo = _MEMOS[convert] = {}
    return memo


def _trim_memos() -> None:
    """Empty the memos grown past :data:`_MEMO_MAX` (once per report read)."""
    for memo in _MEMOS.values():
        if len(memo) > _MEMO_MAX:
            memo.clear()


def normalize_pci_bus_id(value: str) -> str:
    """``"00000000:19:00.0"`` -> ``"0000:19:00.0"``: lower case, 4-digit domain like lspci.

    nvidia-smi prints a 32-bit domain (8 hex digits); Linux and lspci use 16 bits.
    """
    m = _PCI.match(value.strip())
    if m is None:
        raise _BadValue(f"expected a PCI address like 00000000:19:00.0, got {value!r}")
    domain = int(m["domain"] or "0", 16)
    return f"{domain:04x}:{int(m['bus'], 16):02x}:{int(m['dev'], 16):02x}.{m['fn']}"


def _pci(value: str) -> str:
    return normalize_pci_bus_id(value)


# --------------------------------------------------------------------------- tree views


class _View(Protocol):
    """Read-only access to one node of an XML or text ``-q`` tree by normalised key path."""

    def raw(self, path: str) -> str | None:
        """Text of the first node at ``path`` ("a/b/c"), ``None`` when absent."""

    def node(self, path: str) -> _View | None:
        """First node at ``path``."""

    def nodes(self, path: str) -> list[_View]:
        """Every node at ``path`` (the last segment may repeat, e.g. one per process)."""

    def leaves(self) -> list[tuple[str, str | None, _View]]:
        """Direct children as ``(key, text, view)``."""

    def where(self, path: str) -> tuple[int | None, str]:
        """Line (when known) and a human description of ``path`` for error messages."""


#: Children by tag of the XML elements looked into, per document (element -> tag -> list).
_XmlIndex = dict[etree._Element, dict[str, list[etree._Element]]]


class _XmlView:
    """An element of a parsed ``-q -x`` report. Paths ("a/b/c") are resolved as ElementPath
    resolves plain tag paths (every ``a`` child, then every ``b`` child of those ...), over a
    per-document index of children by tag built on first use: a report is read with ~1,000
    lookups, and a dict lookup costs a fraction of an ``Element.find``."""

    def __init__(self, elem: etree._Element, label: str, index: _XmlIndex | None = None) -> None:
        self._elem = elem
        self._label = label
        self._index: _XmlIndex = {} if index is None else index

    def _children(self, elem: etree._Element, tag: str) -> list[etree._Element]:
        by_tag = self._index.get(elem)
        if by_tag is None:
            by_tag = self._index[elem] = {}
            for c in elem:
                if isinstance(c.tag, str):
                    by_tag.setdefault(c.tag, []).append(c)
        return by_tag.get(tag, [])

    def _findall(self, path: str) -> list[etree._Element]:
        found = [self._elem]
        for part in path.split("/"):
            if len(found) == 1:
                found = self._children(found[0], part)
            else:
                found = [c for e in found for c in self._children(e, part)]
            if not found:
                break
        return found

    def raw(self, path: str) -> str | None:
        found = self._findall(path)
        if not found:
            return None
        return found[0].text or ""

    def node(self, path: str) -> _XmlView | None:
        found = self._findall(path)
        return _XmlView(found[0], f"{self._label}/{path}", self._index) if found else None

    def nodes(self, path: str) -> list[_View]:
        return [_XmlView(e, f"{self._label}/{path}", self._index) for e in self._findall(path)]

    def leaves(self) -> list[tuple[str, str | None, _View]]:
        return [
            (c.tag, c.text, _XmlView(c, f"{self._label}/{c.tag}", self._index))
            for c in self._elem
            if isinstance(c.tag, str)
        ]

    def where(self, path: str) -> tuple[int | None, str]:
        # The element path is precise enough (and the same for every XML parser).
        return None, f"<{self._label}/{path}>" if path else f"<{self._label}>"


#: A trie of the paths a reader looks up under one element: tag -> the trie below it.
XmlTrie = dict[str, "XmlTrie"]


@dataclass(frozen=True)
class XmlPaths:
    """The paths ("a/b/c") a reader looks up under one element, as a trie for the walk
    and as the set of every path and prefix of one."""

    trie: XmlTrie
    all: frozenset[str]


def xml_paths(paths: list[str]) -> XmlPaths:
    """The :class:`XmlPaths` of ``paths``."""
    trie: XmlTrie = {}
    every: set[str] = set()
    for path in paths:
        node = trie
        parts = path.split("/")
        for n, part in enumerate(parts, start=1):
            node = node.setdefault(part, {})
            every.add("/".join(parts[:n]))
    return XmlPaths(trie, frozenset(every))


class _XmlFlatView:
    """An element (a GPU) whose trie paths were resolved in one walk of its subtree.

    ``flat`` maps every path of the trie present under the element to its first element in
    document order, which is what :class:`_XmlView`'s lookup returns for it ("every ``a``
    child, then every ``b`` child of those", first one). A path outside the trie, and
    ``nodes``/``leaves``, go to an :class:`_XmlView` of the same element: same answers,
    only slower. ``node`` of a path whose prefix repeats (two ``<pci>``) goes there too,
    since the flat map mixes the subtrees of the copies where ``node`` keeps the first.
    """

    __slots__ = ("_all", "_dups", "_elem", "_flat", "_index", "_label", "_paths", "_prefix")

    def __init__(
        self,
        elem: etree._Element,
        label: str,
        index: _XmlIndex,
        paths: XmlPaths,
        flat: dict[str, etree._Element] | None = None,
        dups: set[str] | None = None,
        prefix: str = "",
    ) -> None:
        self._elem = elem
        self._label = label
        self._index = index
        self._paths = paths
        self._all = paths.all
        self._prefix = prefix
        if flat is None:
            flat, dups = {}, set()
            _walk_trie(elem, paths.trie, "", flat, dups)
        self._flat = flat
        self._dups: set[str] = dups if dups is not None else set()

    def _slow(self) -> _XmlView:
        return _XmlView(self._elem, self._label, self._index)

    def raw(self, path: str) -> str | None:
        full = self._prefix + path
        found = self._flat.get(full)
        if found is not None:
            return found.text or ""
        if full in self._all:
            return None
        return self._slow().raw(path)

    def node(self, path: str) -> _View | None:
        full = self._prefix + path
        if full not in self._all or self._repeats(full):
            return self._slow().node(path)
        found = self._flat.get(full)
        if found is None:
            return None
        return _XmlFlatView(
            found,
            f"{self._label}/{path}",
            self._index,
            self._paths,
            self._flat,
            self._dups,
            full + "/",
        )

    def _repeats(self, full: str) -> bool:
        return any(full == d or full.startswith(d + "/") for d in self._dups)

    def nodes(self, path: str) -> list[_View]:
        # "a/b" under one "a" of the trie (not repeated): the "b" children of that "a"
        # (none when there is no "a"), as the element index lists them.
        parent, _, last = (self._prefix + path).rpartition("/")
        if not parent or parent not in self._all or self._repeats(parent):
            return self._slow().nodes(path)
        found = self._flat.get(parent)
        if found is None:
            return []
        label = f"{self._label}/{path}"
        return [_XmlView(c, label, self._index) for c in found if c.tag == last]

    def leaves(self) -> list[tuple[str, str | None, _View]]:
        return self._slow().leaves()

    def where(self, path: str) -> tuple[int | None, str]:
        return self._slow().where(path)


def _walk_trie(
    elem: etree._Element,
    trie: XmlTrie,
    prefix: str,
    flat: dict[str, etree._Element],
    dups: set[str],
) -> None:
    """Record under ``prefix + tag`` the first element of each trie path below ``elem``
    (depth first, document order); a path met again goes into ``dups``."""
    for child in elem:
        tag: str = child.tag  # type: ignore[assignment]
        # (an entity reference's tag is a function: never a trie key, so skipped here too)
        sub = trie.get(tag)
        if sub is None:
            continue
        path = prefix + tag
        if path in flat:
            dups.add(path)
        else:
            flat[path] = child
        if sub:
            _walk_trie(child, sub, path + "/", flat, dups)


class _TextNode:
    """One ``Key : Value`` (or bare ``Key``) line of ``nvidia-smi -q`` and its children
    (a plain slotted class: one is made per line of a report)."""

    __slots__ = ("by_key", "child_indent", "children", "indent", "key", "label", "line", "value")

    def __init__(self, key: str, label: str, value: str | None, line: int, indent: int) -> None:
        self.key = key  # normalised: "FB Memory Usage" -> "fb_memory_usage"
        self.label = label  # as printed, for messages
        self.value = value
        self.line = line
        self.indent = indent
        self.children: list[_TextNode] = []
        self.child_indent: int | None = None
        #: children by key, in order (built on the first lookup, once the tree is complete)
        self.by_key: dict[str, list[_TextNode]] | None = None

    def named(self, key: str) -> list[_TextNode]:
        """The children called ``key``, in order."""
        index = self.by_key
        if index is None:
            index = self.by_key = {}
            for c in self.children:
                index.setdefault(c.key, []).append(c)
        return index.get(key, [])


_NON_KEY = re.compile(r"[^a-z0-9]+")


@functools.lru_cache(maxsize=8192)
def _norm_key(key: str) -> str:
    return _NON_KEY.sub("_", key.lower()).strip("_")


#: "a/b/c" -> ["a", "b", "c"], for the table paths looked up again for every GPU.
_PARTS: dict[str, list[str]] = {}


class _TextView:
    def __init__(self, node: _TextNode) -> None:
        self._node = node

    def _walk(self, path: str) -> list[_TextNode]:
        *parents, last = path.split("/")
        current = self._node
        for part in parents:
            first = current.named(part)
            if not first:
                return []
            current = first[0]
        return current.named(last)

    def _first(self, path: str) -> _TextNode | None:
        # _walk(path)[0], without building the last list: ~100 lookups per GPU.
        parts = _PARTS.get(path)
        if parts is None:
            parts = path.split("/")
            if len(_PARTS) < 4096:  # keys read from a report (ECC locations) are few
                _PARTS[path] = parts
        current = self._node
        for part in parts:
            found = current.named(part)
            if not found:
                return None
            current = found[0]
        return current

    def raw(self, path: str) -> str | None:
        found = self._first(path)
        if found is None:
            return None
        return found.value if found.value is not None else ""

    def node(self, path: str) -> _TextView | None:
        found = self._first(path)
        return None if found is None else _TextView(found)

    def nodes(self, path: str) -> list[_View]:
        return [_TextView(n) for n in self._walk(path)]

    def leaves(self) -> list[tuple[str, str | None, _View]]:
        return [(c.key, c.value, _TextView(c)) for c in self._node.children]

    def where(self, path: str) -> tuple[int | None, str]:
        found = self._first(path) if path else self._node
        if found is None:
            return self._node.line, f"'{self._node.label}'"
        return found.line, f"'{found.label}'"


class _TextFlatView:
    """A ``-q`` node (a GPU) whose trie paths were resolved in one walk of its subtree.

    :class:`_TextView` looks a path up as "the first child called ``a``, then the first
    child called ``b`` of that one ..."; ``flat`` holds, for every path of the trie, that
    node (the walk records the first child of each name and descends into it only), so a
    lookup is one dict access. A path outside the trie, and ``nodes``/``leaves``/``where``,
    go to a :class:`_TextView` of the same node: same answers, only slower.
    """

    __slots__ = ("_all", "_flat", "_node", "_paths", "_prefix")

    def __init__(
        self,
        node: _TextNode,
        paths: XmlPaths,
        flat: dict[str, _TextNode] | None = None,
        prefix: str = "",
    ) -> None:
        self._node = node
        self._paths = paths
        self._all = paths.all
        self._prefix = prefix
        if flat is None:
            flat = {}
            _walk_text_trie(node, paths.trie, "", flat)
        self._flat = flat

    def raw(self, path: str) -> str | None:
        full = self._prefix + path
        found = self._flat.get(full)
        if found is not None:
            return found.value if found.value is not None else ""
        if full in self._all:
            return None
        return _TextView(self._node).raw(path)

    def node(self, path: str) -> _View | None:
        full = self._prefix + path
        if full not in self._all:
            return _TextView(self._node).node(path)
        found = self._flat.get(full)
        if found is None:
            return None
        return _TextFlatView(found, self._paths, self._flat, full + "/")

    def nodes(self, path: str) -> list[_View]:
        return _TextView(self._node).nodes(path)

    def leaves(self) -> list[tuple[str, str | None, _View]]:
        return _TextView(self._node).leaves()

    def where(self, path: str) -> tuple[int | None, str]:
        return _TextView(self._node).where(path)


def _walk_text_trie(
    node: _TextNode, trie: XmlTrie, prefix: str, flat: dict[str, _TextNode]
) -> None:
    """Record under ``prefix + key`` the first child of each trie name below ``node`` and
    walk on into that child only (later children of the same name are never looked into)."""
    for child in node.children:
        key = child.key
        sub = trie.get(key)
        if sub is None:
            continue
        path = prefix + key
        if path in flat:
            continue
        flat[path] = child
        if sub:
            _walk_text_trie(child, sub, path + "/", flat)
