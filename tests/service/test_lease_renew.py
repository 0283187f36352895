"""``leases renew`` extends (issue 29 item 4), SQLite and PostgreSQL: ``--for D`` extends a
lease from its current end, ``--until T`` sets the end, an earlier end needs ``shorten``.
On 84be469/8608b99 ``renew --for 24h`` moved a 72 h lease's end to now + 24 h (shortened it,
exit 0): the first assertion fails there, and ``shorten`` did not exist."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from tests.service.test_allocation import lab

from gpufleet.domain.placement import Request
from gpufleet.errors import ConfigError
from gpufleet.service.allocation import allocation, leases
from gpufleet.service.core.fleet import Fleet
from gpufleet.testing import FakeClock

HOUR = timedelta(hours=1)


def test_renew_for_extends_from_the_current_end(
    fleet: Fleet, tmp_path: Path, clock: FakeClock
) -> None:
    lab(fleet, tmp_path, n=1)
    got = allocation.allocate(fleet, Request(hosts=1), owner="a", purpose="p", duration=72 * HOUR)
    assert got.lease is not None
    lid, end = got.lease.id, got.lease.ends_at
    clock.advance(hours=1)
    assert leases.renew(fleet, lid, duration=24 * HOUR).ends_at == end + 24 * HOUR
    assert leases.show_lease(fleet, lid).ends_at == end + 24 * HOUR
    # an end later than the current one: set as given
    assert leases.renew(fleet, lid, until=end + 30 * HOUR).ends_at == end + 30 * HOUR


def test_shortening_needs_shorten_and_says_so(fleet: Fleet, tmp_path: Path) -> None:
    lab(fleet, tmp_path, n=1)
    got = allocation.allocate(fleet, Request(hosts=1), owner="a", purpose="p", duration=72 * HOUR)
    assert got.lease is not None
    lid, end = got.lease.id, got.lease.ends_at
    earlier = fleet.now() + 24 * HOUR
    with pytest.raises(ConfigError, match=f"would shorten lease {lid} by 2d.*pass --shorten"):
        leases.renew(fleet, lid, until=earlier)
    assert leases.show_lease(fleet, lid).ends_at == end  # nothing changed
    with pytest.raises(ConfigError, match="--shorten goes with --until"):
        leases.renew(fleet, lid, duration=HOUR, shorten=True)
    assert leases.renew(fleet, lid, until=earlier, shorten=True).ends_at == earlier
    assert leases.show_lease(fleet, lid).ends_at == earlier
