"""The settings of the store, hosts, exports and edges (store, identity, collect, evidence,
validate, reclaim, k8s, sync, bmc, reachability, secrets, lab, api, remote, logging): the first
part of :class:`gpufleet.config.Settings`, which adds the worker, inspect and notify settings and
every check of a value. Split from ``config.py`` by size; ``Settings`` is still the one home of
the settings (its fields are these, in this order, then its own)."""

from __future__ import annotations

import getpass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic.config import JsonDict

from gpufleet.config_lean import default_home
from gpufleet.domain.lifecycle import DEFAULT_DEADLINES
from gpufleet.domain.states import HostState


def default_actor() -> str:
    """The OS user (``GPUFLEET_ACTOR`` overrides it, e.g. with a CI job id)."""
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return "unknown"




def _setting(default: Any = None, *, env: str, group: str, doc: str, **kw: Any) -> Any:
    """A field read from the environment variable ``env``, documented in ``group``."""
    factory = kw.pop("default_factory", None)
    extra: JsonDict = {"env": env, "group": group}
    if factory is not None:
        return Field(
            default_factory=factory,
            validation_alias=env,
            description=doc,
            json_schema_extra=extra,
            **kw,
        )
    return Field(default, validation_alias=env, description=doc, json_schema_extra=extra, **kw)


class HostSettings(BaseModel):
    """Settings of the store, hosts, exports and edges; see :class:`gpufleet.config.Settings`."""

    model_config = ConfigDict(
        extra="ignore",
        validate_by_name=True,
        validate_by_alias=True,
        validate_assignment=True,
        validate_default=True,
        # Start-up (issue 30): build the validator on first use, not at import (this base is
        # never validated itself; Settings, which inherits this, once per process).
        defer_build=True,
    )

    # -- store ----------------------------------------------------------------------------
    home: Path = _setting(
        default_factory=default_home,
        env="GPUFLEET_HOME",
        group="store",
        doc="State directory (SQLite database, lab).",
    )
    database_url: str | None = _setting(
        env="GPUFLEET_DATABASE_URL",
        group="store",
        doc="Database URL, e.g. postgresql+psycopg://gpufleet@db/gpufleet (default: SQLite "
        "in the home).",
    )
    # -- identity -------------------------------------------------------------------------
    actor: str = _setting(
        default_factory=default_actor,
        env="GPUFLEET_ACTOR",
        group="identity",
        doc="Who is acting, recorded in every event (e.g. a CI job id); default the OS user.",
    )
    # -- collect --------------------------------------------------------------------------
    forks: int = _setting(
        200,
        env="GPUFLEET_FORKS",
        group="collect",
        ge=1,
        le=10_000,
        doc="Hosts collected at once by collect and validate (--forks).",
    )
    collect_timeout_s: float = _setting(
        120.0,
        env="GPUFLEET_COLLECT_TIMEOUT",
        group="collect",
        gt=0,
        allow_inf_nan=False,
        doc="Seconds per host for the whole collection script (--timeout).",
    )
    connect_timeout_s: float = _setting(
        10.0,
        env="GPUFLEET_CONNECT_TIMEOUT",
        group="collect",
        gt=0,
        allow_inf_nan=False,
        doc="Seconds to open one SSH connection.",
    )
    ssh_idle_s: float = _setting(
        300.0,
        env="GPUFLEET_SSH_IDLE_S",
        group="collect",
        ge=0,
        le=86_400,
        allow_inf_nan=False,
        doc="Seconds an SSH connection stays open after a run for the next run of the same "
        "process (0: closed after each run).",
    )
    # -- evidence -------------------------------------------------------------------------
    evidence_forks: int = _setting(
        50,
        env="GPUFLEET_EVIDENCE_FORKS",
        group="evidence",
        ge=1,
        le=10_000,
        doc="Hosts tested at once by evidence run (--forks).",
    )
    evidence_timeout_s: float = _setting(
        3600.0,
        env="GPUFLEET_EVIDENCE_TIMEOUT",
        group="evidence",
        gt=0,
        allow_inf_nan=False,
        doc="Seconds per host for one active test (--timeout).",
    )
    # -- validate -------------------------------------------------------------------------
    profiles_file: Path | None = _setting(
        env="GPUFLEET_PROFILES",
        group="validate",
        doc="YAML overlaid on the shipped workload profiles.",
    )
    xid_policy_file: Path | None = _setting(
        env="GPUFLEET_XID_POLICY",
        group="validate",
        doc="YAML overlaid on the shipped Xid catalog.",
    )
    failure_rules_file: Path | None = _setting(
        env="GPUFLEET_FAILURE_RULES",
        group="validate",
        doc="YAML overlaid on the shipped job-failure classification rules.",
    )
    validation_ttl: timedelta = _setting(
        timedelta(days=30),
        env="GPUFLEET_VALIDATION_TTL_HOURS",
        group="validate",
        doc="How long a validation record stays good, in hours (default 720).",
    )
    validating_deadline: timedelta = _setting(
        DEFAULT_DEADLINES[HostState.VALIDATING],
        env="GPUFLEET_VALIDATING_DEADLINE_MINUTES",
        group="validate",
        doc="Minutes in validating before sweep quarantines the host (default 120).",
    )
    reclaiming_deadline: timedelta = _setting(
        DEFAULT_DEADLINES[HostState.RECLAIMING],
        env="GPUFLEET_RECLAIMING_DEADLINE_MINUTES",
        group="validate",
        doc="The same for reclaiming, in minutes (default 30).",
    )
    # -- reclaim --------------------------------------------------------------------------
    reclaim_data_paths: str = _setting(
        "/data,/scratch,/mnt",
        env="GPUFLEET_RECLAIM_DATA_PATHS",
        group="reclaim",
        doc="Comma-separated paths: a mount left under one fails reclaim.",
    )
    reclaim_scratch_paths: str = _setting(
        "/scratch",
        env="GPUFLEET_RECLAIM_SCRATCH_PATHS",
        group="reclaim",
        doc="Comma-separated scratch paths that must be empty after a lease.",
    )
    reclaim_scratch_policy: str = _setting(
        "check",
        env="GPUFLEET_RECLAIM_SCRATCH",
        group="reclaim",
        doc="check: scratch left over fails reclaim; clean: reclaim deletes it first.",
    )
    reclaim_idle_memory_mib: int = _setting(
        1024,
        env="GPUFLEET_RECLAIM_IDLE_MEMORY_MIB",
        group="reclaim",
        ge=0,
        doc="GPU memory in use (MiB) above which a GPU is not back to idle.",
    )
    confirm_share: float = _setting(
        0.5,
        env="GPUFLEET_CONFIRM_SHARE",
        group="validate",
        gt=0,
        le=1,
        allow_inf_nan=False,
        doc="A change (retire, maintenance, unquarantine, change record) that would reach more "
        "than this share of the fleet needs --all (API: confirm_all).",
    )
    # -- k8s ------------------------------------------------------------------------------
    k8s_node_name: str = _setting(
        "{name}",
        env="GPUFLEET_KUBE_NODE_NAME",
        group="k8s",
        doc="Kubernetes node name of a host: {name}, {short} (up to the first dot), {address}.",
    )
    k8s_kubeconfig: Path | None = _setting(
        env="GPUFLEET_KUBECONFIG",
        group="k8s",
        doc="Kubeconfig for k8s sync (default: KUBECONFIG, ~/.kube/config, in-cluster).",
    )
    k8s_own_nvidia_labels: bool = _setting(
        False,
        env="GPUFLEET_KUBE_OWN_NVIDIA_LABELS",
        group="k8s",
        doc="Also manage nvidia.com/ labels (clusters without GPU Feature Discovery).",
    )
    k8s_own_vendor_labels: bool = _setting(
        False,
        env="GPUFLEET_KUBE_OWN_VENDOR_LABELS",
        group="k8s",
        doc="Also manage other vendors' labels (Ascend accelerator, accelerator-type, "
        "node.kubernetes.io/npu.chip.name; amd.com/gpu.*).",
    )
    k8s_cordon_quarantined: bool = _setting(
        False,
        env="GPUFLEET_KUBE_CORDON_QUARANTINED",
        group="k8s",
        doc="k8s sync cordons quarantined hosts' nodes (and uncordons only its own cordons).",
    )
    k8s_dra: bool = _setting(
        False,
        env="GPUFLEET_KUBE_DRA",
        group="k8s",
        doc="The cluster hands GPUs out by DRA: gpufleet sync (k8s) also keeps the "
        "DeviceTaintRules of k8s dra-sync and sync status shows their drift (issue 26).",
    )
    k8s_drain_timeout_s: float = _setting(
        300.0,
        env="GPUFLEET_KUBE_DRAIN_TIMEOUT",
        group="k8s",
        gt=0,
        allow_inf_nan=False,
        doc="Seconds a drain (maintenance, remediation, campaign action) waits for the "
        "host's pods to be evicted before it gives up and reports what blocked (issue 26); "
        "the remediation a health rule runs by itself waits as long for Slurm jobs.",
    )
    # -- sync -----------------------------------------------------------------------------
    sync_targets: str = _setting(
        "",
        env="GPUFLEET_SYNC_TARGETS",
        group="sync",
        doc="Comma-separated syncs gpufleet sync runs: k8s, slurm (none: pass --k8s/--slurm).",
    )
    sync_every_s: float = _setting(
        60.0,
        env="GPUFLEET_SYNC_EVERY",
        group="sync",
        gt=0,
        allow_inf_nan=False,
        doc="Seconds between gpufleet sync rounds when looping (--every).",
    )
    # -- bmc ------------------------------------------------------------------------------
    bmc_forks: int = _setting(
        50,
        env="GPUFLEET_BMC_FORKS",
        group="bmc",
        ge=1,
        le=10_000,
        doc="BMCs read at once by bmc status (--forks).",
    )
    bmc_timeout_s: float = _setting(
        10.0,
        env="GPUFLEET_BMC_TIMEOUT",
        group="bmc",
        gt=0,
        allow_inf_nan=False,
        doc="Seconds to connect to a BMC and for each Redfish request (--timeout).",
    )
    bmc_deadline_s: float = _setting(
        60.0,
        env="GPUFLEET_BMC_DEADLINE",
        group="bmc",
        gt=0,
        le=86_400,
        allow_inf_nan=False,
        doc="Seconds one BMC's whole read by bmc status may take, every request included "
        "(--deadline); a BMC past it is reported timed out, the others as they finish.",
    )
    bmc_max_body_bytes: int = _setting(
        16 * 1024 * 1024,
        env="GPUFLEET_BMC_MAX_BODY_BYTES",
        group="bmc",
        ge=1024,
        le=1024**3,
        doc="Largest body of one Redfish answer read from a BMC; a larger one is refused.",
    )
    bmc_settle_s: float = _setting(
        120.0,
        env="GPUFLEET_BMC_SETTLE",
        group="bmc",
        gt=0,
        allow_inf_nan=False,
        doc="Seconds bmc power and reimage wait for the power state to settle.",
    )
    bmc_password: SecretStr | None = _setting(
        env="GPUFLEET_BMC_PASSWORD",
        group="bmc",
        doc="BMC password for hosts without their own (never printed or stored).",
    )
    # -- reachability (issue 24) -----------------------------------------------------------
    unreachable_attempts: int = _setting(
        2,
        env="GPUFLEET_UNREACHABLE_ATTEMPTS",
        group="collect",
        ge=1,
        le=1000,
        doc="Consecutive failed collections/inspections that make a host unreachable.",
    )
    unreachable_minutes: float = _setting(
        10.0,
        env="GPUFLEET_UNREACHABLE_MINUTES",
        group="collect",
        gt=0,
        le=525_600,
        allow_inf_nan=False,
        doc="Minutes of failed contacts (from the first) that make a host unreachable.",
    )
    # -- secrets --------------------------------------------------------------------------
    secret_key: SecretStr | None = _setting(
        env="GPUFLEET_SECRET_KEY",
        group="secrets",
        doc="Key that encrypts inventory secrets in the store (never printed).",
    )
    secret_key_file: Path | None = _setting(
        env="GPUFLEET_SECRET_KEY_FILE",
        group="secrets",
        doc="File holding that key (instead of GPUFLEET_SECRET_KEY).",
    )
    # -- lab ------------------------------------------------------------------------------
    captures_dir: Path | None = _setting(
        env="GPUFLEET_CAPTURES",
        group="lab",
        doc="Captured tool output the simulated lab answers with (default: the shipped copy).",
    )
    # -- api ------------------------------------------------------------------------------
    api_tokens_file: Path | None = _setting(
        env="GPUFLEET_API_TOKENS_FILE",
        group="api",
        doc="YAML of API bearer tokens: SHA-256 of the token -> role (viewer, operator, "
        "admin) or {role, name}; tokens are never stored in clear. Unset: every API call "
        "is refused (401).",
    )
    api_max_body_bytes: int = _setting(
        1024 * 1024,
        env="GPUFLEET_API_MAX_BODY_BYTES",
        group="api",
        ge=1024,
        le=1024**3,
        doc="Largest request body the API reads (413 beyond), checked after the token and "
        "before the body is read.",
    )
    api_max_upload_bytes: int = _setting(
        16 * 1024 * 1024,
        env="GPUFLEET_API_MAX_UPLOAD_BYTES",
        group="api",
        ge=1024,
        le=4 * 1024**3,
        doc="Largest request body of a bulk upload (POST /api/v1/failures/import).",
    )
    # -- remote (issue 12: the CLI through a gpufleet server instead of the database) ------
    url: str | None = _setting(
        env="GPUFLEET_URL",
        group="remote",
        doc="Base URL of a gpufleet server (gpufleet serve), e.g. https://fleet.example:8080; "
        "set: the CLI calls its API instead of opening the database.",
    )
    token: SecretStr | None = _setting(
        env="GPUFLEET_TOKEN",
        group="remote",
        doc="API token the CLI sends to GPUFLEET_URL (Authorization: Bearer); never printed.",
    )
    # -- logging (issue 25: observable by default; set up by gpufleet.logs) ------------------
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] | None = _setting(
        env="GPUFLEET_LOG_LEVEL",
        group="logging",
        doc="Least level of gpufleet's log lines on stderr: DEBUG, INFO, WARNING, ERROR or "
        "CRITICAL (default WARNING for commands, INFO for serve and worker; --debug: DEBUG).",
    )
    log_format: Literal["text", "json"] = _setting(
        "text",
        env="GPUFLEET_LOG_FORMAT",
        group="logging",
        doc="Log lines on stderr as text, or json: one object per line (time, level, logger, "
        "message; host, run and job ids where known).",
    )
