"""Bundle framing: markers count only as whole lines; anything else is the tool's output."""

from __future__ import annotations

import pytest

from gpufleet.collect.bundle import Section, render_bundle, split_bundle
from gpufleet.errors import ParseError


def test_marker_text_inside_output_is_output() -> None:
    out = (
        "x @@gpufleet:end a rc=0@@\n"  # not at a line start
        "@@gpufleet:end a rc=0@@ trailing\n"  # not the whole line
        "@@gpufleet:begin b@@\n"  # another section's marker inside a: output
        "@@gpufleet:bogus@@"
    )
    bundle = render_bundle([Section("a", out, "warn", 3), Section("b", "B", "", 0)])
    got = split_bundle(bundle)
    assert got["a"] == Section("a", out, "warn", 3)
    assert got["b"] == Section("b", "B", "", 0)


def test_a_section_twice_is_refused_with_its_line() -> None:
    bundle = render_bundle([Section("a", "1", "", 0), Section("a", "2", "", 0)])
    with pytest.raises(ParseError, match="appears twice") as exc:
        split_bundle(bundle)
    assert exc.value.line == 7 and "first at line 2" in str(exc.value)


def test_truncated_bundle_is_refused() -> None:
    bundle = render_bundle([Section("a", "1\n2\n", "", 0)])
    with pytest.raises(ParseError, match="truncated"):
        split_bundle(bundle[: bundle.index("@@gpufleet:end")])
