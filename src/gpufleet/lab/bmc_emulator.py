"""The lab BMC process (:mod:`gpufleet.lab.bmc`): sushy-tools' ``sushy-emulator --fake`` whose
power changes reach the lab hosts. ``python -m gpufleet.lab.bmc_emulator CONFIG LAB_DIR``.

Two changes to the emulator as shipped, both of its fake systems driver:

* a power change settles after one second, not a random 1 to 11 (a lab should be quick);
* each applied power change is written to the lab (``lab.json``, under its lock): Off, the
  host gets no route for SSH; Off to On, the host has booted (:func:`gpufleet.lab.fleet.set_power`).
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

from gpufleet.lab.fleet import set_power, update_lab


def _hook(lab_dir: Path) -> None:
    from sushy_tools.emulator.resources.systems import (  # type: ignore[import-untyped]
        fakedriver,
    )

    fakedriver.random = types.SimpleNamespace(randint=lambda low, high: 1)
    original = fakedriver.FakeDriver._update

    def _update(self: Any, system: Any, **changes: Any) -> None:
        if isinstance(system, str):
            system = self._get(system)
        before = system.get("power_state")
        original(self, system, **changes)
        after = changes.get("power_state")
        if after == "Off" or (after == "On" and before == "Off"):
            name = str(system["name"])
            update_lab(lab_dir, lambda fl: set_power(fl, name, after == "On"))

    fakedriver.FakeDriver._update = _update


def main(argv: list[str]) -> int:
    from sushy_tools.emulator import main as emulator  # type: ignore[import-untyped]

    config, lab_dir = argv[1], Path(argv[2])
    _hook(lab_dir)
    sys.argv = ["sushy-emulator", "--config", config, "--fake"]
    return int(emulator.main() or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
