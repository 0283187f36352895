"""``nvidia-smi -L``: the one place nvidia-smi names each MIG device's profile (issue 26
item 7). The ``-q``/``-q -x`` reports give a MIG device's GPU and compute instance ids,
memory and SMs, not its profile; ``-L`` prints, under each GPU, ``MIG 3g.40gb Device 0:
(UUID: MIG-...)``, the device index being that of the report's ``MIG Device`` blocks (real
captures: the H100 and H200 MIG bundles of utkuozdemir/nvidia_gpu_exporter, 590.48.01).
Pure: text -> profiles, then a report with them filled in."""

from __future__ import annotations

import re
from typing import Protocol

from gpufleet.domain.facts import NvidiaSmiReport
from gpufleet.errors import ParseError

#: The collection section of ``nvidia-smi -L`` (read with the GPU report).
LIST_SECTION = "nvidia-smi-L"


class _Answer(Protocol):
    @property
    def stdout(self) -> str: ...
    @property
    def rc(self) -> int: ...

_GPU = re.compile(r"^GPU (\d{1,5}): ")
_MIG = re.compile(r"^\s+MIG (\S{1,64})\s+Device\s+(\d{1,5}): ")


def parse_mig_list(text: str, source: str) -> dict[int, dict[int, str]]:
    """GPU index -> MIG device index -> profile; a MIG line outside a GPU, or one GPU's
    device listed twice, is a :class:`ParseError` naming the line."""
    out: dict[int, dict[int, str]] = {}
    gpu: int | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if m := _GPU.match(line):
            gpu = int(m.group(1))
            out.setdefault(gpu, {})
        elif m := _MIG.match(line):
            dev = int(m.group(2))
            if gpu is None or dev in out[gpu]:
                raise ParseError(
                    source, f"MIG device line out of place: {line.strip()!r}", line=n
                )
            out[gpu][dev] = m.group(1)
        elif line.startswith("GPU ") or line.lstrip().startswith("MIG "):
            raise ParseError(source, f"unreadable line: {line.strip()[:80]!r}", line=n)
    return out


def with_mig_profiles(
    report: NvidiaSmiReport, listing: dict[int, dict[int, str]], problems: list[str], source: str
) -> NvidiaSmiReport:
    """``report`` with each MIG device's profile from ``listing``; a GPU whose MIG devices
    ``-L`` lists otherwise (another count) keeps them unnamed and adds a problem (its layout
    is then unknown, never guessed)."""
    gpus = []
    for g in report.gpus:
        names = listing.get(g.index, {})
        if not g.mig_devices:
            gpus.append(g)
            continue
        if sorted(names) != list(range(len(g.mig_devices))):
            problems.append(
                f"{source}: GPU {g.index} has {len(g.mig_devices)} MIG devices, "
                f"-L lists {len(names)}: profiles unknown"
            )
            gpus.append(g)
            continue
        devices = [m.model_copy(update={"profile": names[i]}) for i, m in enumerate(g.mig_devices)]
        gpus.append(g.model_copy(update={"mig_devices": devices}))
    return report.model_copy(update={"gpus": gpus})


def name_mig_devices(
    report: NvidiaSmiReport, listed: _Answer | None, source: str, problems: list[str]
) -> NvidiaSmiReport:
    """``report`` with its MIG devices' profiles from the ``-L`` answer ``listed``; a report
    without MIG devices is returned as it is (``-L`` is not needed), and one whose ``-L``
    did not answer keeps them unnamed with a problem saying so."""
    if not any(g.mig_devices for g in report.gpus):
        return report
    if listed is None or listed.rc != 0:
        why = "not run" if listed is None else f"exited {listed.rc}"
        problems.append(f"{source}: {why}: MIG profiles unknown")
        return report
    return with_mig_profiles(report, parse_mig_list(listed.stdout, source), problems, source)
