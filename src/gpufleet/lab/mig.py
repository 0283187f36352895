"""What a lab host does with a campaign's MIG script (issue 26 item 7), over the ``sim``
transport: the ``nvidia-smi`` commands of :func:`gpufleet.domain.mig.apply_script` are
recorded (``mig-commands.log`` in the lab directory, one ``HOST: COMMAND`` line each) and
simulated, never answered with invented nvidia-smi output. The lab can only *show* layouts it
has a real capture of: an ``h100-8x`` host becomes ``h100-mig-8x`` (the H100 MIG bundle's
layout, 3g.40gb + 2g.20gb + 2x 1g.10gb) and ``-mig 0`` turns it back; any other layout or
model exits 1 saying so (fail closed), the host unchanged."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from gpufleet.domain.mig import DISABLED, MARK, canonical
from gpufleet.lab.fleet import LabFleet, LabHost

#: The commands' log in the lab directory.
LOG = "mig-commands.log"
#: The two H100 models and the layout each one's capture shows.
_MODELS = {"h100-8x": DISABLED, "h100-mig-8x": "1g.10gb:2,2g.20gb:1,3g.40gb:1"}
_RC_ECHO = re.compile(r'^echo "([^"$]*)\$\?"\s*$', re.M)


def is_mig_script(script: str) -> bool:
    return MARK in script


def _target(commands: list[str]) -> str | None:
    """The layout the commands leave on every GPU (None: one the lab cannot tell)."""
    layout: str | None = None
    for cmd in commands:
        if " -i " in cmd:  # per-GPU layouts: no capture shows a host with two layouts
            return None
        if cmd.endswith(" -mig 0"):
            layout = DISABLED
        elif m := re.search(r" -cgi (\S+) -C$", cmd):
            layout = canonical(Counter(m.group(1).split(",")))
    return layout


def render_mig(lab_dir: Path, host: LabHost, script: str) -> str:
    """Record the script's nvidia-smi commands, change the host's model when the lab has the
    capture of the resulting layout, and answer the script's exit-status line."""
    commands = [ln.strip() for ln in script.splitlines() if ln.strip().startswith("nvidia-smi")]
    with (lab_dir / LOG).open("a", encoding="utf-8") as log:
        log.writelines(f"{host.name}: {c}\n" for c in commands)
    layout = _target(commands)
    model = next((m for m, shown in _MODELS.items() if shown == layout), None)
    rc, out = 0, ""
    if host.model not in _MODELS or model is None:
        rc = 1
        out = (f"gpufleet lab: no capture of MIG layout {layout or 'per GPU'} on lab model "
               f"{host.model}; nothing changed\n")
    elif model != host.model:
        fleet = LabFleet.load(lab_dir)
        moved = host.model_copy(update={"model": model})
        LabFleet(hosts=[moved if h.name == host.name else h for h in fleet.hosts],
                 seed=fleet.seed).save(lab_dir)
    mark = _RC_ECHO.search(script)
    return out + (f"{mark.group(1)}{rc}\n" if mark else "")
