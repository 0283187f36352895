"""``bmc status`` on the pipeline (issue 25, item 3): the BMCs are read by a
:class:`~gpufleet.service.core.pipeline.Pipeline` run on the engine's loop, as SSH hosts are
collected: at most ``forks`` at once (the pipeline's workers), each Redfish read (blocking
HTTP) in a thread through ``asyncio.to_thread`` on the engine's loop, each read stored, as it
arrives, by the pipeline's applier in the engine's database executor (one at a time).

The run takes none of the hosts' claims (its :class:`~gpufleet.service.core.pipeline.Claim`
is the hosts it loaded, claimed by nobody): the claims are the in-band work's, and a BMC is
read exactly when that work is stuck, while a collection, an inspection or a hung SSH
session holds the host (``reachability`` reads the BMC of a host its own sweep still holds).
Two reads of one BMC at once are each stored under the host's row lock.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from gpufleet.collect.redfish import BmcFailure, BmcTarget, call, read_bmc
from gpufleet.collect.transport import Outcome, RawResult, Target, TransportKey
from gpufleet.domain.bmc import BmcOutcome, BmcReading
from gpufleet.logs import ids
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.pipeline import Claim, Claimed, Pipeline

log = logging.getLogger(__name__)

#: The pipeline's name for a BMC read (no registered transport: the run brings its own).
KEY: TransportKey = ("redfish", ())

#: How a BMC read's outcome reads as a host's outcome in the pipeline (never ``ok`` unless
#: the BMC was read).
_OUTCOME = {
    BmcOutcome.OK: Outcome.OK,
    BmcOutcome.AUTH_FAILED: Outcome.AUTH_FAILED,
    BmcOutcome.UNREACHABLE: Outcome.UNREACHABLE,
    BmcOutcome.TIMEOUT: Outcome.TIMEOUT,
    BmcOutcome.BAD_RESPONSE: Outcome.BAD_OUTPUT,
}

Read = tuple[BmcReading | None, BmcFailure | None]


class BmcJob(Protocol):
    """One host to read: its id, name and BMC."""

    @property
    def host_id(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def target(self) -> BmcTarget | None: ...


J = TypeVar("J", bound=BmcJob)
S = TypeVar("S")


@dataclass
class RedfishReads:
    """The transport of a ``bmc status`` run: :meth:`run` reads one host's BMC in a thread
    (``asyncio.to_thread``); the reading waits in :attr:`got` for the apply step."""

    targets: dict[str, BmcTarget]
    name: str = "redfish"
    got: dict[str, Read] = field(default_factory=dict)

    async def run(self, target: Target, script: str, timeout_s: float) -> RawResult:
        """Read ``target``'s BMC (its own deadline bounds the read; ``timeout_s`` is that
        deadline); a failure is reported in the result, never raised."""
        start = time.monotonic()
        got = await asyncio.to_thread(read_one, target.name, self.targets[target.name])
        self.got[target.name] = got
        failure = got[1]
        return RawResult(
            target.name,
            Outcome.OK if failure is None else _OUTCOME.get(failure.outcome, Outcome.ERROR),
            "" if failure is None else failure.reason,
            duration_s=time.monotonic() - start,
        )


def read_one(name: str, target: BmcTarget) -> Read:
    """One BMC read (blocking): the reading, or the failure that names the host."""
    try:
        return call(target, read_bmc), None
    except BmcFailure as exc:
        failure = exc
    except Exception as exc:  # a bug in a read must not sink the others: reported for its host
        failure = BmcFailure(name, BmcOutcome.ERROR, f"{type(exc).__name__}: {exc}")
    log.info("BMC of %s: %s: %s", name, failure.outcome, failure.reason, extra=ids(host=name))
    return None, failure


async def read_all(
    fleet: Fleet,
    jobs: Sequence[J],
    forks: int,
    deadline_s: float,
    apply: Callable[[J, BmcReading | None, BmcFailure | None], S],
    done: Callable[[S], None],
) -> list[S]:
    """Read every one of ``jobs`` (each has a BMC target) on the pipeline; ``apply`` stores a
    read (in the engine's database executor) and ``done`` reports what it returned."""
    by_name = {j.name: j for j in jobs}
    reads = RedfishReads({j.name: j.target for j in jobs if j.target is not None})
    token = f"bmc-{uuid.uuid4()}"  # claims nothing: see the module docstring
    hosts = [
        Claimed(j.host_id, Target(j.name, t.address), "redfish", KEY, token)
        for j in jobs
        if (t := j.target) is not None
    ]

    def stored(c: Claimed, _raw: RawResult) -> S:
        reading, failure = reads.got.pop(c.target.name)
        st = apply(by_name[c.target.name], reading, failure)
        done(st)
        return st

    return await Pipeline(
        fleet,
        Claim(None, token, hosts, []),
        command=lambda _c: "",
        apply=stored,
        forks=forks,
        timeout_s=deadline_s,
        open_transport=lambda _key: reads,
    ).run_async()
