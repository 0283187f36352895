"""gpufleet's configuration: every ``GPUFLEET_*`` setting, grouped, documented, validated at start.

One home for configuration. Settings come from the environment (``GPUFLEET_*``); command-line
flags override them for one call (``--home``, ``--db``, ``--forks``, ``--timeout``). The whole
configuration is validated by :func:`load_settings` **before** anything has a side effect: no
directory is created, no database opened, nothing written until it is valid. A bad value ends
in one :class:`~gpufleet.errors.ConfigError` naming the variable and the cause (exit 2).

Groups (the ``group`` of each field, used by :func:`gpufleet.config_doc.settings_doc` and the README
table):

* ``store``      where the state lives: ``GPUFLEET_HOME``, ``GPUFLEET_DATABASE_URL``
* ``identity``   who acts: ``GPUFLEET_ACTOR``
* ``collect``    collection over SSH (``collect`` and ``validate``): forks and timeouts
* ``evidence``   active tests (``evidence run``): forks and timeout
* ``validate``   profiles, Xid policy, validation lifetime and lifecycle deadlines
* ``reclaim``    what a released host must be clean of (data paths, scratch, idle GPU memory)
* ``bmc``        the out-of-band controllers over Redfish: forks, timeouts, a default password
* ``secrets``    the key that encrypts inventory secrets: ``GPUFLEET_SECRET_KEY`` or
  ``GPUFLEET_SECRET_KEY_FILE`` (one, not both)
* ``lab``        the simulated lab: ``GPUFLEET_CAPTURES``
* ``api``        ``gpufleet serve``: ``GPUFLEET_API_TOKENS_FILE`` (who may call the API)
* ``worker``     background jobs (``gpufleet worker``, ``serve --with-worker``): chunk
  size, concurrency, heartbeats, the schedules (cron) of collect, validate, sweep, sync

``GPUFLEET_SYSROOT`` is not a controller setting: it is read by the remote collection script on
the host it runs on (the lab's sshd hosts set it), so it is not listed here.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import (
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gpufleet.config_fields import HostSettings, _setting
from gpufleet.config_fields import default_actor as default_actor
from gpufleet.config_lean import NOT_SETTINGS as NOT_SETTINGS
from gpufleet.config_lean import default_home as default_home
from gpufleet.errors import ConfigError

PREFIX = "GPUFLEET_"





def _duration(value: Any, unit: str) -> Any:
    """A number of ``unit`` (hours/minutes) from the environment, or a timedelta as is."""
    if isinstance(value, timedelta):
        n = value.total_seconds()
        if n <= 0:
            raise ValueError("must be a positive duration")
        if value > MAX_DURATION:
            raise ValueError("must be at most 10 years")
        return value
    try:
        n = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected a number of {unit}, got {value!r}") from None
    if not math.isfinite(n) or n <= 0:
        raise ValueError(f"expected a positive number of {unit}, got {value!r}")
    limit = MAX_DURATION / timedelta(**{unit: 1})
    if n > limit:
        raise ValueError(f"expected at most {limit:g} {unit} (10 years), got {value!r}")
    return timedelta(**{unit: n})


#: The longest duration setting (validation TTL, deadlines): later than that is not a date
#: the clock can add (``1e12`` hours overflowed).
MAX_DURATION = timedelta(days=3650)


#: Cron expressions known to be valid without asking croniter (the shipped defaults; a test
#: checks each with croniter): loading the settings imports croniter only when a schedule is
#: set to something else (issue 8, start-up: croniter costs ~20 ms of every command).
KNOWN_CRON = frozenset({"* * * * *"})


def environment_values(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings given in the environment, by field name: each field's variable
    (``GPUFLEET_HOME`` for ``home``), matched case-insensitively, as text (validated by
    :class:`Settings`)."""
    env = os.environ if environ is None else environ
    by_var = _variables()
    return {by_var[k.upper()]: v for k, v in env.items() if k.upper() in by_var}


@cache
def _variables() -> dict[str, str]:
    """Each setting's environment variable -> its field name."""
    out = {}
    for name, field in Settings.model_fields.items():
        extra = field.json_schema_extra
        assert isinstance(extra, dict)
        out[str(extra["env"])] = name
    return out


class Settings(HostSettings):
    """Every setting of one gpufleet process, with production defaults. :func:`load_settings`
    reads them from the environment (:func:`environment_values`), flags overriding."""

    # -- worker (issue 12: background jobs on the job queue, schedules) ----------------------
    run_chunk: int = _setting(
        50,
        env="GPUFLEET_RUN_CHUNK",
        group="worker",
        ge=1,
        le=10_000,
        doc="Hosts per queue job of a run started from the API or a schedule (workers share a "
        "run by chunks).",
    )
    worker_concurrency: int = _setting(
        1,
        env="GPUFLEET_WORKER_CONCURRENCY",
        group="worker",
        ge=1,
        le=64,
        doc="Jobs one gpufleet worker (or serve --with-worker) runs at once (--concurrency).",
    )
    worker_heartbeat_s: float = _setting(
        10.0,
        env="GPUFLEET_WORKER_HEARTBEAT",
        group="worker",
        gt=0,
        allow_inf_nan=False,
        doc="Seconds between a worker's heartbeats in the job queue.",
    )
    worker_stalled_s: float = _setting(
        30.0,
        env="GPUFLEET_WORKER_STALLED_AFTER",
        group="worker",
        gt=0,
        allow_inf_nan=False,
        doc="Seconds without a heartbeat after which a worker counts as dead and its running "
        "jobs are retried by another (keep it several heartbeats long).",
    )
    schedule_collect: str = _setting(
        "",
        env="GPUFLEET_SCHEDULE_COLLECT",
        group="worker",
        doc="Cron expression (5 fields, or 6 with seconds last) of scheduled collect runs; "
        "empty: none.",
    )
    schedule_validate: str = _setting(
        "",
        env="GPUFLEET_SCHEDULE_VALIDATE",
        group="worker",
        doc="Cron expression of scheduled validate runs; empty: none.",
    )
    schedule_inspect: str = _setting(
        "",
        env="GPUFLEET_SCHEDULE_INSPECT",
        group="worker",
        doc="Cron expression of scheduled inspection runs (e.g. */5 * * * *: every 5 "
        "minutes); empty: none.",
    )
    schedule_selector: str = _setting(
        "",
        env="GPUFLEET_SCHEDULE_SELECTOR",
        group="worker",
        doc="Hosts of the scheduled collect, validate and inspect runs (a selector; empty: all).",
    )
    schedule_sweep: str = _setting(
        "* * * * *",
        env="GPUFLEET_SCHEDULE_SWEEP",
        group="worker",
        doc="Cron expression of the deadline and lease-expiry sweep; empty: none.",
    )
    schedule_sync: str = _setting(
        "* * * * *",
        env="GPUFLEET_SCHEDULE_SYNC",
        group="worker",
        doc="Cron expression of the exporter sync (the GPUFLEET_SYNC_TARGETS; none set: no "
        "sync); empty: none.",
    )

    @field_validator(
        "schedule_collect",
        "schedule_validate",
        "schedule_sweep",
        "schedule_sync",
        "schedule_inspect",
    )
    @classmethod
    def _cron(cls, v: str) -> str:
        v = " ".join(v.split())
        if v and v not in KNOWN_CRON:
            from croniter import croniter  # type: ignore[import-untyped]

            if not croniter.is_valid(v):
                raise ValueError(
                    f"{v!r} is not a cron expression (5 fields, or 6 with seconds last)"
                )
        return v

    # -- inspect (issue 10: inspection sweep, health rules, blast-radius guard) ---------------
    health_rules_file: Path | None = _setting(
        env="GPUFLEET_HEALTH_RULES",
        group="inspect",
        doc="YAML overlaid on the shipped health rules (gpufleet inspect).",
    )
    fault_catalogue_file: Path | None = _setting(
        env="GPUFLEET_FAULT_CATALOGUE",
        group="inspect",
        doc="YAML overlaid on the vendors' fault catalogues (a code's level, severity, action).",
    )
    rack_manifests_file: Path | None = _setting(
        env="GPUFLEET_RACK_MANIFESTS",
        group="inspect",
        doc="YAML replacing the shipped expected-rack manifests (gpufleet racks; issue 27).",
    )
    inspect_disk_paths: str = _setting(
        "/",
        env="GPUFLEET_INSPECT_DISK_PATHS",
        group="inspect",
        doc="Comma-separated paths whose free space the inspection probe reads.",
    )
    inspect_retention_hours: float = _setting(
        168.0,
        env="GPUFLEET_INSPECT_RETENTION_HOURS",
        group="inspect",
        gt=0,
        allow_inf_nan=False,
        doc="Hours raw inspection samples are kept; older ones survive as hourly roll-ups.",
    )
    guard_share: float = _setting(
        0.10,
        env="GPUFLEET_GUARD_SHARE",
        group="inspect",
        gt=0,
        le=1,
        doc="Blast-radius guard: most GPU hosts (share of the fleet) quarantined automatically "
        "within the window; more trips the guard.",
    )
    guard_hosts: int = _setting(
        20,
        env="GPUFLEET_GUARD_HOSTS",
        group="inspect",
        ge=1,
        doc="Blast-radius guard: most GPU hosts (absolute) quarantined automatically within "
        "the window.",
    )
    guard_window_minutes: float = _setting(
        60.0,
        env="GPUFLEET_GUARD_WINDOW_MINUTES",
        group="inspect",
        gt=0,
        allow_inf_nan=False,
        doc="Blast-radius guard: the window automatic quarantines are counted in.",
    )
    rack_incident_hosts: int = _setting(
        2,
        env="GPUFLEET_RACK_INCIDENT_HOSTS",
        group="inspect",
        ge=1,
        le=1000,
        doc="Rack incidents (issue 27): rack-scoped fabric findings from this many hosts of one "
        "NVLink domain within the window become one rack incident.",
    )
    rack_incident_window_s: float = _setting(
        10.0,
        env="GPUFLEET_RACK_INCIDENT_WINDOW",
        group="inspect",
        gt=0,
        le=86_400,
        doc="Rack incidents: the window (seconds) the hosts' findings fall within.",
    )
    rack_drain_share: float = _setting(
        0.5,
        env="GPUFLEET_RACK_DRAIN_SHARE",
        group="inspect",
        gt=0,
        le=1,
        doc="Rack incidents: at this share of the rack's trays affected the incident recommends "
        "draining the whole rack (maintenance, with an operator's approval).",
    )
    guard_min_hosts: int = _setting(
        2,
        env="GPUFLEET_GUARD_MIN_HOSTS",
        group="inspect",
        ge=1,
        le=100_000,
        doc="Blast-radius guard: automatic quarantines within the window always allowed; the "
        "guard trips only past both the share and this count (a small fleet still "
        "quarantines a critical fault).",
    )

    # -- notify (issue 10: webhooks for alarms, remediation, lease expiry) --------------------
    webhook_url: str | None = _setting(
        env="GPUFLEET_WEBHOOK_URL",
        group="notify",
        doc="URL every notification is POSTed to as JSON (alarms, remediation, lease events).",
    )
    webhook_secret: SecretStr | None = _setting(
        env="GPUFLEET_WEBHOOK_SECRET",
        group="notify",
        doc="Shared secret signing each webhook body (HMAC-SHA256 in X-Gpufleet-Signature); "
        "never printed.",
    )
    webhook_retries: int = _setting(
        3,
        env="GPUFLEET_WEBHOOK_RETRIES",
        group="notify",
        ge=0,
        le=20,
        doc="Quick retries of a failed webhook delivery a command waits for before it exits "
        "(backoff from 0.5 s); later ones go on in the background up to "
        "GPUFLEET_WEBHOOK_MAX_AGE_H.",
    )
    webhook_timeout_s: float = _setting(
        5.0,
        env="GPUFLEET_WEBHOOK_TIMEOUT",
        group="notify",
        gt=0,
        allow_inf_nan=False,
        doc="Seconds one webhook request may take.",
    )
    # issue 24 (item 11): retries go on until a notification is this old, then dead-lettered
    webhook_max_age_h: float = _setting(
        24.0,
        env="GPUFLEET_WEBHOOK_MAX_AGE_H",
        group="notify",
        gt=0,
        le=24 * 365,
        allow_inf_nan=False,
        doc="Hours a failed webhook delivery is retried (backoff doubling up to 10 min); "
        "then it is dead-lettered (gpufleet alarms, /api/v1/webhooks/dead-letters).",
    )

    # -- validation of single values --------------------------------------------------------
    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _log_word(cls, v: Any, info: ValidationInfo) -> Any:
        """``info`` and ``INFO``, ``JSON`` and ``json`` alike."""
        if not isinstance(v, str):
            return v
        return v.strip().upper() if info.field_name == "log_level" else v.strip().lower()

    @field_validator("validation_ttl", mode="before")
    @classmethod
    def _hours(cls, v: Any) -> Any:
        return _duration(v, "hours")

    @field_validator("validating_deadline", "reclaiming_deadline", mode="before")
    @classmethod
    def _minutes(cls, v: Any) -> Any:
        return _duration(v, "minutes")

    @field_validator("k8s_node_name")
    @classmethod
    def _node_name(cls, v: str) -> str:
        try:
            v.format(name="h", short="h", address="a")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"{v!r}: use only the fields {{name}}, {{short}}, {{address}} ({exc})"
            ) from None
        return v

    @field_validator("reclaim_data_paths", "reclaim_scratch_paths")
    @classmethod
    def _paths(cls, v: str) -> str:
        for p in (x.strip() for x in v.split(",")):
            if p and (not p.startswith("/") or not re.fullmatch(r"/[A-Za-z0-9._/-]*", p)):
                raise ValueError(f"{p!r} is not an absolute path of letters, digits, . _ - /")
        return v

    @field_validator("sync_targets")
    @classmethod
    def _sync_targets(cls, v: str) -> str:
        for word in (w.strip().lower() for w in v.split(",")):
            if word and word not in ("k8s", "slurm"):
                raise ValueError(f"{word!r} is not a sync target (k8s, slurm)")
        return v

    @field_validator("reclaim_scratch_policy")
    @classmethod
    def _scratch_policy(cls, v: str) -> str:
        if v not in ("check", "clean"):
            raise ValueError("expected check or clean")
        return v

    def path_list(self, value: str) -> tuple[str, ...]:
        """The paths of a comma-separated path setting."""
        return tuple(p.strip() for p in value.split(",") if p.strip())

    @field_validator("home")
    @classmethod
    def _home(cls, v: Path) -> Path:
        v = v.expanduser()
        if v.exists() and not v.is_dir():
            raise ValueError(f"{v} exists and is not a directory")
        return v

    @field_validator("database_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is None or v == "":
            return None
        return check_database_url(v)

    @field_validator("actor")
    @classmethod
    def _actor(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("must not be empty")
        if len(v) > 128:
            raise ValueError("longer than 128 characters")
        if any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in v):
            raise ValueError("contains control characters")
        return v

    @field_validator(
        "profiles_file",
        "xid_policy_file",
        "secret_key_file",
        "failure_rules_file",
        "api_tokens_file",
        "health_rules_file",
        "fault_catalogue_file",
        "rack_manifests_file",
    )
    @classmethod
    def _readable_file(cls, v: Path | None) -> Path | None:
        if v is None:
            return None
        v = v.expanduser()
        if not v.exists():
            raise ValueError(f"file not found: {v}")
        if not v.is_file():
            raise ValueError(f"not a file: {v}")
        if not os.access(v, os.R_OK):
            raise ValueError(f"not readable: {v}")
        return v

    @field_validator("url")
    @classmethod
    def _server_url(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        v = v.strip().rstrip("/")
        scheme, sep, rest = v.partition("://")
        if not sep or scheme.lower() not in ("http", "https") or not rest or "@" in rest:
            raise ValueError("expected http(s)://HOST[:PORT][/PREFIX], without credentials")
        return v

    @field_validator("captures_dir")
    @classmethod
    def _dir(cls, v: Path | None) -> Path | None:
        if v is not None and not v.expanduser().is_dir():
            raise ValueError(f"not a directory: {v}")
        return v.expanduser() if v is not None else None

    @model_validator(mode="after")
    def _one_key(self) -> Settings:
        if self.secret_key is not None and self.secret_key_file is not None:
            raise ValueError(
                "GPUFLEET_SECRET_KEY and GPUFLEET_SECRET_KEY_FILE are both set; set one"
            )
        return self

    # -- derived values --------------------------------------------------------------------
    def db_url(self) -> str:
        """The database URL: ``database_url`` or SQLite in the home (nothing is created)."""
        return self.database_url or f"sqlite:///{self.home / 'gpufleet.db'}"

    def uses_home_database(self) -> bool:
        """True when the database is the SQLite file inside the home directory."""
        return self.database_url is None

    def secret_key_bytes(self) -> bytes | None:
        """The secret key (from the variable or the key file), or None when none is set."""
        if self.secret_key is not None:
            return self.secret_key.get_secret_value().strip().encode()
        if self.secret_key_file is not None:
            try:
                return self.secret_key_file.read_bytes().strip()
            except OSError as exc:
                raise ConfigError(
                    f"GPUFLEET_SECRET_KEY_FILE: cannot read {self.secret_key_file}: "
                    f"{exc.strerror or exc}"
                ) from exc
        return None


def check_database_url(url: str) -> str:
    """``url`` if SQLAlchemy can use it with an installed driver; else ValueError."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    hint = "expected sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ValueError(f"not a database URL ({hint})") from None
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ValueError(f"unsupported database '{parsed.get_backend_name()}' ({hint})")
    try:
        parsed.get_dialect().import_dbapi()
    except (NoSuchModuleError, ImportError) as exc:
        raise ValueError(
            f"database driver '{parsed.drivername}' is not available ({exc}); {hint}"
        ) from None
    return url


def _where(err: Mapping[str, Any]) -> str:
    loc = err.get("loc") or ()
    name = str(loc[0]) if loc else ""
    if name and not name.startswith(PREFIX):
        field = Settings.model_fields.get(name)
        extra = field.json_schema_extra if field is not None else None
        if isinstance(extra, dict):
            name = str(extra.get("env", name))
    return name


def _describe(exc: ValidationError, secret_names: frozenset[str]) -> str:
    """One line per invalid value: VARIABLE='value': cause (secret values are never shown)."""
    parts = []
    for err in exc.errors():
        name = _where(err)
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        shown = name and name not in secret_names and err.get("type") != "value_error"
        value = f"={err.get('input')!r}" if shown and "input" in err else ""
        parts.append(f"{name}{value}: {msg}" if name else msg)
    return "; ".join(parts)


def _secret_env_names() -> frozenset[str]:
    return frozenset(
        str(f.validation_alias)
        for f in Settings.model_fields.values()
        if f.annotation is not None and "SecretStr" in str(f.annotation)
    )


def load_settings(**overrides: Any) -> Settings:
    """The validated settings: environment, then ``overrides`` (flags; None = not given).

    Raises :class:`ConfigError` naming every bad value; creates and writes nothing.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**(environment_values() | given))
    except ValidationError as exc:
        raise ConfigError(f"invalid configuration: {_describe(exc, _secret_env_names())}") from None


def with_overrides(settings: Settings, **overrides: Any) -> Settings:
    """A validated copy of ``settings`` with ``overrides`` (None = not given) applied."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if not given:
        return settings
    copy = settings.model_copy()
    try:
        for key, value in given.items():
            setattr(copy, key, value)  # validated on assignment
    except ValidationError as exc:
        raise ConfigError(f"invalid configuration: {_describe(exc, _secret_env_names())}") from None
    return copy


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """``GPUFLEET_*`` variables that are no setting: one line each, with a suggestion."""
    env = os.environ if environ is None else environ
    known = set(_variables()) | NOT_SETTINGS
    out = []
    for name in sorted(env):
        up = name.upper()
        if up.startswith(PREFIX) and up not in known:
            import difflib  # only when there is something to suggest

            close = difflib.get_close_matches(up, sorted(known), n=1)
            from gpufleet.i18n import _  # the warning is read by people (issue 29 item 8)

            hint = _(" (did you mean {name}?)").format(name=close[0]) if close else ""
            out.append(_("unknown setting {name} is ignored").format(name=name) + hint)
    return out
