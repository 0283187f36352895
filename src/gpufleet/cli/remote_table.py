"""Remote mode's reads as one table (issue 25 item 2): each command's API call (method,
path, query parameters, paging), the schema of the answer and the presenter of local mode
that prints it, served by one handler (:func:`serve`).

A read here is the local command with the service call replaced by the API's answer: the
answer is validated with the API's own schema (:mod:`gpufleet.api.schemas`, the published
contract), turned into the presenter's input (the service's read model, built from the
schema's fields) and printed by the command's own presenter, so ``--json`` and the tables
are the local ones by construction. Adding a read command to remote mode is one row here.

Commands whose answer needs more than that (several calls, a body, a refused option,
following a run) keep a hand-written handler in :mod:`~gpufleet.cli.remote_reads` or
:mod:`~gpufleet.cli.remote_runs`.
"""

from __future__ import annotations

import importlib
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.api.schemas import (
    CapacityCheckOut,
    EventOut,
    HostOut,
    LeaseOut,
    PoolOut,
    Schema,
)
from gpufleet.api.schemas_health import DeadLetterOut
from gpufleet.api.schemas_ops import AlarmRecordOut
from gpufleet.api.schemas_tokens import TokenOut
from gpufleet.cli.remote import Client, refuse_options

#: Hosts per page when a paged read fetches every page.
PAGE = 1000

#: How a validated answer becomes the presenter's input: ``"model"`` (the schema itself),
#: ``"dict"`` (its fields as a dict, times as datetimes) or ``"module:Class"`` (the
#: service's read model built from that dict: nested shapes stay dicts).
View = str


@dataclass(frozen=True)
class Read:
    """One command of remote mode answered by one API read."""

    #: The path under ``/api/v1``; ``{argument}`` is the command's argument, quoted.
    path: str
    #: The answer's shape (of each item when ``many``).
    schema: type[Schema]
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
    view: View = "model"
    many: bool = False
    #: The answer is a page (``items``, ``next_cursor``): every page is fetched.
    paged: bool = False
    method: str = "GET"

    def query(self, kwargs: Mapping[str, Any]) -> dict[str, object]:
        """The query parameters of one call of the command."""
        out: dict[str, object] = {}
        for p in self.params:
            name, _, arg = p.partition("=")
            out[name] = kwargs[arg or name]
        return out

    def target(self, kwargs: Mapping[str, Any]) -> str:
        """The path with the command's arguments in it."""
        quoted = {k: urllib.parse.quote(str(v), safe="") for k, v in kwargs.items()}
        return self.path.format(**quoted)


#: Command (``module.function`` under ``gpufleet.cli``) -> its read. The presenters and view
#: classes are named, not imported: remote mode loads only the one it runs.
READS: dict[str, Read] = {
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

def _named(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def viewer(view: View) -> Callable[[Schema], Any]:
    """The function from a validated answer to the presenter's input."""
    if view == "model":
        return lambda m: m
    if view == "dict":
        return lambda m: m.model_dump()
    cls = _named(view)
    return lambda m: cls(**m.model_dump())


def fetch(api: Client, read: Read, kwargs: Mapping[str, Any]) -> Any:
    """The API's answer to one call of the command (every page of a paged read)."""
    path, query = read.target(kwargs), read.query(kwargs)
    if not read.paged:
        return api.call(read.method, path, query)
    items: list[Any] = []
    cursor = None
    while True:
        page = api.call(read.method, path, query | {"limit": PAGE, "cursor": cursor})
        items.extend(page["items"])
        cursor = page.get("next_cursor")
        if not cursor:
            return items


def serve(api: Client, read: Read, kwargs: Mapping[str, Any]) -> None:
    """Run one command of the table: call the API, validate the answer with the schema,
    build the presenter's input and print it with the local presenter."""
    refused = (r.partition("=") for r in read.refuse)
    refuse_options(**{flag: kwargs[arg] for flag, _, arg in refused})
    answer = fetch(api, read, kwargs)
    to_view = viewer(read.view)
    if read.many:
        data: Any = [to_view(read.schema.model_validate(x)) for x in answer]
    else:
        data = to_view(read.schema.model_validate(answer))
    _named(read.present)(data, **{a: kwargs[a] for a in read.args})
