"""Issue 8, reads: the CLI's JSON text (``gpufleet.cli.json_text.dumps_indented``) is exactly
``json.dumps(data, indent=2, default=...)``: any JSON-like data, with the subclasses, keys,
floats and ``default`` values the CLI prints, and the same errors."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from enum import Enum, IntEnum, StrEnum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.cli.common import _json_default, print_json
from gpufleet.cli.json_text import dumps_indented
from gpufleet.domain.states import HostState


class Color(Enum):
    RED = "red"


class Level(IntEnum):
    HIGH = 3


class Mode(StrEnum):
    FAST = "fast\u00e9"


class Tagged(dict[str, Any]):
    pass


class Row(list[Any]):
    pass


_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
    | st.sampled_from(
        [
            Color.RED,
            Level.HIGH,
            Mode.FAST,
            HostState.AVAILABLE,
            datetime(2026, 1, 5, 10, 0, tzinfo=UTC),
            datetime(2026, 1, 5, 10, 0),
            1.5e300,
            -0.0,
            2**70,
            b"bytes",
        ]
    )
)
_keys = st.text() | st.integers() | st.floats() | st.booleans() | st.none() | st.just(Mode.FAST)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.lists(inner, max_size=3).map(tuple)
        | st.lists(inner, max_size=3).map(Row)
        | st.dictionaries(_keys, inner, max_size=5)
        | st.dictionaries(st.text(), inner, max_size=3).map(Tagged)
    ),
    max_leaves=40,
)


@settings(max_examples=600, deadline=None)
@given(_json)
def test_the_text_is_json_dumps_indent_2(data: Any) -> None:
    assert dumps_indented(data, _json_default) == json.dumps(data, indent=2, default=_json_default)


def test_what_json_dumps_refuses_it_refuses_alike() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    for bad in ({(1, 2): "tuple key"}, loop, {"a": {"b": [{object(): 1}]}}):
        with pytest.raises((TypeError, ValueError)) as want:
            json.dumps(bad, indent=2, default=_json_default)
        with pytest.raises(type(want.value), match=str(want.value)[:30].replace("(", ".")):
            dumps_indented(bad, _json_default)


def test_print_json_prints_the_document_and_a_newline(capsys: pytest.CaptureFixture[str]) -> None:
    doc = {"host": "gpu-01", "labels": {"a": "1", "n": 8}, "taints": [], "x": math.inf}
    print_json(doc)
    assert capsys.readouterr().out == json.dumps(doc, indent=2) + "\n"
