"""Issue 25, item 4: observable by default. The log set-up (``gpufleet.logs``) as a real
``gpufleet`` process writes it (text, JSON lines, ``--debug``, ``GPUFLEET_LOG_LEVEL``), the ids a
background failure carries, and secrets that never reach a log line.

On 84be469 every test here fails: there was no ``GPUFLEET_LOG_FORMAT``/``GPUFLEET_LOG_LEVEL``
(an unknown variable), no debug line, and a background failure went to Python's last-resort
handler as bare text without its job id."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from gpufleet.config import load_settings
from gpufleet.logs import MASK, configure
from gpufleet.service.core import background_errors as background
from gpufleet.service.core.fleet import Fleet

GPUFLEET = str(Path(sys.executable).with_name("gpufleet"))


def _gpufleet(home: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """A real ``gpufleet`` process (the installed entry point) on a fresh home."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    environ.update(env)
    return subprocess.run(
        [GPUFLEET, "--home", str(home), *argv],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _json_lines(stderr: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def test_json_log_lines_from_a_real_gpufleet_process(tmp_path: Path) -> None:
    """Every stderr line is one JSON object with an ISO 8601 time that has its zone."""
    done = _gpufleet(tmp_path, "--debug", "alarms", "list", "--json", GPUFLEET_LOG_FORMAT="json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) is not None  # stdout is the command's own, untouched
    lines = done.stderr.splitlines()
    assert lines, "no log line"
    records = _json_lines(done.stderr)
    assert len(records) == len(lines)  # nothing but JSON lines
    opened = [r for r in records if "opened the fleet database" in str(r["message"])]
    assert opened, records
    rec = opened[0]
    assert {"time", "level", "logger", "message"} <= set(rec)
    assert rec["level"] == "DEBUG" and rec["logger"] == "gpufleet.cli.common"
    when = datetime.fromisoformat(str(rec["time"]))
    assert when.tzinfo is not None and when.utcoffset() is not None


def test_debug_shows_debug_lines_and_the_default_does_not(tmp_path: Path) -> None:
    quiet = _gpufleet(tmp_path, "alarms", "list", "--json")
    assert quiet.returncode == 0 and "DEBUG" not in quiet.stderr, quiet.stderr
    loud = _gpufleet(tmp_path, "--debug", "alarms", "list", "--json")
    assert loud.returncode == 0, loud.stderr
    assert " DEBUG gpufleet.cli.common: opened the fleet database" in loud.stderr
    by_setting = _gpufleet(tmp_path, "alarms", "list", "--json", GPUFLEET_LOG_LEVEL="debug")
    assert " DEBUG gpufleet.cli.common: opened the fleet database" in by_setting.stderr


def test_a_bad_log_setting_is_refused_naming_it(tmp_path: Path) -> None:
    done = _gpufleet(tmp_path, "alarms", "list", GPUFLEET_LOG_FORMAT="xml")
    assert done.returncode == 2
    assert "GPUFLEET_LOG_FORMAT='xml'" in done.stderr


def test_no_secret_reaches_a_log_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whoever logs a token, the BMC password, the webhook secret or the secret key (a
    library's debug line, a careless message), the line shows ``***``."""
    secrets = {
        "GPUFLEET_TOKEN": "gft_tokenvalue0123456789",
        "GPUFLEET_BMC_PASSWORD": "bmc-Pa55word!",
        "GPUFLEET_WEBHOOK_SECRET": "hook-secret-42",
        "GPUFLEET_SECRET_KEY": "c2VjcmV0LWtleS1vZi10aGlydHktdHdvLWJ5dGVzIQ==",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    settings = load_settings(home=tmp_path)
    bearer = f"Authorization: Bearer {secrets['GPUFLEET_TOKEN']}"
    root = logging.getLogger()
    level = root.level
    try:
        for fmt in ("json", "text"):
            settings.log_format = fmt
            configure(settings, debug=True)
            log = logging.getLogger("gpufleet.test")
            for name, value in secrets.items():
                log.debug("careless %s=%s", name, value)
            logging.getLogger("urllib3").warning("%s", bearer)
            try:
                raise RuntimeError(f"login with {secrets['GPUFLEET_BMC_PASSWORD']} refused")
            except RuntimeError:
                log.exception("failed")
            err = capsys.readouterr().err
            for value in secrets.values():
                assert value not in err, fmt
            assert err.count(MASK) >= len(secrets) + 2, err
    finally:
        for h in [h for h in root.handlers if type(h).__module__ == "gpufleet.logs"]:
            root.removeHandler(h)
        root.setLevel(level)
        logging.getLogger("gpufleet").setLevel(logging.NOTSET)


def test_no_secret_in_a_debug_run_of_remote_mode(tmp_path: Path) -> None:
    """A real process with --debug: the token it sends (to a server that is not there) is in
    no log line."""
    token = "gft_remote-token-0123456789"
    done = _gpufleet(
        tmp_path,
        "--debug",
        "hosts",
        "list",
        GPUFLEET_URL="http://127.0.0.1:9",
        GPUFLEET_TOKEN=token,
        GPUFLEET_LOG_LEVEL="DEBUG",
    )
    assert done.returncode == 2, done.stderr
    assert token not in done.stderr and token not in done.stdout


def test_a_background_failure_shows_with_its_ids(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    """A scheduled task whose store went away: one JSON line naming the component and the
    job, and the counter /metrics shows."""
    from gpufleet.errors import StoreUnavailable
    from gpufleet.service.background.tasks import sweep_task
    from tests.service.test_outbox import lost_store_job

    context, gone = lost_store_job(fleet, 4242)
    settings = fleet.settings.model_copy(update={"log_format": "json"})
    root = logging.getLogger()
    level = root.level
    before = background.counts()[background.SCHEDULER]
    configure(settings, default=logging.INFO)
    try:
        with pytest.raises(StoreUnavailable):
            sweep_task(context, timestamp=0)
    finally:
        gone.dispose()
        for h in [h for h in root.handlers if type(h).__module__ == "gpufleet.logs"]:
            root.removeHandler(h)
        root.setLevel(level)
        logging.getLogger("gpufleet").setLevel(logging.NOTSET)
    assert background.counts()[background.SCHEDULER] == before + 1
    records = [r for r in _json_lines(capsys.readouterr().err)
               if r["logger"] == "gpufleet.service.background.tasks"]
    (rec,) = records
    assert rec["level"] == "WARNING"
    assert rec["job"] == 4242 and rec["component"] == "scheduler"
    assert "task sweep_task failed: StoreUnavailable" in str(rec["message"])
