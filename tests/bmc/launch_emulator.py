"""Run sushy-tools' dynamic Redfish emulator (``sushy-emulator --fake``) for the tests.

The one change from ``sushy-emulator``: the fake systems driver applies a power change after
``random.randint(1, 11)`` seconds; here that delay is one second, so the tests wait on a real
pending power change without spending up to 11 s on each. Usage:
``python launch_emulator.py CONFIG`` (a sushy-emulator config file).
"""

from __future__ import annotations

import sys
import types

from sushy_tools.emulator import main as emulator
from sushy_tools.emulator.resources.systems import fakedriver

fakedriver.random = types.SimpleNamespace(randint=lambda low, high: 1)  # type: ignore[attr-defined]

if __name__ == "__main__":
    sys.argv = ["sushy-emulator", "--config", sys.argv[1], "--fake"]
    sys.exit(emulator.main())
