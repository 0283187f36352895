"""Tests for active-check parsers: dcgmi diag -j, nccl-tests, gpu-burn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpufleet.collect.active import parse_dcgm_diag_json, parse_gpu_burn, parse_nccl_tests
from gpufleet.domain.evidence import DcgmDiagResult
from gpufleet.errors import ParseError

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "captured"
DCGM = CAPTURED / "dcgm"
ACTIVE = CAPTURED / "active"

DEPLOYMENT_TESTS = [
    "Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS-related Blocks",
    "Persistence Mode", "Environmental Variables", "Page Retirement/Row Remap",
    "Graphics Processes", "Inforom",
]


# ------------------------------------------------------------------------------ DCGM


@pytest.mark.parametrize(
    "name",
    [
        # Raw literal: a blank line, "WARNING: THIS SHOULD NOT HAPPEN", then tab-indented JSON.
        "nvidia-dcgm_JsonResultTests_real-output_diag-3.1.0_8gpu.txt",
        "nvidia-dcgm_JsonResultTests_real-output_diag-3.1.0_8gpu.prefix-stripped.json",
    ],
)
def test_dcgm_real_output(name: str) -> None:
    result = parse_dcgm_diag_json((DCGM / name).read_text(), level=1)
    assert result.dcgm_version == "3.1.0"
    assert result.level == 1
    assert result.gpu_ids == list(range(8))
    assert result.passed is True
    assert result.runtime_error is None
    assert [t.name for t in result.tests] == [*DEPLOYMENT_TESTS, "software"]
    assert {t.category for t in result.tests[:9]} == {"Deployment"}
    assert result.tests[9].category == "Custom"
    for test in result.tests:
        assert test.status == {gpu: "PASS" for gpu in range(8)}
    assert result.failed_gpus == []


def test_dcgm_both_fixtures_agree() -> None:
    raw = DCGM / "nvidia-dcgm_JsonResultTests_real-output_diag-3.1.0_8gpu.txt"
    stripped = DCGM / "nvidia-dcgm_JsonResultTests_real-output_diag-3.1.0_8gpu.prefix-stripped.json"
    assert parse_dcgm_diag_json(raw.read_text()) == parse_dcgm_diag_json(stripped.read_text())


def _diag(results: list[object], **extra: object) -> str:
    # Shape per DCGM's nvvs/include/JsonResult.hpp (warnings as objects with error ids).
    body = {
        "DCGM GPU Diagnostic": {
            "version": "3.3.9",
            "test_categories": [
                {"category": "Hardware", "tests": [{"name": "Memory", "results": results}]}
            ],
            **extra,
        }
    }
    return json.dumps(body)


def test_dcgm_failure_with_warnings() -> None:
    text = _diag([
        {"gpu_ids": "0", "status": "PASS"},
        {"gpu_ids": 1, "status": "FAIL", "warnings": [
            {"warning": "Detected 2 double-bit ECC errors", "error_id": 8,
             "error_category": 2, "error_severity": 3},
            None,
        ]},
        {"gpu_ids": "2,3", "status": "SKIP"},
        {"gpu_ids": "4", "status": "WARN", "warnings": ["plain string warning"]},
    ])
    result = parse_dcgm_diag_json(text, level=3)
    assert result.passed is False
    assert result.failed_gpus == [1]
    assert result.gpu_ids == [0, 1, 2, 3, 4]
    memory = result.tests[0]
    assert memory.status == {0: "PASS", 1: "FAIL", 2: "SKIP", 3: "SKIP", 4: "WARN"}
    assert memory.results[1].warnings == ["Detected 2 double-bit ECC errors"]
    assert memory.results[4].warnings == ["plain string warning"]


def test_dcgm_warn_only_still_passes() -> None:
    result = parse_dcgm_diag_json(_diag([{"gpu_ids": "0,1", "status": "WARN"}]))
    assert result.passed is True


def test_dcgm_runtime_error_fails() -> None:
    text = json.dumps({"DCGM GPU Diagnostic": {"version": "3.3.9",
                                               "runtime_error": "Unable to create GPU group"}})
    result = parse_dcgm_diag_json(text)
    assert result.passed is False
    assert result.runtime_error == "Unable to create GPU group"
    assert result.tests == []


def test_dcgm_truncated_json_raises_with_line() -> None:
    text = (DCGM / "nvidia-dcgm_JsonResultTests_real-output_diag-3.1.0_8gpu.txt").read_text()
    cut = "\n".join(text.splitlines()[:40])
    with pytest.raises(ParseError) as err:
        parse_dcgm_diag_json(cut, "h1:dcgmi diag -j")
    assert err.value.source == "h1:dcgmi diag -j"
    assert err.value.line is not None and err.value.line >= 3


def test_dcgm_garbage_raises() -> None:
    with pytest.raises(ParseError) as err:
        parse_dcgm_diag_json("Error: unable to establish a connection to the host engine\n")
    assert err.value.line == 1
    with pytest.raises(ParseError, match="status"):
        parse_dcgm_diag_json(_diag([{"gpu_ids": "0", "status": "MAYBE"}]))
    with pytest.raises(ParseError, match="gpu_ids"):
        parse_dcgm_diag_json(_diag([{"gpu_ids": "a,b", "status": "PASS"}]))
    with pytest.raises(ParseError, match="DCGM GPU Diagnostic"):
        parse_dcgm_diag_json('{"something": "else"}')


def test_dcgm_model_is_frozen_and_strict() -> None:
    with pytest.raises(ValidationError):
        DcgmDiagResult(passed=True, level=5)
    with pytest.raises(ValidationError):
        DcgmDiagResult(passed=True, surprise=1)  # type: ignore[call-arg]


# ------------------------------------------------------------------------ nccl-tests


def test_nccl_superbench_allreduce_8xa100() -> None:
    # Older nccl-tests layout (no root column, "error" = N/A) with an interleaved NCCL INFO line.
    result = parse_nccl_tests((ACTIVE / "superbench_nccl_allreduce.log").read_text())
    assert result.op == "all_reduce_perf"
    assert result.max_bus_bw_gbps == 235.26
    assert result.avg_bus_bw_gbps == 68.4048
    assert result.size_max_bytes == 8589934592
    assert result.out_of_bounds_values == 0
    assert len(result.rows) == 34
    last = result.rows[-1]
    assert (last.size_bytes, last.count, last.dtype, last.redop, last.root) == (
        8589934592, 2147483648, "float", "sum", None,
    )
    assert (last.out_of_place.time_us, last.out_of_place.algbw_gbps) == (63896.0, 134.44)
    assert (last.in_place.busbw_gbps, last.in_place.wrong) == (235.03, None)
    assert result.wrong_total == 0


# Newer layout (root + #wrong columns), 16x H100 over 2 nodes. Short excerpt (header, last
# three rows, trailer) of output pasted in
# https://github.com/lessizzmore/create-a3mega-ztan-fork/blob/02dd8f455c43ced1cf442ef29334bda97149264b/ztan-NCCL-test-result
# (no license stated there, so only this excerpt is inlined rather than storing the file).
NCCL_NEW_LAYOUT = """\
# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
  2147483648     536870912     float     sum      -1    12646  169.81  318.40      0    12641  169.88  318.52      0
  4294967296    1073741824     float     sum      -1    24361  176.31  330.58      0    24365  176.27  330.51      0
  8589934592    2147483648     float     sum      -1    47535  180.71  338.82      0    47743  179.92  337.35      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 70.742 
"""  # noqa: E501, W291 - verbatim output: long lines and trailing blanks are real


def test_nccl_new_layout_with_root_and_wrong() -> None:
    result = parse_nccl_tests(NCCL_NEW_LAYOUT, "/opt/src/nccl-tests/build/all_reduce_perf -g 1")
    assert result.op == "all_reduce_perf"
    assert result.max_bus_bw_gbps == 338.82
    assert result.avg_bus_bw_gbps == 70.742
    assert result.size_max_bytes == 8589934592
    assert result.out_of_bounds_values == 0
    assert [r.root for r in result.rows] == [-1, -1, -1]
    assert [r.out_of_place.wrong for r in result.rows] == [0, 0, 0]


def test_nccl_wrong_values_are_counted() -> None:
    text = NCCL_NEW_LAYOUT.replace("338.82      0", "338.82      7")
    result = parse_nccl_tests(text, op="all_reduce")
    assert result.op == "all_reduce"
    assert result.wrong_total == 7


def test_nccl_truncated_row_raises_with_line() -> None:
    cut = NCCL_NEW_LAYOUT.replace(
        "  8589934592    2147483648     float     sum      -1    47535  180.71  338.82      0"
        "    47743  179.92  337.35      0",
        "  8589934592    2147483648     float",
    )
    with pytest.raises(ParseError) as err:
        parse_nccl_tests(cut, "h1:all_reduce_perf")
    assert (err.value.source, err.value.line) == ("h1:all_reduce_perf", 8)


def test_nccl_garbage_and_no_rows_raise() -> None:
    with pytest.raises(ParseError, match="header"):
        parse_nccl_tests("mpirun: command not found\n")
    header_only = "\n".join(NCCL_NEW_LAYOUT.splitlines()[:5])
    with pytest.raises(ParseError, match="no result rows"):
        parse_nccl_tests(header_only)


# -------------------------------------------------------------------------- gpu-burn


def test_gpu_burn_superbench_8xa100() -> None:
    result = parse_gpu_burn((ACTIVE / "superbench_gpu_burn.excerpt.log").read_text())
    assert [g.index for g in result.gpus] == list(range(8))
    assert all(g.ok for g in result.gpus)
    assert [g.errors for g in result.gpus] == [0] * 8
    assert result.passed is True
    assert result.faulty == []


def test_gpu_burn_faulty_gpu() -> None:
    text = (
        "100.0%  proc'd: 6783 (16942 Gflop/s) - 6783 (17093 Gflop/s)   errors: 0 - 112  (DIED!)"
        "   temps: 62 C - 59 C \n"
        "done\n\nTested 2 GPUs:\n\tGPU 0: OK\n\tGPU 1: FAULTY\n"
    )
    result = parse_gpu_burn(text)
    assert [g.ok for g in result.gpus] == [True, False]
    assert [g.errors for g in result.gpus] == [0, 112]
    assert result.passed is False
    assert result.faulty == [1]


def test_gpu_burn_errors_from_last_progress_line() -> None:
    text = (
        "50.0%  proc'd: 1 (1 Gflop/s) - 1 (1 Gflop/s)   errors: 0 - 0   temps: 40 C - 40 C \n"
        "100.0%  proc'd: 2 (1 Gflop/s) - 2 (1 Gflop/s)   errors: 0 - 3   temps: 41 C - 41 C \n"
        "Tested 2 GPUs:\n\tGPU 0: OK\n\tGPU 1: FAULTY\n"
    )
    assert [g.errors for g in parse_gpu_burn(text).gpus] == [0, 3]


def test_gpu_burn_unfinished_or_truncated_raises() -> None:
    with pytest.raises(ParseError, match="Tested"):
        parse_gpu_burn("Burning for 60 seconds.\nNo clients are alive!  Aborting\n", "h1:gpu_burn")
    with pytest.raises(ParseError) as err:
        parse_gpu_burn("Tested 8 GPUs:\n\tGPU 0: OK\n\tGPU 1: OK\n")
    assert err.value.line == 1
    with pytest.raises(ParseError) as err:
        parse_gpu_burn("Tested 2 GPUs:\n\tGPU 0: OK\n\tGPU 1: MAYBE\n")
    assert err.value.line == 3
