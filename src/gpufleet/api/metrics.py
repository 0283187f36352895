"""``/metrics``: the fleet in Prometheus' text format, read once per scrape.

One custom collector (:class:`FleetCollector`) asks :func:`gpufleet.service.overview.fleet_metrics`
for the aggregate (a few GROUP BY queries, never one per host) and turns it into gauges.
Labels are bounded: state, pool, model, profile, severity, alarm kind, lease state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpufleet.domain.leases import LeaseState
from gpufleet.domain.states import HostState
from gpufleet.service.fleet import Fleet
from gpufleet.service.overview import fleet_metrics


class FleetCollector(Collector):
    """The fleet's gauges, computed at scrape time."""

    def __init__(self, fleet: Callable[[], Fleet]) -> None:
        self.fleet = fleet

    def collect(self) -> Iterator[Metric]:
        m = fleet_metrics(self.fleet())
        hosts = GaugeMetricFamily(
            "gpufleet_hosts", "Hosts by lifecycle state and pool.", labels=["state", "pool"]
        )
        seen_states = {state for state, _ in m.hosts}
        for (state, pool), n in sorted(m.hosts.items()):
            hosts.add_metric([state, pool], n)
        for state in HostState:  # every state present, at 0 when empty (alerts need the series)
            if state.value not in seen_states:
                hosts.add_metric([state.value, ""], 0)
        yield hosts
        gpus = GaugeMetricFamily(
            "gpufleet_gpus",
            "GPUs by model and host state (latest facts).",
            labels=["model", "state"],
        )
        for (model, state), n in sorted(m.gpus.items()):
            gpus.add_metric([model, state], n)
        yield gpus
        validated = GaugeMetricFamily(
            "gpufleet_validated_gpus",
            "GPUs on available hosts validated for a workload profile.",
            labels=["model", "profile"],
        )
        for (model, profile), n in sorted(m.validated_gpus.items()):
            validated.add_metric([model, profile], n)
        yield validated
        alarms = GaugeMetricFamily(
            "gpufleet_open_alarms", "Open alarms by severity and kind.", labels=["severity", "kind"]
        )
        for (severity, kind), n in sorted(m.alarms.items()):
            alarms.add_metric([severity, kind], n)
        yield alarms
        leases = GaugeMetricFamily("gpufleet_leases", "Leases by state.", labels=["state"])
        for state in LeaseState:
            leases.add_metric([state.value], m.leases.get(state.value, 0))
        yield leases
        yield GaugeMetricFamily(
            "gpufleet_leases_expiring",
            f"Active leases ending within {m.expiring_within.total_seconds():g} seconds.",
            value=m.leases_expiring,
        )
        yield GaugeMetricFamily(
            "gpufleet_hosts_never_collected",
            "Hosts (not retired) without any collection.",
            value=m.never_collected,
        )
        if m.oldest_collection_age_s is not None:
            yield GaugeMetricFamily(
                "gpufleet_oldest_collection_age_seconds",
                "Seconds since the least recently collected host (not retired) was collected.",
                value=m.oldest_collection_age_s,
            )
        if m.newest_collection_age_s is not None:
            yield GaugeMetricFamily(
                "gpufleet_last_collection_age_seconds",
                "Seconds since the most recent collection of any host.",
                value=m.newest_collection_age_s,
            )


def registry_for(fleet: Callable[[], Fleet]) -> CollectorRegistry:
    """A registry of this server's own (not the process-global one)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(FleetCollector(fleet))
    return reg


class JobQueueCollector(Collector):
    """Queue depth (issue 12 workers): jobs waiting and running per queue. Labels are the
    queue names and the two statuses; never a job or run id."""

    def __init__(self, depth: Callable[[], dict[tuple[str, str], int]]) -> None:
        self.depth = depth

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily(
            "gpufleet_jobs",
            "Background jobs by queue (runs, periodic) and status (todo: waiting, doing: "
            "running).",
            labels=["queue", "status"],
        )
        for (queue, status), n in sorted(self.depth().items()):
            g.add_metric([queue, status], n)
        yield g
