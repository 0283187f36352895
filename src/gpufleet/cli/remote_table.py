"""Remote mode as one table (issue 25 item 2): each command's API call (method, path, query
parameters, body, paging), the schema of the answer and the presenter of local mode that
prints it, served by one handler (:func:`serve`).

A read here is the local command with the service call replaced by the API's answer: the
answer is validated with the API's own schema (:mod:`gpufleet.api.schemas`, the published
contract), turned into the presenter's input (the service's read model, built from the
schema's fields) and printed by the command's own presenter, so ``--json`` and the tables
are the local ones by construction. Adding a command to remote mode is one row here (a
change through a selector, ``maintenance on``, is a POST row whose body comes from the
command's arguments; a row's ``prepare`` runs the command's own checks and question first,
its ``follow`` follows work the route queued on the server's workers).

Where the API's shape is not the read model's (a host's page, the summary, an allocation,
a file's import), the row's ``view`` is a function of the validated answer in
:mod:`~gpufleet.cli.remote_reads`, typed by the row's schema (mypy checks the pair). The
hooks of the runs followed on the server (collect, validate, inspect, evidence, remediate)
are in :mod:`~gpufleet.cli.remote_runs`.
"""

from __future__ import annotations

import dataclasses
import importlib
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, TypeVar

from gpufleet.api.schemas import (
    AllocationOut,
    BaselineOut,
    CapacityCheckOut,
    CapacityOut,
    DriftOut,
    EventOut,
    HostDetailOut,
    HostOut,
    LeaseOut,
    PoolOut,
    ReleasedOut,
    Schema,
)
from gpufleet.api.schemas_health import (
    BmcActionOut,
    BmcStatusOut,
    DeadLetterOut,
    FailureImportOut,
    InspectReportOut,
    PartHistoryOut,
    PartOut,
    SelAckOut,
)
from gpufleet.api.schemas_ops import (
    AlarmRecordOut,
    FailureOut,
    FailureReportOut,
    HostOutcomeOut,
)
from gpufleet.api.schemas_racks import RackOut
from gpufleet.api.schemas_runs import CampaignOut, RunOut
from gpufleet.api.schemas_summary import LabelsOut, SummaryOut
from gpufleet.api.schemas_tokens import TokenOut
from gpufleet.cli import remote_reads as rr
from gpufleet.cli import remote_runs as runs
from gpufleet.cli.remote import Client, refuse_options

#: Hosts per page when a paged read fetches every page.
PAGE = 1000

#: How a validated answer becomes the presenter's input: ``"model"`` (the schema itself),
#: ``"dict"`` (its fields as a dict, times as datetimes), ``"json"`` (its fields as JSON
#: values, times as text) or ``"module:Class"`` (the service's read model built from that
#: dict: nested shapes stay dicts).
View = str

S = TypeVar("S", bound=Schema)


@dataclass(frozen=True)
class Read(Generic[S]):
    """One command of remote mode answered by one API read."""

    #: The path under ``/api/v1``; ``{argument}`` is the command's argument, quoted.
    path: str
    #: The answer's shape (of each item when ``many``).
    schema: type[S]
    #: ``"module:function"`` of the presenter the local command calls, with the answer
    #: first and then the command's arguments named in ``args`` (by keyword).
    present: str
    #: Query parameters from the command's arguments: ``"name"``, or ``"name=argument"``
    #: where they differ; None values are not sent.
    params: tuple[str, ...] = ()
    args: tuple[str, ...] = ("as_json",)
    #: Options the API does not offer, ``"--flag=argument"``: refused when given, never
    #: ignored.
    refuse: tuple[str, ...] = ()
    #: The presenter's input (:data:`View`), or a function of the validated answer (and of
    #: the arguments named in ``view_args``, by keyword): mypy checks it takes ``schema``.
    view: View | Callable[Concatenate[S, ...], object] = "model"
    view_args: tuple[str, ...] = ()
    many: bool = False
    #: The answer is a page (``items``, ``next_cursor``): every page is fetched.
    paged: bool = False
    method: str = "GET"
    #: The JSON body from the command's arguments, as ``params``; None values are not sent.
    body: tuple[str, ...] = ()
    #: Arguments that are times as the CLI takes them (ISO, local unless zoned): sent zoned.
    times: tuple[str, ...] = ()
    #: ``"module:function"`` run first with the API and the command's arguments, as the local
    #: command does before its service call: it refuses what the route cannot take (exit 2,
    #: naming the option), asks what the local command asks, and returns arguments replaced
    #: for the call (a duration as seconds).
    prepare: str | None = None
    #: ``"module:function"`` for work the route queues on the server's workers: with the API,
    #: the route's answer and the command's arguments, it follows the work to its end and
    #: returns the answer that is printed (of ``schema``).
    follow: str | None = None
    #: The routes ``follow`` calls (``"METHOD path"``), where they are no row's.
    follows: tuple[str, ...] = ()
    #: ``"module:function"`` making the body from the arguments named in ``body`` (by
    #: keyword) where they are not its fields (a file's text, say).
    build: str | None = None

    def payload(self, kwargs: Mapping[str, Any]) -> dict[str, object] | None:
        """The request's body, or None (a read). None values and empty lists (an option
        not given) are not sent."""
        if not self.body:
            return None
        if self.build is not None:
            made: dict[str, object] = _named(self.build)(**{a: kwargs[a] for a in self.body})
            return made
        out: dict[str, object] = {}
        for p in self.body:
            name, _, arg = p.partition("=")
            value = self._value(arg or name, kwargs)
            if value not in (None, [], ()):
                out[name] = value
        return out

    def query(self, kwargs: Mapping[str, Any]) -> dict[str, object]:
        """The query parameters of one call of the command."""
        out: dict[str, object] = {}
        for p in self.params:
            name, _, arg = p.partition("=")
            out[name] = self._value(arg or name, kwargs)
        return out

    def _value(self, arg: str, kwargs: Mapping[str, Any]) -> object:
        value = kwargs[arg]
        if arg in self.times and value is not None:
            return _when(value, "--" + arg.rstrip("_").replace("_", "-"))
        return value

    def target(self, kwargs: Mapping[str, Any]) -> str:
        """The path with the command's arguments in it."""
        quoted = {k: urllib.parse.quote(str(v), safe="") for k, v in kwargs.items()}
        return self.path.format(**quoted)


#: Command (``module.function`` under ``gpufleet.cli``) -> its read. The presenters and view
#: classes are named, not imported: remote mode loads only the one it runs.
READS: dict[str, Read[Any]] = {
    "hosts.list_cmd": Read(
        "hosts",
        HostOut,
        "gpufleet.cli.hosts_list:print_host_list",
        params=("selector", "group", "model", "state", "pool"),
        view="gpufleet.service.views.hosts:HostView",
        many=True,
        paged=True,
    ),
    "hosts.events_cmd": Read(
        "events",
        EventOut,
        "gpufleet.cli.hosts:print_events",
        params=("host", "kind", "limit"),
        view="dict",
        many=True,
    ),
    "alloc.leases_list_cmd": Read(
        "leases",
        LeaseOut,
        "gpufleet.cli.alloc:show_leases",
        params=("selector", "owner", "all=all_"),
        view="gpufleet.service.allocation.leases:LeaseView",
        many=True,
    ),
    "alloc.leases_show_cmd": Read(
        "leases/{lease_id}",
        LeaseOut,
        "gpufleet.cli.alloc:show_lease",
        view="gpufleet.service.allocation.leases:LeaseView",
    ),
    "alloc.leases_expiring_cmd": Read(
        "leases/expiring",
        LeaseOut,
        "gpufleet.cli.alloc:show_expiring",
        params=("selector", "within"),
        args=("as_json", "within"),
        view="gpufleet.service.allocation.leases:LeaseView",
        many=True,
    ),
    "alloc.capacity_check_cmd": Read(
        "capacity/check",
        CapacityCheckOut,
        "gpufleet.cli.alloc:show_check",
        params=("gpus", "model", "profile", "headroom", "selector", "cuda"),
        view="gpufleet.service.allocation.capacity:CapacityCheck",
        refuse=("--slurm=slurm", "--partition=partition", "--k8s=k8s", "--kubeconfig=kubeconfig"),
    ),
    "alarms.list_cmd": Read(
        "alarms",
        AlarmRecordOut,
        "gpufleet.cli.alarms:show_alarms",
        params=("selector", "all=include_closed"),
        view="gpufleet.service.core.alarms:AlarmRecord",
        many=True,
    ),
    "alarms.show_cmd": Read(
        "alarms/{alarm_id}",
        AlarmRecordOut,
        "gpufleet.cli.alarms:show_one",
        view="gpufleet.service.core.alarms:AlarmRecord",
    ),
    "alarms.dead_letters_cmd": Read(
        "webhooks/dead-letters",
        DeadLetterOut,
        "gpufleet.cli.alarms:show_dead_letters",
        params=("limit",),
        view="gpufleet.service.core.webhooks:DeadLetter",
        many=True,
    ),
    "baseline.pool_list_cmd": Read(
        "pools",
        PoolOut,
        "gpufleet.cli.baseline:show_pools",
        view="gpufleet.service.hosts.baselines:PoolView",
        many=True,
    ),
    "token.list_cmd": Read(
        "tokens",
        TokenOut,
        "gpufleet.cli.token:show_tokens",
        view="gpufleet.service.core.tokens:TokenInfo",
        many=True,
    ),
}

#: The reads whose answer is not the read model's shape: a function of
#: :mod:`~gpufleet.cli.remote_reads` builds it (issue 25 item 2: no hand-written handler).
READS |= {
    "hosts.show_cmd": Read(
        "hosts/{name}", HostDetailOut, "gpufleet.cli.hosts_show:print_host", view=rr.host_detail,
    ),
    "summary.summary_cmd": Read(
        "summary", SummaryOut, "gpufleet.cli.summary_view:print_summary", params=("selector",),
        view=rr.fleet_summary,
    ),
    "baseline.drift_cmd": Read(
        "drift", DriftOut, "gpufleet.cli.baseline:show_drift", params=("selector",),
        view="gpufleet.service.hosts.baselines:DriftReport",
    ),
    "alloc.capacity_cmd": Read(
        "capacity", CapacityOut, "gpufleet.cli.alloc:show_capacity", params=("selector", "at"),
        times=("at",), view="gpufleet.service.allocation.capacity:CapacityReport",
        refuse=("--k8s=k8s", "--kubeconfig=kubeconfig", "--slurm=slurm"),
    ),
    "baseline.list_cmd": Read(
        "baselines", BaselineOut, "gpufleet.cli.baseline:show_baselines", view=rr.baseline_row,
        many=True,
    ),
    "alloc.allocate_cmd": Read(
        "leases", AllocationOut, "gpufleet.cli.alloc:show_allocation", method="POST",
        body=("gpus", "hosts", "model", "min_gpu_memory", "fabric", "profile", "cuda",
              "nvl_domain", "selector", "owner", "purpose", "for=for_", "until", "start",
              "users", "account"),
        times=("until", "start"), view=rr.allocation,
    ),
    "failures.import_cmd": Read(
        "failures/import", FailureImportOut, "gpufleet.cli.failures:show_import",
        method="POST", body=("file",), build="gpufleet.cli.remote_reads:failures_file",
        refuse=("--slurm=slurm",), view=rr.import_report, view_args=("file",),
    ),
}


#: The selector changes (issue 29 item 7): one line per host, its new state or its error.
_EACH = "gpufleet.cli.lifecycle:report_each"
_OUTCOME = "gpufleet.cli.remote:host_outcome"
_CAMPAIGN = "gpufleet.service.campaigns.campaign:CampaignView.from_json"

READS |= {
    "lifecycle.maintenance_on_cmd": Read(
        "maintenance/on", HostOutcomeOut, _EACH, method="POST",
        body=("selector=hosts", "reason", "until=until_", "eta=eta_", "confirm_all",
              "no_drain"),
        times=("until_", "eta_"), args=(), view=_OUTCOME, many=True,
    ),
    "lifecycle.maintenance_off_cmd": Read(
        "maintenance/off", HostOutcomeOut, _EACH, method="POST",
        body=("selector=hosts", "reason", "confirm_all"), args=(), view=_OUTCOME, many=True,
    ),
    "lifecycle.retire_cmd": Read(
        "retire", HostOutcomeOut, _EACH, method="POST",
        body=("selector=hosts", "reason", "confirm_all"), args=(), view=_OUTCOME, many=True,
    ),
    "lifecycle.unquarantine_cmd": Read(
        "unquarantine", HostOutcomeOut, _EACH, method="POST",
        body=("selector=hosts", "reason", "force", "confirm_all"), args=(), view=_OUTCOME,
        many=True,
    ),
    "alarms.ack_cmd": Read(
        "alarms/{alarm_id}/ack", AlarmRecordOut, "gpufleet.cli.alarms:show_acked",
        method="POST", body=("reason",), view="gpufleet.service.core.alarms:AlarmRecord",
    ),
    "summary.labels_cmd": Read(
        "labels", LabelsOut, "gpufleet.cli.labels:print_labels", params=("selector",),
        view="gpufleet.service.hosts.labels:HostLabels", many=True,
    ),
    "alloc.leases_renew_cmd": Read(
        "leases/{lease_id}/renew", LeaseOut, "gpufleet.cli.alloc:show_renewed", method="POST",
        body=("for=for_", "until", "shorten", "owner"), times=("until",),
        view="gpufleet.service.allocation.leases:LeaseView",
    ),
    "alloc.leases_release_cmd": Read(
        "leases/{lease_id}/release", ReleasedOut, "gpufleet.cli.alloc:show_released",
        method="POST", body=("reason", "owner"),
        view="gpufleet.service.allocation.leases:Released",
    ),
    "failures.record_cmd": Read(
        "failures", FailureOut, "gpufleet.cli.failures:show_recorded", method="POST",
        body=("job", "host", "gpu", "time", "message"), times=("time",),
        view="gpufleet.service.health.failures:Recorded",
    ),
    "campaign.list_cmd": Read(
        "campaigns", CampaignOut, "gpufleet.cli.campaign:show_campaigns", view=_CAMPAIGN,
        many=True,
    ),
    "campaign.status_cmd": Read(
        "campaigns/{name}", CampaignOut, "gpufleet.cli.campaign:show_status", view=_CAMPAIGN,
    ),
    "campaign.report_cmd": Read(
        "campaigns/{name}", CampaignOut, "gpufleet.cli.campaign:show_report", view=_CAMPAIGN,
    ),
    "campaign.approve_cmd": Read(
        "campaigns/{name}/approve", CampaignOut, "gpufleet.cli.campaign:show_approved",
        method="POST", view=_CAMPAIGN,
    ),
    "campaign.pause_cmd": Read(
        "campaigns/{name}/pause", CampaignOut, "gpufleet.cli.campaign:show_changed",
        method="POST", view=_CAMPAIGN,
    ),
    "campaign.abort_cmd": Read(
        "campaigns/{name}/abort", CampaignOut, "gpufleet.cli.campaign:show_changed",
        method="POST", view=_CAMPAIGN,
    ),
    "alarms.resolve_cmd": Read(
        "alarms/{alarm_id}/resolve", AlarmRecordOut, "gpufleet.cli.alarms:show_resolved",
        method="POST", body=("reason",), view="gpufleet.service.core.alarms:AlarmRecord",
    ),
    "token.revoke_cmd": Read(
        "tokens/{name}", TokenOut, "gpufleet.cli.token:show_revoked", method="DELETE",
        view="gpufleet.service.core.tokens:TokenInfo",
    ),
}


#: Reads of racks and parts (issue 29 item 7).
READS |= {
    "racks.list_cmd": Read(
        "racks", RackOut, "gpufleet.cli.racks:print_racks",
        view="gpufleet.service.views.racks:RackRow.from_json", many=True,
    ),
    "racks.show_cmd": Read(
        "racks/{rack}", RackOut, "gpufleet.cli.racks:print_rack",
        view="gpufleet.service.views.racks:RackRow.from_json",
    ),
    "parts.list_cmd": Read(
        "parts", PartOut, "gpufleet.cli.parts:print_parts", params=("history=with_history",),
        view="dict", many=True,
    ),
    "parts.show_cmd": Read(
        "parts/{serial}", PartHistoryOut, "gpufleet.cli.parts:print_part",
        view="gpufleet.service.health.parts:PartHistory.from_json",
    ),
    "baseline.show_cmd": Read(
        "baselines/{name}", BaselineOut, "gpufleet.cli.baseline:show_baseline",
        view="gpufleet.cli.remote_reads:baseline_of",
    ),
    "baseline.pool_baseline_cmd": Read(
        "pools/{pool}", PoolOut, "gpufleet.cli.baseline:show_pool_baseline", method="PUT",
        body=("baseline", "create"), args=("pool", "baseline"),
    ),
    "inspect.report_cmd": Read(
        "inspect/report", InspectReportOut, "gpufleet.cli.inspect:show_report",
        params=("selector", "since"), args=("fmt", "output"),
        view="gpufleet.service.health.inspect_report:InspectReport.from_json",
    ),
    "failures.report_cmd": Read(
        "failures/report", FailureReportOut, "gpufleet.cli.failures:show_report",
        params=("since",), refuse=("--quarantine=quarantine",), view="json",
    ),
}


#: BMCs, baselines from a host and campaign runs (issue 25 item 2): rows whose command checks
#: or asks first (``prepare``) or whose work runs on the server's workers (``follow``).
_BMC = "gpufleet.service.hosts.bmc"
READS |= {
    "bmc.status_cmd": Read(
        "bmc", BmcStatusOut, "gpufleet.cli.bmc:show_bmc_status",
        params=("selector", "timeout_s=timeout", "deadline_s=deadline"),
        refuse=("--forks=forks",), view=f"{_BMC}:BmcStatus", many=True,
    ),
    "bmc.power_cmd": Read(
        "hosts/{host}/power", BmcActionOut, "gpufleet.cli.bmc:show_action", method="POST",
        body=("action", "force", "override_identity_reason=reason"),
        prepare="gpufleet.cli.bmc:confirm_power", view=f"{_BMC}:BmcAction",
    ),
    "bmc.sel_ack_cmd": Read(
        "hosts/{host}/bmc/sel-ack", SelAckOut, "gpufleet.cli.bmc:show_sel_ack", method="POST",
        body=("reason",), args=(), view="json",
    ),
    "baseline.create_cmd": Read(
        "baselines", BaselineOut, "gpufleet.cli.baseline:show_created", method="POST",
        body=("name", "host=from_host", "purpose", "replace", "pools=pool", "create"),
        prepare="gpufleet.cli.baseline:from_host_only", args=("as_json", "from_host", "pool"),
        view="gpufleet.cli.remote_reads:baseline_of",
    ),
    "campaign.run_cmd": Read(
        "campaigns/{name}/run", CampaignOut, "gpufleet.cli.campaign:show_finished",
        method="POST", body=("no_drain", "drain_timeout_s=drain_timeout"),
        refuse=("--advance-baseline=advance_baseline",),
        prepare="gpufleet.cli.campaign:drain_seconds",
        follow="gpufleet.cli.campaign:follow_run", view=_CAMPAIGN,
    ),
    "campaign.resume_cmd": Read(
        "campaigns/{name}/resume", CampaignOut, "gpufleet.cli.campaign:show_finished",
        method="POST", follow="gpufleet.cli.campaign:follow_run", view=_CAMPAIGN,
    ),
}


#: The runs followed on the server's workers (issue 25 item 2): the route queues the run,
#: ``follow`` polls ``GET runs/{id}`` until it ends.
_RUNS = "gpufleet.cli.remote_runs"
READS |= {
    "collect.collect_cmd": Read(
        "runs", runs.FollowedRun, f"{_RUNS}:show_run", method="POST", body=("selector",),
        build=f"{_RUNS}:collect_body", view="json", follow=f"{_RUNS}:follow_run",
        follows=runs.RUN_ROUTES,
        refuse=("--local=local", "--transport=transport", "--forks=forks", "--timeout=timeout"),
    ),
    "lifecycle.validate_cmd": Read(
        "runs", runs.FollowedRun, f"{_RUNS}:show_run", method="POST", body=("selector",),
        build=f"{_RUNS}:validate_body", view="json", follow=f"{_RUNS}:follow_run",
        follows=runs.RUN_ROUTES,
        refuse=("--transport=transport", "--no-collect=no_collect", "--forks=forks",
                "--timeout=timeout"),
    ),
    "inspect.run_cmd": Read(
        "inspect", runs.FollowedRun, f"{_RUNS}:show_run", method="POST", body=("selector",),
        view="json", follow=f"{_RUNS}:follow_run", follows=runs.RUN_ROUTES,
        refuse=("--every=every", "--transport=transport"),
    ),
    "lifecycle.evidence_run_cmd": Read(
        "evidence", runs.FollowedRun, f"{_RUNS}:show_run", method="POST",
        body=("selector", "kind", "level", "seconds"), view="json",
        follow=f"{_RUNS}:follow_run", follows=runs.RUN_ROUTES,
        refuse=("--command=command", "--timeout=timeout", "--forks=forks"),
    ),
    "remediate.remediate_cmd": Read(
        "hosts/{host}/remediate", RunOut, "gpufleet.cli.remediate:print_report",
        method="POST",
        body=("action", "service", "override_identity", "gpu", "ticket", "eta", "reason",
              "no_drain", "drain_timeout_s=drain_timeout"),
        prepare=f"{_RUNS}:remediate_args", follow=f"{_RUNS}:follow_remediation",
        follows=runs.RUN_ROUTES[:1], view=runs.remediation_report,
    ),
}


def _when(value: str, flag: str) -> str:
    from gpufleet.cli.common import when  # local unless zoned; sent zoned (API: naive = UTC)

    t = when(value, flag)
    assert t is not None
    return t.isoformat()


def _named(ref: str) -> Any:
    module, _, name = ref.partition(":")
    out: Any = importlib.import_module(module)
    for part in name.split("."):
        out = getattr(out, part)
    return out


def viewer(view: View | Callable[..., object]) -> Callable[..., Any]:
    """The function from a validated answer to the presenter's input."""
    if callable(view):
        return view
    if view == "model":
        return lambda m: m
    if view == "dict":
        return lambda m: m.model_dump()
    if view == "json":
        return lambda m: m.model_dump(mode="json")
    make = _named(view)
    if dataclasses.is_dataclass(make):  # nested read models, times and enums: pydantic's
        from pydantic import TypeAdapter

        adapter = TypeAdapter(make)
        return lambda m: adapter.validate_python(m.model_dump(), from_attributes=True)
    if isinstance(make, type):
        return lambda m: make(**m.model_dump())
    return lambda m: make(m.model_dump())


def fetch(api: Client, read: Read[Any], kwargs: Mapping[str, Any]) -> Any:
    """The API's answer to one call of the command (every page of a paged read)."""
    path, query = read.target(kwargs), read.query(kwargs)
    if not read.paged:
        return api.call(read.method, path, query, read.payload(kwargs))
    items: list[Any] = []
    cursor = None
    while True:
        page = api.call(read.method, path, query | {"limit": PAGE, "cursor": cursor})
        items.extend(page["items"])
        cursor = page.get("next_cursor")
        if not cursor:
            return items


def serve(api: Client, read: Read[Any], kwargs: Mapping[str, Any]) -> None:
    """Run one command of the table: call the API, validate the answer with the schema,
    build the presenter's input and print it with the local presenter. A group's callback
    run before one of its commands (``capacity check``) does nothing: that command is its
    own row."""
    if getattr(kwargs.get("ctx"), "invoked_subcommand", None) is not None:
        return
    refused = (r.partition("=") for r in read.refuse)
    refuse_options(**{flag: kwargs[arg] for flag, _, arg in refused})
    if read.prepare is not None:
        kwargs = {**kwargs, **_named(read.prepare)(api, kwargs)}
    answer = fetch(api, read, kwargs)
    if read.follow is not None:
        answer = _named(read.follow)(api, answer, kwargs)
    to_view = viewer(read.view)
    extra = {a: kwargs[a] for a in read.view_args}
    if read.many:
        data: Any = [to_view(read.schema.model_validate(x), **extra) for x in answer]
    else:
        data = to_view(read.schema.model_validate(answer), **extra)
    _named(read.present)(data, **{a: kwargs[a] for a in read.args})


#: The API routes no command serves in remote mode, with why: no command of the CLI is
#: that route. ``tests/api/test_remote_table.py`` checks that every route the API publishes
#: is a row, a hand-written handler's route, or here.
NOT_REMOTE: dict[str, str] = {
    "GET health": "liveness of the server; no command",
    "GET jobs": "queue depth for monitoring; no command prints it (campaign run and resume "
    "read it to know that their job ended)",
    "GET runs": "no command lists runs",
    "POST tokens": "the secret is printed once where the token is made",
    "GET failures": "no command lists recorded failures (failures report groups them)",
}
