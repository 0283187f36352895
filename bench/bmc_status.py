"""``gpufleet bmc status`` over 200 emulated BMCs: wall time and cost per host.

    .venv/bin/python bench/bmc_status.py [--hosts 200] [--forks 16] [--rounds 3] [--pg URL]

One ``sushy-emulator --fake`` process (sushy-tools, Flask's threaded development server,
HTTP basic auth with a bcrypt htpasswd entry, feature set ``full``) serves ``--hosts`` fake
systems on loopback; each host of a fresh fleet (SQLite in a temporary home, or ``--pg``) is
enrolled with that emulator as its BMC, its own ``gpufleet_bmc_system``, and a password sealed
with a throwaway Fernet key. Then ``service.bmc.bmc_status`` (what the CLI runs) reads every
BMC ``--rounds`` times: identity, power, health, processors (the fake driver answers 501:
recorded as not offered), log services (none on the fake driver, then the Manager is tried),
one ``bmc_reads`` row and the cross-checks per host.

Prints, per round: wall seconds, hosts read OK, milliseconds per host (wall / hosts) and the
emulator's CPU seconds in the round (``/proc/PID/stat``), so the client's cost can be told
from the emulator's: both share this machine's cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.bmc.redfishlab import start_dynamic, system_uuid  # noqa: E402

from gpufleet.inventory import load_inventory  # noqa: E402
from gpufleet.secrets import SecretBox  # noqa: E402
from gpufleet.service.core.fleet import Fleet  # noqa: E402
from gpufleet.service.hosts.bmc import bmc_status  # noqa: E402
from gpufleet.service.hosts.enroll import enroll  # noqa: E402

USER, PASSWORD = "bench", "bench-Pw-1"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--forks", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pg", help="PostgreSQL URL (an empty database); default SQLite")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        em = start_dynamic(work / "emulator", args.hosts, USER, PASSWORD)
        print(f"emulator with {args.hosts} systems ready in {time.perf_counter() - t0:.1f} s")
        try:
            key = Fernet.generate_key()
            os.environ["GPUFLEET_SECRET_KEY"] = key.decode()
            inv = work / "bmc.ini"
            inv.write_text("[gpu]\n" + "".join(
                f"bmc-{i:03d} ansible_host=10.9.{i // 250}.{i % 250 + 1} "
                f"gpufleet_bmc_address={em.url} gpufleet_bmc_username={USER} "
                f"gpufleet_bmc_password={PASSWORD} gpufleet_bmc_system={system_uuid(i)}\n"
                for i in range(1, args.hosts + 1)))
            url = args.pg or f"sqlite:///{work / 'fleet.db'}"
            fleet = Fleet.open(home=work / "home", url=url, actor="bench")
            enroll(fleet, load_inventory(inv), box=SecretBox(key))
            for r in range(1, args.rounds + 1):
                cpu0 = cpu_seconds(em.proc.pid)
                t = time.perf_counter()
                rows = bmc_status(fleet, None, forks=args.forks, timeout_s=30)
                wall = time.perf_counter() - t
                ok = sum(1 for x in rows if x.ok)
                print(f"round {r}: {wall:.2f} s wall, {ok}/{len(rows)} read OK, "
                      f"{1000 * wall / len(rows):.1f} ms/host, emulator CPU "
                      f"{cpu_seconds(em.proc.pid) - cpu0:.2f} s (forks {args.forks})")
                bad = [x for x in rows if not x.ok][:3]
                for x in bad:
                    print(f"  {x.host}: {x.outcome}: {x.reason}")
                log = em.log.read_text()
                if bad and "Traceback" in log:
                    cut = log.index("Traceback")
                    print("  emulator:", log[cut:cut + 1500].replace("\n", "\n    "))
            fleet.db.dispose()
        finally:
            em.stop()


if __name__ == "__main__":
    main()
