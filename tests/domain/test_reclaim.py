"""Reclaim checks (pure): parsers of the reclaim sections and the verdict, fail closed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import Section
from gpufleet.collect.reclaim import parse_mounts, parse_ps, read_reclaim
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.reclaim import ReclaimFindings, ReclaimPolicy, judge_reclaim
from gpufleet.errors import ParseError
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.renderers import render_reclaim_sections, render_sections

NOW = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = ReclaimPolicy(login_user="gpufleetlab")


def _host(model: str, *faults: str) -> tuple[HostFacts, ReclaimFindings]:
    h = LabHost(name="h1", model=model, serial_salt=4, faults=list(faults))
    secs = {**render_sections(h), **render_reclaim_sections(h)}
    return assemble_facts(secs, NOW, "h1"), read_reclaim(secs, "h1")


@pytest.mark.parametrize("model", ["a100-8x", "h100-8x"])  # XML and the -q text report
def test_a_clean_lab_host_passes(model: str) -> None:
    facts, findings = _host(model)
    assert judge_reclaim(facts, findings, POLICY).clean


@pytest.mark.parametrize("model", ["a100-8x", "h100-8x"])
def test_a_leftover_gpu_process_and_its_memory_fail(model: str) -> None:
    v = judge_reclaim(*_host(model, "gpu-process"), POLICY)
    checks = {i.check for i in v.issues}
    assert checks == {"gpu_processes", "gpu_memory"}
    assert "pid 58130 /usr/bin/python" in v.summary()


@pytest.mark.parametrize(
    ("fault", "check", "text"),
    [
        ("stale-mount", "data_mounts", "/data/team-a (nfs4 10.0.0.5:/export/team-a) left"),
        ("lessee-process", "lessee_processes", "alice pid 31337 python"),
        ("lessee-crontab", "lessee_crontabs", "crontabs left: alice"),
        ("remap-pending", "row_remap_pending", "needs a GPU reset first"),
    ],
)
def test_each_leftover_is_named(fault: str, check: str, text: str) -> None:
    # h100-8x: its GPUs report remapped rows (the a100 capture prints N/A).
    v = judge_reclaim(*_host("h100-8x", fault), POLICY)
    assert [i.check for i in v.issues] == [check]
    assert text in v.issues[0].message
    assert v.needs_reset is (fault == "remap-pending")


def test_the_data_path_itself_may_be_a_mount_and_lease_users_narrow_the_search() -> None:
    facts, findings = _host("a100-8x", "lessee-process")
    # /scratch is a mount of the host (rendered): only mounts *under* a data path count.
    issues = judge_reclaim(facts, findings, POLICY).issues
    assert not [i for i in issues if i.check == "data_mounts"]
    assert judge_reclaim(facts, findings, ReclaimPolicy(lessee_users=("bob",))).clean
    assert not judge_reclaim(facts, findings, ReclaimPolicy(lessee_users=("alice",))).clean


def test_nothing_collected_never_passes() -> None:
    v = judge_reclaim(None, ReclaimFindings(), POLICY)
    assert {i.check for i in v.issues} == {
        "gpu_processes",
        "gpu_memory",
        "data_mounts",
        "lessee_processes",
        "lessee_crontabs",
        "scratch",
    }


def test_failed_sections_are_not_collected_but_a_missing_cron_spool_is_no_crontab() -> None:
    secs = {
        "reclaim-mounts": Section("reclaim-mounts", "", "cannot read /proc/mounts", 1),
        "reclaim-ps": Section("reclaim-ps", "garbage line", "", 0),
        "reclaim-crontabs": Section(
            "reclaim-crontabs",
            "",
            "ls: cannot access '/var/spool/cron/crontabs': No such file or directory",
            2,
        ),
        "reclaim-scratch": Section("reclaim-scratch", "/scratch/ckpt-0001", "", 0),
    }
    f = read_reclaim(secs, "h1")
    assert f.mounts is None and f.processes is None
    assert f.crontab_users == [] and f.scratch_left == ["/scratch/ckpt-0001"]
    assert any("h1:reclaim-mounts: rc=1" in p for p in f.problems)
    assert any("h1:reclaim-ps" in p for p in f.problems)


def test_parsers_name_the_bad_line() -> None:
    with pytest.raises(ParseError, match=r"h1:reclaim-ps:2: not a"):
        parse_ps("root 0 1 systemd\nalice x 2 sh\n", "h1:reclaim-ps")
    m = parse_mounts("//nas/share /data/my\\040share cifs rw 0 0\n", "h1:reclaim-mounts")
    assert m[0].mountpoint == "/data/my share"
