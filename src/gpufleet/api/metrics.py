"""``/metrics``: the fleet in Prometheus' text format, read once per scrape.

One custom collector (:class:`FleetCollector`) asks
:func:`gpufleet.service.views.overview.fleet_metrics` for the aggregate (a few GROUP BY
queries, never one per host) and turns it into gauges.
Labels are bounded: state, pool, model, profile, severity, alarm kind, lease state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gpufleet.domain.leases import LeaseState
from gpufleet.domain.states import HostState
from gpufleet.service.core import background_errors as background
from gpufleet.service.core import webhooks
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health.health_metrics import health_metrics
from gpufleet.service.health.inspect import GUARD_KIND
from gpufleet.service.views.overview import fleet_metrics


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
    reg.register(HealthCollector(fleet))
    reg.register(BackgroundCollector(fleet))
    return reg


class BackgroundCollector(Collector):
    """Issue 24 (item 10): background failures of this process by component (claim renewal,
    webhook outbox, worker, scheduler; ``service/core/background_errors.py``) and the webhook
    notifications dead-lettered (fleet-wide, from the outbox)."""

    def __init__(self, fleet: Callable[[], Fleet]) -> None:
        self.fleet = fleet

    def collect(self) -> Iterator[Metric]:
        errors = CounterMetricFamily(
            "gpufleet_background_errors",
            "Failures of background work in this process (logged), by component.",
            labels=["component"],
        )
        for component, n in sorted(background.counts().items()):
            errors.add_metric([component], float(n))
        yield errors
        yield GaugeMetricFamily(
            "gpufleet_webhook_dead_letters",
            "Webhook notifications never delivered and no longer retried "
            "(older than GPUFLEET_WEBHOOK_MAX_AGE_H).",
            value=float(webhooks.dead_letter_count(self.fleet())),
        )


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


#: Buckets (seconds) of the time-to-act histograms: a sweep's probe to hours of a held guard.
ACT_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0)
#: Buckets (seconds) of the run-duration histogram.
RUN_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0)


def _go(b: float) -> str:
    """A bucket bound as Prometheus' clients write it (``1.0``, ``300.0``)."""
    return repr(float(b))


def _histogram(
    name: str,
    doc: str,
    buckets: tuple[float, ...],
    series: dict[tuple[str, ...], list[float]],
    labels: list[str],
) -> HistogramMetricFamily:
    h = HistogramMetricFamily(name, doc, labels=labels)
    for key, values in sorted(series.items()):
        cum = [(_go(b), float(sum(1 for v in values if v <= b))) for b in buckets]
        cum.append(("+Inf", float(len(values))))
        h.add_metric(list(key), cum, sum_value=float(sum(values)))
    return h


class HealthCollector(Collector):
    """Per-GPU readings of the latest inspection sample, inspection age per host, the
    blast-radius guard, time to act and run durations (``service/health/health_metrics.py``).
    Labels: host, gpu index, model, run kind, fleet-alarm kind; all bounded by the fleet."""

    def __init__(self, fleet: Callable[[], Fleet]) -> None:
        self.fleet = fleet

    def collect(self) -> Iterator[Metric]:
        m = health_metrics(self.fleet())
        gl = ["host", "gpu", "model"]
        temp = GaugeMetricFamily(
            "gpufleet_gpu_temperature_celsius", "GPU temperature, latest inspection.", labels=gl
        )
        power = GaugeMetricFamily(
            "gpufleet_gpu_power_watts", "GPU power draw, latest inspection.", labels=gl
        )
        ecc_vol = GaugeMetricFamily(
            "gpufleet_gpu_ecc_volatile_uncorrected",
            "Uncorrected ECC errors since the driver loaded, latest inspection.",
            labels=gl,
        )
        ecc_unc = GaugeMetricFamily(
            "gpufleet_gpu_ecc_aggregate_uncorrected",
            "Uncorrected ECC errors over the GPU's life, latest inspection.",
            labels=gl,
        )
        ecc_corr = GaugeMetricFamily(
            "gpufleet_gpu_ecc_aggregate_corrected",
            "Corrected ECC errors over the GPU's life, latest inspection.",
            labels=gl,
        )
        hw = GaugeMetricFamily(
            "gpufleet_gpu_hw_throttled",
            "1 when the latest inspection saw a hardware clock slowdown (hw, thermal, power "
            "brake).",
            labels=gl,
        )
        sw = GaugeMetricFamily(
            "gpufleet_gpu_sw_throttled",
            "1 when the latest inspection saw a software slowdown (thermal or power cap).",
            labels=gl,
        )
        for g in m.gpus:
            key = [g.host, str(g.gpu), g.model]
            for fam, value in (
                (temp, g.temperature_c),
                (power, g.power_w),
                (ecc_vol, g.ecc_volatile_uncorrected),
                (ecc_unc, g.ecc_aggregate_uncorrected),
                (ecc_corr, g.ecc_aggregate_corrected),
            ):
                if value is not None:
                    fam.add_metric(key, float(value))
            hw.add_metric(key, float(g.hw_throttled))
            sw.add_metric(key, float(g.sw_throttled))
        yield from (temp, power, ecc_vol, ecc_unc, ecc_corr, hw, sw)
        age = GaugeMetricFamily(
            "gpufleet_inspection_age_seconds",
            "Seconds since the host's latest inspection sample (hosts not retired).",
            labels=["host"],
        )
        for host, s in sorted(m.inspection_age_s.items()):
            age.add_metric([host], s)
        yield age
        guard = GaugeMetricFamily(
            "gpufleet_fleet_alarms_open",
            "Open fleet alarms by kind (inspect-guard: the blast-radius guard tripped).",
            labels=["kind"],
        )
        guard.add_metric([GUARD_KIND], float(m.fleet_alarms.get(GUARD_KIND, 0)))
        for kind, n in sorted(m.fleet_alarms.items()):
            if kind != GUARD_KIND:
                guard.add_metric([kind], float(n))
        yield guard
        yield _histogram(
            "gpufleet_time_to_alarm_seconds",
            "Inspection alarms opened in the last 7 days: seconds from the sample that saw "
            "the fault to the alarm.",
            ACT_BUCKETS,
            {(): m.seen_to_alarm_s},
            [],
        )
        yield _histogram(
            "gpufleet_time_to_quarantine_seconds",
            "Critical inspection alarms opened in the last 7 days: seconds from the sample "
            "that saw the fault to the host leaving allocation (quarantined).",
            ACT_BUCKETS,
            {(): m.seen_to_quarantine_s},
            [],
        )
        yield _histogram(
            "gpufleet_run_duration_seconds",
            "Background runs finished in the last 7 days: seconds from queued to finished.",
            RUN_BUCKETS,
            {(k,): v for k, v in m.run_durations_s.items()},
            ["kind"],
        )
