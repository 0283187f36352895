"""Issue 29 item 8: the fixed lines of racks, drift, baseline, inspect, parts, sweep, the
empty ``hosts list``, the settings warning and the remote-mode refusal speak Chinese under
``GPUFLEET_LANG=zh_CN``; their ``--json`` output and exit codes are the English ones byte for
byte (the real ``gpufleet`` on a demo home, in fresh processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def _run(
    home: Path, lang: str | None, *argv: str, **extra: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("GPUFLEET_", "LC_"))}
    env.update(HOME=str(home.parent), COLUMNS="200", LANG="C.UTF-8", GPUFLEET_HOME=str(home))
    env.update(extra)
    if lang is not None:
        env["GPUFLEET_LANG"] = lang
    program = Path(sys.executable).parent / "gpufleet"
    return subprocess.run([str(program), *argv], env=env, cwd=home.parent, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("zh") / "home"
    made = _run(home, None, "lab", "demo", "--hosts", "32")  # gpu-11 drifts; the GB200 rack
    assert made.returncode == 0, made.stderr
    yield home


#: command -> (English that must be gone under zh_CN, Chinese that must be there)
SHOWN: list[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = [
    (("racks", "list"), ("racks", "NVLink domain", "trays", "state", " ok "),
     ("机柜", "NVLink 域", "托盘", "正常")),
    (("racks", "show", "nvl01-t01"),
     ("rack ", "NVLink domain", "GPUs free", "slot", "health", "fabric", "restricted",
      "out of NVLink-domain", "rack incident", " ok "),
     ("机柜 ", "空闲 GPU 72/72", "槽位", "互连", "受限：18 个托盘因机柜事件（告警 1）受限")),
    (("racks", "incidents"), ("rack incident", "rack-scoped", "its hosts are restricted"),
     ("告警 1（nvl01-t01）：机柜事件：NVLink 域", "其主机已受限")),
    (("drift",), ("on 1 host", ", baseline", "(baseline)", "pool train-h100", "match it",
                  "to make"),
     ("driver 535.154.05：1 台主机，基线 590.48.01", "资源池 train-h100：基线 train-h100-ref；",
      "590.48.01（基线）：8 台主机、535.154.05：1 台")),
    (("baseline", "list"), ("validated", "baselines"), ("已验证", "基线")),
    (("baseline", "show", "train-h100-ref"), ("baseline train",), ("基线 train-h100-ref",)),
    (("baseline", "diff", "train-h100-ref", "train-a100-ref"), (" vs ",), (" 对比 ",)),
    (("inspect", "report"), ("top offenders", "per model"), ("以来问题最多的主机", "按型号")),
    (("alarms", "list"), ("rack-scoped", "critical"), ("机柜级互连问题", "严重")),
]


@pytest.mark.parametrize(("argv", "english", "chinese"), SHOWN, ids=[" ".join(s[0]) for s in SHOWN])
def test_the_lines_speak_chinese(
    demo: Path, argv: tuple[str, ...], english: tuple[str, ...], chinese: tuple[str, ...]
) -> None:
    zh, en = _run(demo, "zh_CN", *argv), _run(demo, None, *argv)
    assert zh.returncode == en.returncode, (zh.stderr, en.stderr)
    flat = "\n".join(line.replace("│", " ") for line in zh.stdout.splitlines())
    for word in english:
        assert word not in flat, (word, zh.stdout)
    for word in chinese:
        assert word in zh.stdout, (word, zh.stdout)
    for word in english[:1]:  # the English run still says it
        assert word in en.stdout.replace("│", " "), (word, en.stdout)


@pytest.mark.parametrize(
    "argv",
    [
        ("racks", "list", "--json"),
        ("racks", "show", "nvl01-t01", "--json"),
        ("racks", "incidents", "--json"),
        ("drift", "--json"),
        ("baseline", "list", "--json"),
        ("baseline", "show", "train-h100-ref", "--json"),
        ("parts", "list", "--json"),
        ("inspect", "guard", "--json"),
        ("racks", "show", "no-such-rack", "--json"),
    ],
    ids=lambda argv: " ".join(argv),
)
def test_json_and_exit_codes_never_change(demo: Path, argv: tuple[str, ...]) -> None:
    en, zh = _run(demo, None, *argv), _run(demo, "zh_CN", *argv)
    assert (zh.returncode, zh.stdout) == (en.returncode, en.stdout)
    assert en.stdout.strip()


def test_sweep_and_the_empty_fleet(demo: Path, tmp_path: Path) -> None:
    zh = _run(demo, "zh_CN", "sweep")
    assert zh.returncode == 0 and "台主机已变更状态" in zh.stdout and "moved" not in zh.stdout
    empty = _run(tmp_path / "empty", "zh_CN", "hosts", "list")
    assert empty.returncode == 0, empty.stderr
    assert "还没有主机" in empty.stdout and "no hosts yet" not in empty.stdout
    assert "no hosts yet" in _run(tmp_path / "empty", None, "hosts", "list").stdout


def test_the_settings_warning_and_the_remote_refusal(demo: Path) -> None:
    typo = {"GPUFLEET_HOMEE": "x"}
    zh, en = _run(demo, "zh_CN", "sweep", **typo), _run(demo, None, "sweep", **typo)
    assert "警告： 未知设置 GPUFLEET_HOMEE，已忽略（是否想用 GPUFLEET_HOME？）" in zh.stderr
    assert "warning: unknown setting GPUFLEET_HOMEE is ignored (did you mean GPUFLEET_HOME?)" \
        in en.stderr
    remote = {"GPUFLEET_URL": "http://127.0.0.1:9"}
    zh, en = _run(demo, "zh_CN", "sweep", **remote), _run(demo, None, "sweep", **remote)
    assert zh.returncode == en.returncode == 2
    assert zh.stderr.startswith("错误： gpufleet sweep 不能通过 GPUFLEET_URL 远程使用"), zh.stderr
    assert "is not available over GPUFLEET_URL" in en.stderr
    zh, en = (_run(demo, lang, "sweep", "--json", **remote) for lang in ("zh_CN", None))
    assert (zh.returncode, zh.stdout) == (en.returncode, en.stdout)
    assert '"code": "config"' in en.stdout and "is not available over GPUFLEET_URL" in en.stdout


#: (argv, extra environment, the English line, the Chinese line): errors on stderr.
ERRORS: list[tuple[tuple[str, ...], dict[str, str], str, str]] = [
    (("hosts", "show", "gpu-99"), {},
     "error: no host named 'gpu-99' (did you mean gpu-09 or gpu-19 or gpu-29?)",
     "错误： 没有名为 'gpu-99' 的主机（是否想用 gpu-09 或 gpu-19 或 gpu-29？）"),
    (("hosts", "list", "pool:trian-h100"), {},
     "error: no pool named 'trian-h100' (did you mean train-h100?)",
     "错误： 没有名为 'trian-h100' 的资源池（是否想用 train-h100？）"),
    (("baseline", "show", "train-h100-rf"), {},
     "error: no baseline named 'train-h100-rf' (did you mean train-h100-ref?)",
     "错误： 没有名为 'train-h100-rf' 的基线（是否想用 train-h100-ref？）"),
    (("racks", "show", "nvl01-t1"), {}, "error: no rack 'nvl01-t1'", "错误： 没有机柜 'nvl01-t1'"),
    (("token", "revoke", "nope"), {}, "error: no token named 'nope' (gpufleet token list)",
     "错误： 没有名为 'nope' 的令牌（gpufleet token list）"),
    (("hosts", "lst"), {},
     "error: gpufleet hosts: No such command 'lst'. Did you mean 'list'? "
     "(see 'gpufleet hosts --help')",
     "错误： gpufleet hosts：没有命令 'lst'。 是否想用 'list'？（参见 'gpufleet hosts --help'）"),
    (("hosts", "show"), {},
     "error: gpufleet hosts show: Missing argument 'name'. (see 'gpufleet hosts show --help')",
     "错误： gpufleet hosts show：缺少参数 'name'。（参见 'gpufleet hosts show --help'）"),
    (("hosts", "list"), {"GPUFLEET_URL": "http://127.0.0.1:9"},
     "error: gpufleet server http://127.0.0.1:9: Connection refused",
     "错误： gpufleet 服务器 http://127.0.0.1:9：连接被拒绝"),
]


@pytest.mark.parametrize(("argv", "extra", "english", "chinese"), ERRORS,
                         ids=[" ".join(e[0]) for e in ERRORS])
def test_errors_speak_chinese_and_their_json_does_not(
    demo: Path, argv: tuple[str, ...], extra: dict[str, str], english: str, chinese: str
) -> None:
    zh, en = _run(demo, "zh_CN", *argv, **extra), _run(demo, None, *argv, **extra)
    assert zh.returncode == en.returncode != 0, (zh.stderr, en.stderr)
    assert en.stderr.strip() == english  # English byte for byte as before
    assert zh.stderr.strip() == chinese
    zj, ej = (_run(demo, lang, *argv, "--json", **extra) for lang in ("zh_CN", None))
    assert (zj.returncode, zj.stdout) == (ej.returncode, ej.stdout) == (en.returncode, ej.stdout)
    assert english.removeprefix("error: ") in ej.stdout


def test_an_unknown_message_stays_english_and_pieces_are_read_back() -> None:
    from gpufleet.domain.error_texts import localize
    from gpufleet.i18n import gettext_in

    def zh(m: str) -> str:
        return gettext_in("zh_CN", m)

    assert localize("the flux capacitor is off", zh) == "the flux capacitor is off"
    assert localize(
        "no hosts match selector 'a pool:trian': no host named 'a'; no pool named 'trian' "
        "(did you mean train?)", zh
    ) == ("没有主机匹配选择器 'a pool:trian'：没有名为 'a' 的主机；"
          "没有名为 'trian' 的资源池（是否想用 train？）")
    assert localize("a campaign named 'x' exists; pick another name", zh) == (
        "名为 'x' 的变更任务已存在；请换一个名称")


def test_health_rule_findings_are_read_back() -> None:
    from gpufleet.i18n import reason_text

    assert reason_text("ecc: volatile_sbe +12 in 3600 s", "zh_CN") == (
        "ecc：3600 秒内 volatile_sbe +12")
    assert reason_text("link down (3 in 600 s)", "zh_CN") == "link down（600 秒内 3 次）"
    assert reason_text("ecc: volatile_sbe +12 in 3600 s", "en") == (
        "ecc: volatile_sbe +12 in 3600 s")


def test_remediate_sweep_and_bmc_lines_are_read_back() -> None:
    """What the producers really say (domain/remediation.py, domain/bmc.py, the sweep's
    action lines) is read back and shown in Chinese; English as it is."""
    from gpufleet.domain.bmc import BmcOutcome, diagnose
    from gpufleet.domain.events import CollectionOutcome
    from gpufleet.domain.remediation import read_restart
    from gpufleet.i18n import reason_text

    ok, said = read_restart("kubelet", "@@restart\n@@rc 0\n@@active\nactive\n@@rc 0\n")
    assert ok and said == "kubelet restarted, active"
    assert reason_text(said, "zh_CN") == "kubelet 已重启，生效中"
    assert reason_text(said, "en") == said
    failed = read_restart("kubelet", "@@restart\nboom\n@@rc 1\n")[1]
    assert reason_text(failed, "zh_CN") == "重启 kubelet 失败（rc 1）：boom"
    down = diagnose(CollectionOutcome.UNREACHABLE, BmcOutcome.UNREACHABLE, None)
    assert down is not None and reason_text(down, "zh_CN").startswith(
        "SSH unreachable，BMC unreachable：机器、电源或机柜网络故障")
    assert reason_text("alarm critical: ecc: volatile_sbe +12 in 3600 s", "zh_CN") == (
        "严重告警：ecc：3600 秒内 volatile_sbe +12")
    assert reason_text("findings cleared: back to validating", "zh_CN") == "问题已清除：回到验证中"
    cycled = ("gpu reset failed; power cycled through the BMC (power On); "
              "the host answers again")
    assert reason_text(cycled, "zh_CN") == (
        "gpu reset failed；已通过 BMC 重新上电（电源 On）；主机已重新应答")


def test_an_inventory_typo_reads_in_chinese(demo: Path) -> None:
    bad = demo.parent / "typo.ini"
    bad.write_text("[gpu]\nx1 ansible_host=10.0.0.1 gpufleet_bmc_adress=1.2.3.4\n")
    zh, en = (_run(demo, lang, "enroll", "-i", str(bad)) for lang in ("zh_CN", None))
    assert zh.returncode == en.returncode == 2
    assert "unknown variable gpufleet_bmc_adress (did you mean gpufleet_bmc_address?)" in en.stderr
    assert "未知变量 gpufleet_bmc_adress（是否想用 gpufleet_bmc_address？）" in zh.stderr
    zj, ej = (_run(demo, lang, "enroll", "-i", str(bad), "--json") for lang in ("zh_CN", None))
    assert (zj.returncode, zj.stdout) == (ej.returncode, ej.stdout)
