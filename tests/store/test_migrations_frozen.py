"""A landed migration is never edited (issue 25, item 7).

Each migration file that has landed on main is recorded here with the SHA-256 of its bytes. A
database upgraded by an earlier gpufleet already ran that file; editing it changes nothing
there and makes the two schemas differ silently, so a change to the schema is always a NEW
revision. Landing a new migration: add its line below in the same commit. The revision ids run
in chain order (each file's ``down_revision`` is the one before it).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import gpufleet.store

VERSIONS = Path(gpufleet.store.__file__).parent / "migrations" / "versions"

#: revision (the file's number) -> SHA-256 of the file as it landed.
LANDED: dict[str, str] = {
    "0001": "325e0093b607a1f75ed676d3de0d4ffbca977d99d03a0fced50c66f037c9cc37",
    "0002": "2798f488b1cd746c52e8cd3a310c62eaf3121d6787f96b5beec925fc9e281f55",
    "0003": "39f1258ea9c46d894335e299a8194eb5ea0bfab6e5f77bb2dcbbb7fdf285d6ea",
    "0004": "1daea2f1a446862bd9327420c9586ac8301488fa4785a7bbbbd508e41af3be2f",
    "0005": "2814c2d4a25a51e4e524465e549e4ceea06f7b21fec79f9705aa827bda682a6b",
    "0006": "69b3e0e706243dcd3ab60d7aca9db83ce38ea7d53fcbe1ca10bc6d6507b15cb9",
    "0007": "5cf078ef6348a258f3ae1b4446c7e32f614d147178fede748bbae57a1644402a",
    "0008": "41cdad15ff4558fa68f4abb696fec51eb86684dace413a80f333561c19093ef2",
    "0009": "6624faf48ff6b866e929b9a97448d402ac8d0a8993b2d66ae7154fb825bb74f1",
    "0010": "0bd568ce03f6daf1bd507812cec1ad3dcc62f063e50280f251ccc1a51a0d53df",
    "0011": "a94e3964760fb862c5919f8ba82c45098ed1bcbf7a2ecf4b298e6c675de9ec97",
    "0012": "fa1fc1f6454cddfeef42584475c8a8e225759057e240951f1be10e1033a638d3",
    "0014": "8f98536f68583623982cf2fb62a99144429c24dc0626fe2d620936a88fd76234",
    "0015": "d77b86d98dd6a490523be44235d7a855cde6ce607e5c2ecf596a5e955515457e",
    "0016": "e4bc945e1582227cc58e149f3c79e569491e5cccbe158d699d3811426ef6680c",
    "0017": "6505fe1a173ebb5cc1f55f970a882cb4cbc42f858d727394b765fcc368c142f8",
    "0018": "90fbf5cba80d5469ca0d9e2dea2a6516e6835f163e8afb8344c4c75c1af6640d",
    "0023": "45c3dec1c967bb2bc879a9fcfc4d518e90ee15426e74a11fdd72e687f71e74e1",
    "0024": "975ea0ffb51059fcd9da957da4eecc6a04e22f00f35ecef49e61b2ad713c1b6e",
    "0025": "c9a9dc5f63feed4f43261d804f0cc53175da6f6e4c561fbad4c7d5a8d16ec9ba",
    "0026": "9305c2c5fc0bf6102c43f2537435d937eddb67f7804028ee764435ce49ef64bd",
    "0027": "66f535ade2c91a36d481b45f5c34105cd18d8312c0132ab28a0e00ec1c82c02f",
    "0028": "582329442776b58172b8199eb8736395cac5ed63f68a538cafd223a405846519",
}


def _revisions(path: Path) -> tuple[str, str | None]:
    text = path.read_text()
    rev = re.search(r'^revision\s*=\s*"([^"]+)"', text, re.M)
    down = re.search(r'^down_revision\s*=\s*(?:"([^"]+)"|None)', text, re.M)
    assert rev and down, f"{path.name}: no revision/down_revision line"
    return rev.group(1), down.group(1)


def test_landed_migrations_are_unchanged() -> None:
    for rev, digest in LANDED.items():
        found = sorted(VERSIONS.glob(f"{rev}_*.py"))
        assert len(found) == 1, f"landed migration {rev} was removed, renamed or doubled: {found}"
        path = found[0]
        name = path.name
        got = hashlib.sha256(path.read_bytes()).hexdigest()
        assert got == digest, (
            f"landed migration {name} was edited (sha256 {got}, landed {digest}): "
            "write a new revision instead")


#: The chain ran out of numeric order before this test (0010 -> 0012 -> 0015 -> 0014 -> 0011 ->
#: 0016 -> 0017); from this revision on, ids follow the chain.
IN_ORDER_FROM = "0017"


def test_every_migration_is_recorded_and_chained_in_order() -> None:
    files = sorted(VERSIONS.glob("[0-9]*.py"))
    unrecorded = [p.name for p in files if p.name[:4] not in LANDED]
    assert not unrecorded, f"record the new migration's hash in LANDED: {unrecorded}"
    down_of: dict[str | None, str] = {}
    for path in files:
        rev, down = _revisions(path)
        assert path.name.startswith(rev + "_"), f"{path.name}: revision {rev} is not its number"
        assert down not in down_of, f"{path.name}: a second child of {down} (a branch in the chain)"
        down_of[down] = rev
    chain: list[str] = []
    rev_or_none: str | None = None
    while rev_or_none in down_of:
        rev_or_none = down_of[rev_or_none]
        chain.append(rev_or_none)
    assert len(chain) == len(files), f"not one chain from the base: {chain}"
    tail = chain[chain.index(IN_ORDER_FROM):]
    assert tail == sorted(tail), f"revisions after {IN_ORDER_FROM} out of chain order: {tail}"
