"""The parse fast paths (issue 8) answer exactly as the general code they stand in for.

* ``-q`` GPU sections are read through :class:`_TextFlatView` (one walk of the table paths)
  instead of :class:`_TextView` (a lookup per path): same values, same refusals.
* Values are memoised per adapter, ``-q`` lines per distinct line, nvlink / lspci / ibstat
  lines per distinct line: a warm parse equals a cold one, a refusal is never memoised.

Inputs are the real ``-q`` captures and the lab's H100 report, mutated by hypothesis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpufleet.collect.nvidia_smi.text as text_mod
from gpufleet.collect import ib, pci, topology
from gpufleet.collect.nvidia_smi import parse_nvidia_smi_text, parse_nvidia_smi_xml
from gpufleet.collect.nvidia_smi.common import (
    _MEMO_MAX,
    _MEMOS,
    _TextFlatView,
    _TextNode,
    _TextView,
    _trim_memos,
)
from gpufleet.collect.nvidia_smi.text import _GPU_PATHS, _LINE_CACHE, _text_tree
from gpufleet.errors import ParseError
from gpufleet.lab.captures import captures_dir
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.renderers import render_sections

Q_FILES = sorted(
    p for p in (captures_dir() / "nvidia-smi-q").glob("gpud_nvidia-smi-query.*.valid*.txt")
)
H100_Q = render_sections(LabHost(name="p", model="h100-8x", serial_salt=1))["nvidia-smi-q"].stdout
A100_XML = render_sections(LabHost(name="p", model="a100-8x", serial_salt=1))[
    "nvidia-smi-xml"
].stdout
VALUES = ["[GPU is lost]", "N/A", "Unknown Error", "abc MiB", "12.5 MiB", "-3", "", "Yes", "7 W"]


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", fn().model_dump(mode="json")
    except ParseError as exc:
        return "error", (str(exc), exc.line)


def _cold() -> None:
    for memo in _MEMOS.values():
        memo.clear()
    _LINE_CACHE.clear()


def _general(text: str) -> tuple[str, Any]:
    """The report through _TextView and cold memos (the general path)."""
    _cold()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(text_mod, "_TextFlatView", lambda node, paths: _TextView(node))
        return _outcome(lambda: parse_nvidia_smi_text(text))


def _sections(text: str) -> list[_TextNode]:
    root, _ = _text_tree(text, "q")
    return [n for n in root.children if n.value is None]


@pytest.mark.parametrize("path", Q_FILES, ids=lambda p: p.name)
def test_flat_view_answers_every_path_as_the_text_view(path: Any) -> None:
    sections = _sections(path.read_text())
    assert sections
    for node in sections:
        flat, slow = _TextFlatView(node, _GPU_PATHS), _TextView(node)
        # every table path and prefix, and paths outside the table (answered by the slow view)
        for p in [*sorted(_GPU_PATHS.all), "product_name", "nope", "pci/nope", "clocks/nope"]:
            assert flat.raw(p) == slow.raw(p), p
            a, b = flat.node(p), slow.node(p)
            assert (a is None) == (b is None), p
            if a is not None and b is not None:
                assert a.where("") == b.where(""), p
                assert [(k, v) for k, v, _ in a.leaves()] == [(k, v) for k, v, _ in b.leaves()]


@pytest.mark.parametrize("path", Q_FILES, ids=lambda p: p.name)
def test_warm_parse_equals_general_parse(path: Any) -> None:
    text = path.read_text()
    general = _general(text)
    assert _outcome(lambda: parse_nvidia_smi_text(text)) == general  # warm memos now
    assert _outcome(lambda: parse_nvidia_smi_text(text)) == general


@st.composite
def _mutated_q(draw: st.DrawFn) -> str:
    lines = H100_Q.split("\n")
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(1, len(lines) - 1))
        op = draw(st.sampled_from(["dup", "del", "value", "block"]))
        if op == "dup":
            lines.insert(i, lines[i])
        elif op == "del":
            del lines[i]
        elif op == "value" and " : " in lines[i]:
            key = lines[i].split(" : ", 1)[0]
            lines[i] = f"{key} : {draw(st.sampled_from(VALUES))}"
        elif op == "block":  # a block copied in again: first-of-a-name must still win
            j = min(len(lines), i + draw(st.integers(1, 12)))
            lines[j:j] = lines[i:j]
    return "\n".join(lines)


@settings(max_examples=60, deadline=None)
@given(_mutated_q())
def test_mutated_reports_parse_as_the_general_path(text: str) -> None:
    general = _general(text)
    assert _outcome(lambda: parse_nvidia_smi_text(text)) == general
    assert _outcome(lambda: parse_nvidia_smi_text(text)) == general  # warm: memo + lines


def test_refused_value_is_refused_again_after_good_reads() -> None:
    _cold()
    parse_nvidia_smi_xml(A100_XML)  # warms the memos with the good readings
    bad = A100_XML.replace("<total>", "<total>abc", 1)
    with pytest.raises(ParseError) as first:
        parse_nvidia_smi_xml(bad)
    with pytest.raises(ParseError) as again:
        parse_nvidia_smi_xml(bad)
    assert str(first.value) == str(again.value)
    assert "abc" in str(first.value)
    assert not any("abc" in str(k) for memo in _MEMOS.values() for k in memo)
    # and a lost GPU is still seen when its readings are memoised
    lost = A100_XML.replace("<uuid>", "<uuid>[GPU is lost]", 1)
    lost = lost.replace(lost[lost.index("[GPU is lost]") : lost.index("</uuid>")], "[GPU is lost]")
    report = parse_nvidia_smi_xml(lost)
    assert report.gpus[0].error == "GPU is lost (uuid)"


def test_memos_are_bounded() -> None:
    memo = next(iter(_MEMOS.values()))
    memo.update({f"k{i}": i for i in range(_MEMO_MAX + 1)})
    _trim_memos()
    assert len(memo) == 0


def test_line_cache_keeps_structure_checks() -> None:
    _cold()
    _text_tree(H100_Q, "q")  # every line cached
    lines = H100_Q.split("\n")

    def indent(line: str) -> int:
        return len(line) - len(line.lstrip(" "))

    # a line after a sibling, moved 2 spaces left: a cached line, in a wrong place
    i = next(
        n
        for n, line in enumerate(lines)
        if indent(line) == 8 and indent(lines[n - 1]) == 8 and " : " in line
    )
    bad = "\n".join([*lines[:i], lines[i][2:], *lines[i + 1 :]])
    with pytest.raises(ParseError, match="inconsistent indentation"):
        _text_tree(bad, "q")
    with pytest.raises(ParseError, match="tab in indentation"):
        _text_tree("\n".join([*lines[:i], "\t" + lines[i], *lines[i + 1 :]]), "q")


NVLINK = "GPU 0: NVIDIA H100 (UUID: GPU-1)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n"
LSPCI = "19:00.0 3D controller [0302]: NVIDIA Corporation GH100 [10de:2330] (rev a1)\n"
IBSTAT = (
    "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n"
    "\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tLink layer: InfiniBand\n"
)


def test_line_memos_of_nvlink_lspci_ibstat() -> None:
    for memo in (topology._LINK_MEMO, pci._MEMO, ib._KINDS):
        memo.clear()
    cold = (
        topology.parse_nvlink_status(NVLINK),
        pci.parse_lspci(LSPCI),
        ib.parse_ibstat(IBSTAT),
    )
    warm = (
        topology.parse_nvlink_status(NVLINK),
        pci.parse_lspci(LSPCI),
        ib.parse_ibstat(IBSTAT),
    )
    assert warm == cold
    assert topology._LINK_MEMO and pci._MEMO and ib._KINDS
    # a memoised link line before any GPU header is still refused
    with pytest.raises(ParseError, match=r"expected 'GPU <n>: \.\.\.'"):
        topology.parse_nvlink_status("\t Link 0: 26.562 GB/s\n")
    # an ibstat attribute line before any CA is still refused
    with pytest.raises(ParseError, match="expected \"CA '<name>'\""):
        ib.parse_ibstat("\tState: Active\n" + IBSTAT)
