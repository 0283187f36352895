"""gpufleet.config: every GPUFLEET_* setting in one place, validated before any side effect, one
ConfigError naming the variable, flags override the environment, secrets never echoed."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from gpufleet.config import (
    Settings,
    load_settings,
    unknown_variables,
    with_overrides,
)
from gpufleet.config_doc import settings_doc
from gpufleet.errors import ConfigError, LocalIOError
from gpufleet.service.core.fleet import Fleet

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPUFLEET_* from the machine running the tests."""
    import os

    for name in list(os.environ):
        if name.upper().startswith("GPUFLEET_"):
            monkeypatch.delenv(name)


def test_defaults_are_the_documented_production_values() -> None:
    s = load_settings()
    assert s.forks == 200
    assert s.collect_timeout_s == 120
    assert s.evidence_forks == 50 and s.evidence_timeout_s == 3600
    assert s.validation_ttl == timedelta(hours=720)
    assert s.validating_deadline == timedelta(minutes=120)
    assert s.reclaiming_deadline == timedelta(minutes=30)
    assert s.database_url is None and s.db_url() == f"sqlite:///{s.home / 'gpufleet.db'}"


def test_environment_sets_every_group(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("{}\n")
    monkeypatch.setenv("GPUFLEET_HOME", str(tmp_path / "h"))
    monkeypatch.setenv("GPUFLEET_ACTOR", "ci-job-42")
    monkeypatch.setenv("GPUFLEET_FORKS", "17")
    monkeypatch.setenv("GPUFLEET_COLLECT_TIMEOUT", "30.5")
    monkeypatch.setenv("GPUFLEET_EVIDENCE_TIMEOUT", "600")
    monkeypatch.setenv("GPUFLEET_PROFILES", str(profiles))
    monkeypatch.setenv("GPUFLEET_VALIDATION_TTL_HOURS", "1.5")
    monkeypatch.setenv("GPUFLEET_VALIDATING_DEADLINE_MINUTES", "5")
    s = load_settings()
    assert (s.home, s.actor, s.forks, s.collect_timeout_s) == (
        tmp_path / "h",
        "ci-job-42",
        17,
        30.5,
    )
    assert s.evidence_timeout_s == 600
    assert s.profiles_file == profiles
    assert s.validation_ttl == timedelta(minutes=90)
    assert s.validating_deadline == timedelta(minutes=5)
    assert not (tmp_path / "h").exists()  # loading creates nothing


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUFLEET_FORKS", "17")
    monkeypatch.setenv("GPUFLEET_HOME", str(tmp_path / "env"))
    s = load_settings(home=tmp_path / "flag", forks=None)  # None = flag not given
    assert s.home == tmp_path / "flag" and s.forks == 17
    t = with_overrides(s, forks=3, database_url="sqlite:///" + str(tmp_path / "x.db"))
    assert t.forks == 3 and t.db_url().endswith("x.db")
    assert s.forks == 17  # the original is untouched


@pytest.mark.parametrize(
    ("var", "value", "says"),
    [
        ("GPUFLEET_FORKS", "abc", "GPUFLEET_FORKS='abc'"),
        ("GPUFLEET_FORKS", "0", "greater than or equal to 1"),
        ("GPUFLEET_COLLECT_TIMEOUT", "nan", "finite"),
        ("GPUFLEET_COLLECT_TIMEOUT", "-1", "greater than 0"),
        ("GPUFLEET_EVIDENCE_TIMEOUT", "inf", "finite"),
        ("GPUFLEET_VALIDATION_TTL_HOURS", "-3", "positive number of hours"),
        ("GPUFLEET_RECLAIMING_DEADLINE_MINUTES", "soon", "number of minutes"),
        ("GPUFLEET_PROFILES", "/nonexistent/profiles.yaml", "file not found"),
        ("GPUFLEET_XID_POLICY", "/", "not a file"),
        ("GPUFLEET_DATABASE_URL", "nonsense", "not a database URL"),
        ("GPUFLEET_DATABASE_URL", "mysql://u@h/db", "unsupported database 'mysql'"),
        ("GPUFLEET_DATABASE_URL", "postgresql+nodriver://u@h/db", "driver"),
        ("GPUFLEET_ACTOR", "   ", "must not be empty"),
        ("GPUFLEET_ACTOR", "evil\x1b]0;x\x07", "control characters"),
        ("GPUFLEET_CAPTURES", "/nonexistent", "not a directory"),
        ("GPUFLEET_SCHEDULE_INSPECT", "every 5 minutes", "not a cron expression"),
        ("GPUFLEET_SCHEDULE_SWEEP", "61 * * * *", "not a cron expression"),
        ("GPUFLEET_URL", "ftp://gpufleet.example", "GPUFLEET_URL"),
    ],
)
def test_a_bad_value_is_one_config_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, says: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    msg = str(info.value)
    assert var in msg and says in msg, msg
    assert "\n" not in msg


def test_home_that_is_a_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ConfigError, match=r"GPUFLEET_HOME.*not a directory"):
        load_settings(home=f)


def test_all_bad_values_are_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_FORKS", "x")
    monkeypatch.setenv("GPUFLEET_CONNECT_TIMEOUT", "0")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "GPUFLEET_FORKS" in str(info.value) and "GPUFLEET_CONNECT_TIMEOUT" in str(info.value)


@pytest.mark.parametrize("bad", ["-1", "nan", "inf", "86401", "five minutes"])
def test_ssh_idle_time_is_checked(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("GPUFLEET_SSH_IDLE_S", bad)
    with pytest.raises(ConfigError, match="GPUFLEET_SSH_IDLE_S"):
        load_settings()


def test_ssh_idle_time_defaults_to_five_minutes(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().ssh_idle_s == 300
    monkeypatch.setenv("GPUFLEET_SSH_IDLE_S", "0")  # closed after each run
    assert load_settings().ssh_idle_s == 0


def test_secret_key_is_never_echoed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("from-file-key\n")
    monkeypatch.setenv("GPUFLEET_SECRET_KEY", "s3cr3t-value")
    assert load_settings().secret_key_bytes() == b"s3cr3t-value"
    assert "s3cr3t" not in repr(load_settings())
    monkeypatch.setenv("GPUFLEET_SECRET_KEY_FILE", str(key_file))
    with pytest.raises(ConfigError, match="both set") as info:
        load_settings()
    assert "s3cr3t" not in str(info.value)
    monkeypatch.delenv("GPUFLEET_SECRET_KEY")
    assert load_settings().secret_key_bytes() == b"from-file-key"
    monkeypatch.setenv("GPUFLEET_SECRET_KEY_FILE", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="GPUFLEET_SECRET_KEY_FILE: file not found"):
        load_settings()


def test_unknown_variables_are_reported_with_a_suggestion() -> None:
    env = {"GPUFLEET_FORK": "10", "GPUFLEET_SYSROOT": "/x", "GPUFLEET_HOME": "/h", "PATH": "/"}
    assert unknown_variables(env) == [
        "unknown setting GPUFLEET_FORK is ignored (did you mean GPUFLEET_FORKS?)"
    ]


def test_invalid_settings_create_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("GPUFLEET_VALIDATION_TTL_HOURS", "forever")
    with pytest.raises(ConfigError):
        Fleet.open(home=home)
    assert not home.exists()


def test_fleet_takes_its_settings(tmp_path: Path) -> None:
    s = load_settings(home=tmp_path / "h", actor="op", forks=9)
    f = Fleet.open(settings=s)
    try:
        assert f.settings.forks == 9 and f.actor == "op" and f.home == tmp_path / "h"
        assert (tmp_path / "h" / "gpufleet.db").exists()
    finally:
        f.db.dispose()


def test_an_uncreatable_home_is_one_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(LocalIOError, match="cannot create the state directory"):
        Fleet.open(home=blocker / "sub")


def test_assignment_is_validated() -> None:
    s = load_settings()
    s.validation_ttl = timedelta(hours=1)  # tests and callers may tune a loaded instance
    assert s.validation_ttl == timedelta(hours=1)
    with pytest.raises(ValueError):
        s.forks = -1


def test_every_setting_is_documented_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    table = {m for m in re.findall(r"^\| `(GPUFLEET_[A-Z_]+)` \|", readme, re.M)}
    assert table == {d.env for d in settings_doc()}
    assert all(d.doc and d.group for d in settings_doc())
    assert set(Settings.model_fields) == {d.field for d in settings_doc()}
