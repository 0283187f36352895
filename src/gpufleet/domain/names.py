"""Names an operator typed that are not known: the one "did you mean" of every command.

A host, pool, baseline or profile that does not exist is refused (NotFound, exit 4) with the
nearest known names (:func:`did_you_mean`), so a typo is never a silent empty result.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: How alike a known name must be to be suggested (difflib's ratio, 0..1).
CUTOFF = 0.6
#: Names this close to the best one are suggested with it (a tie, or nearly).
TIE = 0.05


def close_names(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known names nearest to ``name`` (case-insensitive), best first."""
    by_lower: dict[str, str] = {}
    for k in known:
        if k:
            by_lower.setdefault(k.lower(), k)
    want = name.lower()
    scored = []
    for low, k in by_lower.items():
        m = difflib.SequenceMatcher(None, want, low)
        if m.real_quick_ratio() >= CUTOFF and m.quick_ratio() >= CUTOFF:
            r = m.ratio()
            if r >= CUTOFF:
                scored.append((-r, k))
    scored.sort()
    if not scored:
        return []
    best = -scored[0][0]
    return [k for r, k in scored[:n] if -r >= best - TIE]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean gpu-01?)`` for the nearest known names, or ``""`` when none is
    close: appended to a "no host/pool/baseline/profile named ..." message."""
    near = close_names(name, known)
    if not near:
        return ""
    return " (did you mean " + " or ".join(near) + "?)"
