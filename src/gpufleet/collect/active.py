"""Parsers for active-check output: ``dcgmi diag -j``, nccl-tests, gpu-burn.

Each returns a complete evidence record or raises :class:`ParseError`; a run that died
before printing its summary is an error here (the caller knows the exit status and decides
what that means for the host), never a record that pretends the run finished.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

from gpufleet.collect.fit import build, int_of
from gpufleet.domain.evidence import (
    DcgmDiagResult,
    DcgmGpuResult,
    DcgmTest,
    DiagStatus,
    GpuBurnGpu,
    GpuBurnResult,
    NcclMeasurement,
    NcclResult,
    NcclRow,
)
from gpufleet.errors import ParseError

# ------------------------------------------------------------------------------ DCGM

_DIAG_ROOTS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")
_STATUS_ALIASES: dict[str, DiagStatus] = {
    "PASS": "PASS",
    "FAIL": "FAIL",
    "WARN": "WARN",
    "SKIP": "SKIP",
    "SKIPPED": "SKIP",
}


def _json_start(text: str) -> tuple[int, int]:
    """Offset and 1-based line of the first line that opens a JSON object.

    dcgmi may print warnings (e.g. "WARNING: THIS SHOULD NOT HAPPEN") before the JSON.
    """
    offset = 0
    for lineno, line in enumerate(text.splitlines(keepends=True), start=1):
        stripped = line.lstrip()
        if stripped.startswith("{"):
            return offset + len(line) - len(stripped), lineno
        offset += len(line)
    raise ParseError("", "no JSON object in output", line=1)


def _gpu_ids(value: Any, where: str, source: str) -> list[int]:
    if isinstance(value, bool):
        raise ParseError(source, f"{where}: bad gpu_ids {value!r}")
    if isinstance(value, int):
        return [value]
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if parts and all(p.isascii() and p.isdigit() for p in parts):
            return [int_of(p, source, f"{where}: gpu_ids") for p in parts]
    raise ParseError(source, f"{where}: bad gpu_ids {value!r}")


def _warnings(value: Any, where: str, source: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ParseError(source, f"{where}: 'warnings' is not a list")
    out: list[str] = []
    for w in value:
        if w is None:
            continue  # DCGM itself skips null warnings
        if isinstance(w, str):
            out.append(w)
        elif isinstance(w, dict) and isinstance(w.get("warning"), str):
            out.append(w["warning"])
        else:
            raise ParseError(source, f"{where}: unreadable warning {w!r}")
    return out


def _obj(value: Any, where: str, source: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ParseError(source, f"{where}: expected an object")
    return cast(dict[str, Any], value)


def _list(value: Any, where: str, source: str) -> list[Any]:
    if not isinstance(value, list):
        raise ParseError(source, f"{where}: expected a list")
    return value


def parse_dcgm_diag_json(
    text: str, source: str = "dcgmi diag -j", *, level: int | None = None
) -> DcgmDiagResult:
    """Parse ``dcgmi diag -j`` output; ``level`` is the ``-r`` level the run used (not in JSON).

    Text before the first line starting with ``{`` (dcgmi warnings) and after the JSON
    object is ignored. A result naming several GPUs ("0,1,2") is expanded per GPU.
    """
    try:
        start, start_line = _json_start(text)
    except ParseError as exc:
        raise ParseError(source, exc.message, line=exc.line) from None
    try:
        doc, _ = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as exc:
        # exc.lineno counts from the start of text; keep it (it is the real line).
        raise ParseError(
            source, f"invalid JSON: {exc.msg}", line=exc.lineno, column=exc.colno
        ) from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit number, nesting past the stack
        raise ParseError(source, f"JSON that cannot be read: {str(exc)[:80]}") from None
    root_obj = _obj(doc, "top level", source)
    root_key = next((k for k in _DIAG_ROOTS if k in root_obj), None)
    if root_key is None:
        raise ParseError(source, f"no {' / '.join(_DIAG_ROOTS)!r} object", line=start_line)
    diag = _obj(root_obj[root_key], root_key, source)

    runtime_error = diag.get("runtime_error")
    if runtime_error is not None and not isinstance(runtime_error, str):
        raise ParseError(source, "runtime_error is not a string")
    categories = diag.get("test_categories")
    if categories is None and runtime_error is None:
        raise ParseError(source, "neither test_categories nor runtime_error present")

    tests: list[DcgmTest] = []
    for ci, cat in enumerate(_list(categories or [], "test_categories", source)):
        where_c = f"test_categories[{ci}]"
        cat_obj = _obj(cat, where_c, source)
        category = cat_obj.get("category")
        if not isinstance(category, str):
            raise ParseError(source, f"{where_c}: missing 'category'")
        for ti, test in enumerate(_list(cat_obj.get("tests"), f"{where_c}.tests", source)):
            if test is None:
                continue  # dcgmi 3.x emits nulls between tests
            where_t = f"{where_c}.tests[{ti}]"
            test_obj = _obj(test, where_t, source)
            name = test_obj.get("name")
            if not isinstance(name, str):
                raise ParseError(source, f"{where_t}: missing 'name'")
            results: list[DcgmGpuResult] = []
            raw_results = _list(test_obj.get("results", []), f"{where_t}.results", source)
            for ri, res in enumerate(raw_results):
                if res is None:
                    continue
                where_r = f"{where_t}.results[{ri}]"
                res_obj = _obj(res, where_r, source)
                ids_value = next(
                    (res_obj[k] for k in ("gpu_ids", "gpu_id", "entity_id") if k in res_obj),
                    None,
                )
                status = _STATUS_ALIASES.get(str(res_obj.get("status", "")).upper())
                if status is None:
                    raise ParseError(source, f"{where_r}: bad status {res_obj.get('status')!r}")
                warns = _warnings(res_obj.get("warnings"), where_r, source)
                for gpu in _gpu_ids(ids_value, where_r, source):
                    results.append(
                        build(
                            DcgmGpuResult,
                            source,
                            where=f"{where_r}: ",
                            gpu_id=gpu,
                            status=status,
                            warnings=warns,
                        )
                    )
            tests.append(
                build(
                    DcgmTest,
                    source,
                    where=f"{where_t}: ",
                    name=name,
                    category=category,
                    results=results,
                )
            )

    version = diag.get("version")
    gpu_ids = sorted({r.gpu_id for t in tests for r in t.results})
    failed = any(r.status == "FAIL" for t in tests for r in t.results)
    return build(
        DcgmDiagResult,
        source,
        dcgm_version=str(version) if version is not None else None,
        level=level,
        gpu_ids=gpu_ids,
        tests=tests,
        runtime_error=runtime_error,
        passed=not failed and runtime_error is None,
    )


# ------------------------------------------------------------------------ nccl-tests

_NCCL_OP = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_NCCL_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_NCCL_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_ROW_KEYS = ("size", "count", "type", "redop", "root")
_HALF = ("time", "algbw", "busbw")


def _wrong(value: str) -> int | None:
    # "#wrong" is an int, "N/A" with -c 0; very old versions had a float "error" column.
    return int(value) if value.isdigit() else None


def parse_nccl_tests(
    text: str, source: str = "all_reduce_perf", *, op: str | None = None
) -> NcclResult:
    """Parse nccl-tests stdout (``all_reduce_perf -b 8 -e 8G -f 2 -g 8`` and friends).

    Columns are located from the ``# size count type ...`` header, so versions with or
    without ``redop`` / ``root`` and with ``#wrong`` or the older ``error`` column all work.
    Lines that are neither comments nor numeric rows (NCCL INFO logs, mpirun chatter) are
    skipped; a numeric row with the wrong number of fields raises.
    """
    header: list[str] | None = None
    rows: list[NcclRow] = []
    found_op: str | None = None
    oob: int | None = None
    avg: float | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            tokens = line.lstrip("#").split()
            if tokens[:2] == ["size", "count"] and "busbw" in tokens:
                header = tokens
            elif m := _NCCL_OP.match(line):
                found_op = m.group(1)
            elif m := _NCCL_OOB.match(line):
                oob = int_of(m.group(1), source, "out of bounds values", line=lineno)
            elif m := _NCCL_AVG.match(line):
                try:
                    avg = float(m.group(1))
                except ValueError:
                    raise ParseError(
                        source, f"unreadable average bus bandwidth {m.group(1)[:40]!r}", line=lineno
                    ) from None
            continue
        fields = line.split()
        if not fields[0].isdigit():
            continue  # interleaved log output
        if header is None:
            raise ParseError(source, "result row before the column header", line=lineno)
        if len(fields) != len(header):
            raise ParseError(
                source, f"row has {len(fields)} fields, header has {len(header)}", line=lineno
            )
        rows.append(_nccl_row(header, fields, source, lineno))
    if header is None:
        raise ParseError(source, "no '# size count type ...' header (did the test start?)", line=1)
    if not rows:
        raise ParseError(source, "no result rows (did the test finish?)")
    return build(
        NcclResult,
        source,
        op=op or found_op or source.split()[0].rsplit("/", 1)[-1],
        max_bus_bw_gbps=max(max(r.out_of_place.busbw_gbps, r.in_place.busbw_gbps) for r in rows),
        avg_bus_bw_gbps=avg,
        size_max_bytes=max(r.size_bytes for r in rows),
        out_of_bounds_values=oob,
        rows=rows,
    )


def _nccl_row(header: list[str], fields: list[str], source: str, lineno: int) -> NcclRow:
    try:
        first_time = header.index("time")
        key = dict(zip(header[:first_time], fields[:first_time], strict=True))
        halves: list[NcclMeasurement] = []
        for start in (first_time, first_time + 4):
            names = header[start : start + 4]
            vals = fields[start : start + 4]
            if tuple(names[:3]) != _HALF or len(vals) != 4:
                raise ParseError(source, f"unexpected column layout {header}", line=lineno)
            halves.append(
                NcclMeasurement(
                    time_us=float(vals[0]),
                    algbw_gbps=float(vals[1]),
                    busbw_gbps=float(vals[2]),
                    wrong=_wrong(vals[3]),
                )
            )
        unknown = set(key) - set(_ROW_KEYS)
        if unknown:
            raise ParseError(source, f"unknown columns {sorted(unknown)}", line=lineno)
        return NcclRow(
            size_bytes=int(key["size"]),
            count=int(key["count"]),
            dtype=key["type"],
            redop=key.get("redop"),
            root=int(key["root"]) if "root" in key else None,
            out_of_place=halves[0],
            in_place=halves[1],
        )
    except (ValueError, KeyError) as exc:
        raise ParseError(source, f"unreadable row: {exc}", line=lineno) from None


# -------------------------------------------------------------------------- gpu-burn

_BURN_TESTED = re.compile(r"^Tested (\d+) GPUs:\s*$")
_BURN_VERDICT = re.compile(r"^GPU (\d+): (OK|FAULTY)\s*$")
# "errors: 0 - 112 (DIED!) - 0   temps: ..." (a dead worker is flagged after its count).
_BURN_ERRORS = re.compile(r"errors:(.*?)temps:")


def parse_gpu_burn(text: str, source: str = "gpu_burn") -> GpuBurnResult:
    """Parse gpu-burn's final ``Tested N GPUs:`` block (``GPU 0: OK`` / ``GPU 1: FAULTY``).

    Per-GPU error counts come from the last progress line when one is present.
    """
    lines = text.splitlines()
    tested_at = None
    expected = 0
    for i, line in enumerate(lines):
        m = _BURN_TESTED.match(line.strip())
        if m:
            tested_at, expected = i, int_of(m.group(1), source, "GPUs tested", line=i + 1)
    if tested_at is None:
        raise ParseError(source, "no 'Tested N GPUs:' summary (gpu_burn did not finish?)")

    verdicts: list[tuple[int, bool]] = []
    for j in range(tested_at + 1, len(lines)):
        line = lines[j].strip()
        if not line:
            continue
        v = _BURN_VERDICT.match(line)
        if v is None:
            raise ParseError(source, f"unexpected line in summary {line[:60]!r}", line=j + 1)
        verdicts.append((int_of(v.group(1), source, "GPU", line=j + 1), v.group(2) == "OK"))
    if len(verdicts) != expected:
        raise ParseError(
            source, f"summary lists {len(verdicts)} of {expected} GPUs", line=tested_at + 1
        )

    errors: list[int] | None = None
    progress = _BURN_ERRORS.findall(text)
    if progress:
        counts = [re.match(r"\s*(\d+)", item) for item in progress[-1].split(" - ")]
        errors = [int_of(c.group(1), source, "errors") for c in counts if c is not None]
        if len(errors) != expected or len(counts) != expected:
            errors = None  # progress line of a different GPU set: do not misattribute
    return build(
        GpuBurnResult,
        source,
        gpus=[
            build(
                GpuBurnGpu,
                source,
                index=idx,
                ok=ok,
                errors=errors[idx] if errors and idx < len(errors) else None,
            )
            for idx, ok in verdicts
        ],
    )
