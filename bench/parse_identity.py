"""Parse-identity checker (issue 8): every parse result, or every refusal, stays the same.

Runs the collection's parsers over every captured fixture and every lab model's rendered
output, plus deterministic mutations of each (bad values, nvidia-smi's "[GPU is lost]" /
"[N/A]" / "[Unknown Error]" spellings, duplicated blocks, truncations, removed fields,
comments, CRLF ...), and records per case either ``model_dump(mode="json")`` of the result
or the exact error (type, message, line, column), in one JSON file with sorted keys. Two
trees parse identically on these cases when their files are byte-identical.

Inputs (captures are read from both ``tests/fixtures/captured`` and
``/work/shared/fixtures`` when present, deduplicated by content):

* ``nvidia-smi -q -x`` files        -> ``parse_nvidia_smi_xml``
* ``nvidia-smi -q`` files and the ``-q`` sections of nvidia_gpu_exporter bundles
                                   -> ``parse_nvidia_smi_text``
* the ``--query-gpu`` CSV sections of those bundles
                                   -> ``parse_query_gpu_csv`` / ``parse_query_gpu_report``
* ``topo -m``, ``nvlink -s``, ``ibstat``, ``lspci -nn`` captures -> their parsers
* every lab model (``gpufleet.lab.catalogue.MODELS``) with several fault sets: the framed
  bundle through ``split_bundle`` + ``assemble_facts`` (fixed time), and each of its
  nvidia-smi / topology / ibstat / lspci sections through its parser on its own; the GPU
  report section is also mutated and put back into the bundle.

Usage (record the tree under test, then compare with a recording of the reference tree)::

    .venv/bin/python bench/parse_identity.py record /tmp/after.json
    PYTHONPATH=/tmp/parse-before/src .venv/bin/python bench/parse_identity.py \\
        record /tmp/before.json
    .venv/bin/python bench/parse_identity.py compare /tmp/before.json /tmp/after.json

``compare`` exits 1 and names the first differing cases unless the two files are
byte-identical. ``record`` prints which ``gpufleet`` it imported, the number of cases and
of refusals.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURE_DIRS = (ROOT / "tests/fixtures/captured", Path("/work/shared/fixtures"))
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

#: Replacement values tried in place of an existing value.
BAD_VALUES = (
    "[GPU is lost]",
    "GPU is lost",
    "[N/A]",
    "N/A",
    "[Unknown Error]",
    "Unknown Error",
    "ERR!",
    "GPU requires reset",
    "Not Supported",
    "abc MiB",
    "12.5 MiB",
    "-7",
    "1e3",
    "99999999999999999999999999999999999 MiB",
    "123456789012",
    "",
    "  42  ",
    "Enabled",
    "x" * 300,
    "0000:zz:00.0",
)


def _result(fn: Callable[[], Any]) -> dict[str, Any]:
    try:
        value = fn()
    except Exception as exc:
        return {
            "error": type(exc).__name__,
            "message": str(exc),
            "line": getattr(exc, "line", None),
            "column": getattr(exc, "column", None),
        }
    return {"ok": _dump(value)}


def _dump(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _dump(v) for k, v in value.items()}
    if hasattr(value, "__dataclass_fields__"):
        return {k: _dump(getattr(value, k)) for k in value.__dataclass_fields__}
    return value


def _files(sub: str, pattern: str = "*") -> list[tuple[str, str]]:
    """(name, text) of the files under ``sub`` in every fixture dir, deduplicated."""
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for base in FIXTURE_DIRS:
        d = base / sub
        if not d.is_dir():
            continue
        for p in sorted(d.glob(pattern)):
            if not p.is_file() or p.name == "PROVENANCE.md":
                continue
            text = p.read_text(encoding="utf-8", errors="surrogateescape")
            h = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
            if h in seen:
                continue
            seen.add(h)
            out.append((f"{sub}/{p.name}", text))
    return out


# ------------------------------------------------------------------------- mutations

_XML_LEAF = re.compile(r"<([A-Za-z_][\w.-]*)>([^<>]*)</\1>")
_XML_TAGS = (
    "uuid", "product_name", "pci_bus_id", "total", "used", "gpu_temp", "power_draw",
    "retired_count", "remapped_row_corr", "remapped_row_pending", "sm_clock", "pid",
    "used_memory", "persistence_mode", "current_mig", "current_ecc", "fan_speed",
    "current_link_width", "current_link_gen", "driver_version", "attached_gpus",
    "sram_uncorrectable", "sram_correctable", "dram_uncorrectable", "gpu_util",
    "clocks_event_reason_gpu_idle", "gpu_temp_max_threshold", "state", "serial",
    "gpu_instance_id", "multiprocessor_count", "cuda_version",
)  # fmt: skip


def xml_mutations(text: str, seed: str) -> Iterator[tuple[str, str]]:
    rng = random.Random(seed)
    leaves = list(_XML_LEAF.finditer(text))
    yield "as-is", text
    for tag in _XML_TAGS:
        hits = [m for m in leaves if m.group(1) == tag]
        if not hits:
            continue
        m = hits[rng.randrange(len(hits))]
        for k, bad in enumerate(rng.sample(BAD_VALUES, 4)):
            yield f"{tag}={k}", text[: m.start(2)] + bad + text[m.end(2) :]
    for n in range(min(12, len(leaves))):
        m = leaves[rng.randrange(len(leaves))]
        bad = BAD_VALUES[rng.randrange(len(BAD_VALUES))]
        yield f"leaf{n}:{m.group(1)}", text[: m.start(2)] + bad + text[m.end(2) :]
    # every GPU lost / unknown in its vital value
    yield "all-uuid-lost", re.sub(r"<uuid>[^<]*</uuid>", "<uuid>[GPU is lost]</uuid>", text)
    yield "all-na", _XML_LEAF.sub(lambda m: f"<{m.group(1)}>N/A</{m.group(1)}>", text)
    # duplicated blocks
    g = text.find("<gpu ")
    ge = text.find("</gpu>", g)
    if g >= 0 and ge >= 0:
        block = text[g : ge + 6]
        yield "dup-gpu", text[: ge + 6] + "\n" + block + text[ge + 6 :]
        for tag in ("pci", "fb_memory_usage", "temperature", "ecc_errors", "processes", "uuid"):
            s = block.find(f"<{tag}>")
            e = block.find(f"</{tag}>", s)
            if s >= 0 and e >= 0:
                inner = block[s : e + len(tag) + 3]
                yield (
                    f"dup-{tag}",
                    text[: g + e + len(tag) + 3] + inner + text[g + e + len(tag) + 3 :],
                )
                yield f"del-{tag}", text[: g + s] + text[g + e + len(tag) + 3 :]
        # an empty / self-closed element
        yield "empty-uuid", re.sub(r"<uuid>[^<]*</uuid>", "<uuid/>", text, count=1)
        yield (
            "comment-in-value",
            re.sub(
                r"<product_name>([^<]*)</product_name>",
                r"<product_name>\1<!-- c --></product_name>",
                text,
                count=1,
            ),
        )
        yield "comment-between", text[:g] + "<!-- before gpu -->" + text[g:]
        yield "pi", text[:g] + "<?pi x?>" + text[g:]
        yield "no-gpu-id", text.replace('<gpu id="', '<gpu xid="', 1)
        yield (
            "cdata",
            re.sub(r"<serial>([^<]*)</serial>", r"<serial><![CDATA[\1]]></serial>", text, count=1),
        )
        yield "nested-text", re.sub(r"<fb_memory_usage>", "<fb_memory_usage>junk", text, count=1)
    for frac in (0.1, 0.5, 0.93):
        yield f"trunc{frac}", text[: int(len(text) * frac)]
    yield "root-other", text.replace("nvidia_smi_log", "nvidia_log")
    yield "crlf", text.replace("\n", "\r\n")
    yield "entity", text.replace("<uuid>", "<uuid>&amp;", 1)
    # declared entities stay unexpanded references (resolve_entities=False): in a value and
    # between the elements of a <gpu>
    root_at = text.find("<nvidia_smi_log")
    if root_at >= 0:
        dtd = '<!DOCTYPE nvidia_smi_log [<!ENTITY e "GPU is lost">]>\n'
        with_dtd = re.sub(r"<!DOCTYPE[^>]*>", "", text[:root_at]) + dtd + text[root_at:]
        yield "dtd-entity-value", with_dtd.replace("<uuid>", "<uuid>&e;", 1)
        yield "dtd-entity-between", with_dtd.replace("<uuid>", "&e;<uuid>", 1)
        yield "dtd-entity-pci", with_dtd.replace("<pci>", "<pci>&e;", 1)
    yield "empty", "   \n"


_Q_VALUE = re.compile(r"^( +[^:\n]*?\s:\s)(.+)$", re.M)


def text_mutations(text: str, seed: str) -> Iterator[tuple[str, str]]:
    rng = random.Random(seed)
    yield "as-is", text
    values = list(_Q_VALUE.finditer(text))
    keys = ("GPU UUID", "Product Name", "Bus Id", "Total", "Used", "GPU Current Temp",
            "Power Draw", "Attached GPUs", "Pending", "Process ID", "Persistence Mode",
            "Current", "Single Bit ECC", "Correctable Error", "SM", "Idle", "Fan Speed",
            "Driver Version", "Volatile", "Memory Current Temp")  # fmt: skip
    for key in keys:
        hits = [m for m in values if m.group(1).strip().rstrip(":").strip() == key]
        if not hits:
            continue
        m = hits[rng.randrange(len(hits))]
        for k, bad in enumerate(rng.sample(BAD_VALUES, 4)):
            yield f"{key}={k}", text[: m.start(2)] + bad + text[m.end(2) :]
    for n in range(min(12, len(values))):
        m = values[rng.randrange(len(values))]
        bad = BAD_VALUES[rng.randrange(len(BAD_VALUES))]
        yield f"value{n}", text[: m.start(2)] + bad + text[m.end(2) :]
    lines = text.split("\n")
    gpu_starts = [i for i, line in enumerate(lines) if line.startswith("GPU ")]
    if gpu_starts:
        s = gpu_starts[0]
        e = gpu_starts[1] if len(gpu_starts) > 1 else len(lines)
        yield "dup-gpu", "\n".join(lines[:e] + lines[s:e] + lines[e:])
        yield (
            "dup-gpu-fix-count",
            re.sub(
                r"(Attached GPUs\s*: )(\d+)",
                lambda m: m.group(1) + str(int(m.group(2)) + 1),
                "\n".join(lines[:e] + lines[s:e] + lines[e:]),
            ),
        )
        yield "del-gpu", "\n".join(lines[:s] + lines[e:])
    for n in range(6):
        if len(lines) > 3:
            i = rng.randrange(1, len(lines))
            yield f"del-line{n}", "\n".join(lines[:i] + lines[i + 1 :])
            j = rng.randrange(1, len(lines))
            yield f"dup-line{n}", "\n".join([*lines[:j], lines[j], *lines[j:]])
    if len(lines) > 10:
        i = rng.randrange(5, len(lines))
        yield "tab-indent", "\n".join([*lines[:i], "\t" + lines[i].lstrip(), *lines[i + 1 :]])
        yield "odd-indent", "\n".join([*lines[:i], " " + lines[i], *lines[i + 1 :]])
        yield "comment-line", "\n".join([*lines[:i], "    # comment", *lines[i + 1 :]])
    for frac in (0.1, 0.5, 0.93):
        yield f"trunc{frac}", text[: int(len(text) * frac)]
    yield "crlf", text.replace("\n", "\r\n")
    yield "no-banner", text.replace("NVSMI LOG", "NVSMI", 1)
    yield "all-lost", _Q_VALUE.sub(lambda m: m.group(1) + "GPU is lost", text)
    yield "empty", "\n\n"


def line_mutations(text: str, seed: str) -> Iterator[tuple[str, str]]:
    """Generic mutations of a line-oriented capture (CSV, topo, nvlink, ibstat, lspci)."""
    rng = random.Random(seed)
    yield "as-is", text
    lines = text.split("\n")
    for n in range(4):
        if len(lines) > 2:
            i = rng.randrange(len(lines))
            yield f"del-line{n}", "\n".join(lines[:i] + lines[i + 1 :])
            j = rng.randrange(len(lines))
            yield f"dup-line{n}", "\n".join([*lines[:j], lines[j], *lines[j:]])
    tokens = list(re.finditer(r"[^\s,:|]+", text))
    for n in range(min(10, len(tokens))):
        m = tokens[rng.randrange(len(tokens))]
        bad = BAD_VALUES[rng.randrange(len(BAD_VALUES))]
        yield f"token{n}", text[: m.start()] + bad + text[m.end() :]
    for frac in (0.1, 0.5, 0.93):
        yield f"trunc{frac}", text[: int(len(text) * frac)]
    yield "comment", "# comment\n" + text
    yield "crlf", text.replace("\n", "\r\n")
    yield "empty", ""


# ----------------------------------------------------------------------------- cases


def cases() -> Iterator[tuple[str, Callable[[], Any]]]:
    from gpufleet.collect.assemble import assemble_facts
    from gpufleet.collect.bundle import Section, render_bundle, split_bundle
    from gpufleet.collect.ib import parse_ibstat
    from gpufleet.collect.nvidia_smi import (
        parse_nvidia_smi_text,
        parse_nvidia_smi_xml,
        parse_query_gpu_csv,
        parse_query_gpu_report,
    )
    from gpufleet.collect.pci import parse_lspci
    from gpufleet.collect.topology import parse_nvlink_status, parse_topo_matrix
    from gpufleet.lab.captures import split_exporter_bundle
    from gpufleet.lab.catalogue import MODELS
    from gpufleet.lab.fleet import LabHost
    from gpufleet.lab.renderers import render_sections

    for name, text in _files("nvidia-smi-xml"):
        for mut, t in xml_mutations(text, name):
            yield f"xml:{name}:{mut}", lambda t=t: parse_nvidia_smi_xml(t, "x")
    q_inputs = [(n, t) for n, t in _files("nvidia-smi-q") if n.endswith(".txt")]
    csv_inputs: list[tuple[str, str]] = []
    for name, text in _files("nvidia-smi-csv"):
        secs = split_exporter_bundle(text, name)
        for title, body in sorted(secs.items()):
            if title.endswith(":: query (-q)"):
                q_inputs.append((f"{name}#{title}", body))
            elif "query-gpu (csv" in title:
                csv_inputs.append((f"{name}#{title}", body))
    for name, text in q_inputs:
        for mut, t in text_mutations(text, name):
            yield f"q:{name}:{mut}", lambda t=t: parse_nvidia_smi_text(t, "q")
    for name, text in csv_inputs:
        for mut, t in line_mutations(text, name):
            yield f"csv:{name}:{mut}", lambda t=t: parse_query_gpu_csv(t, source="c")
            yield f"csvr:{name}:{mut}", lambda t=t: parse_query_gpu_report(t, source="c")
    line_parsers: dict[str, Callable[[str], Any]] = {
        "topo": lambda t: parse_topo_matrix(t, "t"),
        "nvlink": lambda t: parse_nvlink_status(t, "n"),
        "ibstat": lambda t: parse_ibstat(t, "i"),
        "lspci": lambda t: parse_lspci(t, "l"),
    }
    for name, text in _files("nvidia-smi-topo") + _files("ib", "*.txt") + _files("lspci"):
        kinds = (
            ["nvlink"] if "nvlink" in name else ["topo"] if "topo" in name
            else ["ibstat"] if "/gpud_ibstat." in name else ["lspci"] if "lspci" in name
            else []
        )  # fmt: skip
        for kind in kinds:
            for mut, t in line_mutations(text, name):
                yield f"{kind}:{name}:{mut}", lambda t=t, p=line_parsers[kind]: p(t)

    fault_sets: list[list[str]] = [
        [], ["gpu-missing"], ["ecc-uncorrectable"], ["remap-pending"], ["remap-failure"],
        ["ib-down"], ["ib-polling"], ["xid:79"], ["nvidia-smi-missing"], ["garbage"],
        ["truncated"], ["driver-drift"], ["gpu-process"],
    ]  # fmt: skip
    for model in MODELS:
        for faults in fault_sets:
            try:
                host = LabHost(name="h1", model=model, faults=faults, serial_salt=7)
            except Exception:
                continue
            try:
                secs = render_sections(host)
            except ValueError:  # a fault the lab cannot render on this model (its format)
                continue
            label = f"lab:{model}:{'+'.join(faults) or 'ok'}"
            bundle = render_bundle(list(secs.values()))
            yield f"{label}:bundle", lambda b=bundle: assemble_facts(split_bundle(b), NOW, "h1")
            for sname, parse in (
                ("nvidia-smi-xml", lambda t: parse_nvidia_smi_xml(t, "x")),
                ("nvidia-smi-q", lambda t: parse_nvidia_smi_text(t, "q")),
                ("topo-m", line_parsers["topo"]),
                ("nvlink-s", line_parsers["nvlink"]),
                ("ibstat", line_parsers["ibstat"]),
                ("lspci-nn", line_parsers["lspci"]),
            ):
                sec = secs.get(sname)
                if sec is None or not sec.stdout.strip():
                    continue
                yield f"{label}:{sname}", lambda t=sec.stdout, p=parse: p(t)
            if faults:
                continue
            for sname, muts in (
                ("nvidia-smi-xml", xml_mutations),
                ("nvidia-smi-q", text_mutations),
            ):
                sec = secs.get(sname)
                if sec is None or not sec.stdout.strip():
                    continue
                for mut, t in muts(sec.stdout, f"{model}:{sname}"):
                    changed = dict(secs)
                    changed[sname] = Section(sname, t, sec.stderr, sec.rc)
                    b = render_bundle(list(changed.values()))
                    yield (
                        f"{label}:{sname}:{mut}",
                        lambda b=b: assemble_facts(split_bundle(b), NOW, "h1"),
                    )
            for mut, b in line_mutations(bundle, f"{model}:bundle"):
                yield (
                    f"{label}:bundle:{mut}",
                    lambda b=b: assemble_facts(split_bundle(b), NOW, "h1"),
                )


def record(out: Path) -> None:
    import gpufleet

    print(f"gpufleet from {gpufleet.__file__}", file=sys.stderr)
    results: dict[str, Any] = {}
    for name, fn in cases():
        if name in results:
            raise SystemExit(f"duplicate case name {name}")
        results[name] = _result(fn)
    out.write_text(json.dumps(results, sort_keys=True, indent=0, ensure_ascii=True) + "\n")
    refused = sum(1 for r in results.values() if "error" in r)
    kinds: dict[str, int] = {}
    for r in results.values():
        if "error" in r:
            kinds[r["error"]] = kinds.get(r["error"], 0) + 1
    print(f"{len(results)} cases, {refused} refused {kinds}, written to {out}")


def compare(a: Path, b: Path) -> int:
    if a.read_bytes() == b.read_bytes():
        print(f"identical ({a}, {b})")
        return 0
    ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
    diff = sorted(k for k in set(ra) | set(rb) if ra.get(k) != rb.get(k))
    print(f"DIFFERENT: {len(diff)} cases")
    for k in diff[:20]:
        print(f"  {k}\n    before: {str(ra.get(k))[:300]}\n    after:  {str(rb.get(k))[:300]}")
    return 1


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "record":
        record(Path(argv[1]))
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        return compare(Path(argv[1]), Path(argv[2]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
