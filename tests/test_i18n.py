"""Issue 29 item 8: the zh_CN messages.

The catalog covers every marked message (the same extraction as ``make messages``: Babel,
keywords ``_``, ``N_``, ``ngettext`` and the table headers ``Col``/``num``); the language comes
from GPUFLEET_LANG, then LC_ALL/LC_MESSAGES/LANG; the real ``gpufleet`` speaks Chinese under
``GPUFLEET_LANG=zh_CN`` while its ``--json`` output, exit codes and error JSON stay byte for
byte the English ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po as babel_read_po

import gpufleet
import gpufleet.cli.tables  # imported in English: its help texts are translated at import
from gpufleet import i18n
from gpufleet.cli.help_i18n import help_messages, paragraphs

SRC = Path(gpufleet.__file__).parent
KEYWORDS = {"_": None, "N_": None, "ngettext": (1, 2), "Col": (1,), "num": (1,)}


def marked() -> set[str]:
    """Every marked msgid of the source tree (the singular of a plural message)."""
    out = set()
    for _file, _line, message, _comments, _ctx in extract_from_dir(
        str(SRC), method_map=[("**.py", "python")], keywords=KEYWORDS
    ):
        msgid = message[0] if isinstance(message, tuple) else message
        if msgid:
            out.add(msgid)
    return out


def test_every_marked_message_has_a_zh_cn_translation() -> None:
    catalog = i18n.read_po(i18n.catalog_path("zh_CN").read_text("utf-8"))
    helps = help_messages()  # every command's help paragraphs (make messages adds them too)
    assert len(helps) > 350 and "Lease id." in helps and "Number of hosts." in helps  # + lab
    messages = marked() | helps
    assert len(messages) > 550  # the demo, the tables' headers, states, errors, help texts
    missing = sorted(m for m in messages if not catalog.get(m))
    assert not missing, f"no zh_CN msgstr for {len(missing)} marked message(s): {missing}"
    # a translation keeps the message's {fields}: str.format must find the same names
    import string

    for msgid, msgstr in catalog.items():
        first = msgstr[0] if isinstance(msgstr, list) else msgstr
        fields = {f for _, f, _, _ in string.Formatter().parse(msgid) if f}
        assert {f for _, f, _, _ in string.Formatter().parse(first) if f} == fields, msgid


def test_the_po_reader_agrees_with_babel() -> None:
    text = i18n.catalog_path("zh_CN").read_text("utf-8")
    ours = i18n.read_po(text)
    with i18n.catalog_path("zh_CN").open("rb") as f:
        theirs = babel_read_po(f)
    expected: dict[str, object] = {}
    for m in theirs:
        if m.id:
            key = m.id[0] if isinstance(m.id, tuple) else m.id
            expected[key] = list(m.string) if isinstance(m.id, tuple) else m.string
    assert ours == expected


def test_the_po_reader_fails_closed() -> None:
    with pytest.raises(ValueError, match="po line 2: unknown keyword 'msgfoo'"):
        i18n.read_po('msgid "a"\nmsgfoo "b"\n')
    with pytest.raises(ValueError, match="po line 1: not a quoted string"):
        i18n.read_po("msgid a\n")
    assert i18n.read_po('#, fuzzy\nmsgid "a"\nmsgstr "b"\n') == {}
    assert i18n.read_po('msgid ""\n"a\\n"\nmsgstr "x"\n"y"\n') == {"a\n": "xy"}


@pytest.mark.parametrize(
    ("env", "lang"),
    [
        ({}, "en"),
        ({"LANG": "zh_CN.UTF-8"}, "zh_CN"),
        ({"LANG": "en_US.UTF-8", "LC_ALL": "zh_CN.UTF-8"}, "zh_CN"),
        ({"LANG": "zh_CN.UTF-8", "LC_ALL": "C"}, "en"),
        ({"LANG": "zh_CN.UTF-8", "GPUFLEET_LANG": "en"}, "en"),
        ({"LANG": "C.UTF-8", "GPUFLEET_LANG": "zh_CN"}, "zh_CN"),
        ({"GPUFLEET_LANG": "zh-Hans"}, "zh_CN"),
        ({"LANG": "zu_ZA.UTF-8"}, "en"),
    ],
)
def test_the_language_comes_from_the_environment(env: dict[str, str], lang: str) -> None:
    assert i18n._pick(env) == lang


@pytest.fixture
def chinese() -> Iterator[None]:
    i18n.reset("zh_CN")
    yield
    i18n.reset()


def test_tables_translate_headers_and_measure_them_in_cells(chinese: None) -> None:
    from rich.cells import cell_len
    from rich.console import Console

    from gpufleet.cli.tables import Col, fit

    cols = [Col("host", ident=True), Col("state", words=True), Col("driver", 4, ident=True)]
    rows = [["gpu-01", i18n.state_name("quarantined"), "535.54.03"]]
    fitted = fit(cols, rows, wide=False, width=24)
    assert [str(c.header) for c in fitted.table.columns] == ["主机", "状态"]
    assert fitted.hidden == ["驱动"]
    assert fitted.note() == "[dim]已隐藏 1 列（驱动）：--wide 可显示[/]"
    out = Console(width=24, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    out.print(fitted.table)
    lines = out.export_text().splitlines()
    assert any("已隔离" in line for line in lines)
    assert max(cell_len(line.rstrip()) for line in lines) <= 24


def _gpufleet(tmp: Path, lang: str | None, *argv: str) -> subprocess.CompletedProcess[str]:
    """The installed ``gpufleet`` program (its lean starts included), in a fresh process."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("GPUFLEET_", "LC_"))}
    env.update(HOME=str(tmp), COLUMNS="120", LANG="C.UTF-8", GPUFLEET_HOME=str(tmp / "home"))
    if lang is not None:
        env["GPUFLEET_LANG"] = lang
    program = Path(sys.executable).parent / "gpufleet"
    return subprocess.run(
        [str(program), *argv], env=env, cwd=tmp, capture_output=True, text=True, timeout=300
    )


def _without_at(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith('  "at": '))


def test_the_demo_speaks_chinese_and_json_never_changes(tmp_path: Path) -> None:
    demo = _gpufleet(tmp_path, "zh_CN", "lab", "demo", "--hosts", "8")
    assert demo.returncode == 0, demo.stderr
    for heading in ("1. 实验集群：8 台主机", "2. 纳管", "3. 采集", "4. 验证", "集群概览",
                    "后续步骤：将以下命令粘贴到 shell 中执行", "各状态主机数"):
        assert heading in demo.stdout, heading
    assert "2. enroll" not in demo.stdout and "fleet summary" not in demo.stdout
    assert ("8 台主机，60 张加速卡（40 NVIDIA GPU、16 Ascend NPU、4 AMD Instinct GPU），"
            "52 张可用") in demo.stdout
    assert "采集批次 1" in demo.stdout
    # validation reasons: the check's template in Chinese (code + params), data as it is
    flat = "".join(demo.stdout.replace("│", "").split())  # table cells wrap their text
    assert "nccl：没有NCCLall-reduce结果（必需）" in flat
    assert "accelerator_health：huawei#0（0000:c1:00.0）告警[A4025021" in flat
    for english in ("(required)", "noNCCL", "result", "nottraining", "alarm["):
        assert english not in flat, english
    shown = _gpufleet(tmp_path, "zh_CN", "hosts", "show", "gpu-07")
    assert "原因：accelerator_health：huawei #0" in shown.stdout, shown.stdout
    assert "unknown setting" not in demo.stderr
    listed = _gpufleet(tmp_path, "zh_CN", "hosts", "list")
    assert "已隔离" in listed.stdout and "主机" in listed.stdout
    english = _gpufleet(tmp_path, None, "hosts", "list")
    assert "quarantined" in english.stdout and "已隔离" not in english.stdout

    for argv in (
        ("hosts", "list", "--json"),
        ("summary", "--json"),
        ("labels", "--json"),
        ("capacity", "--json"),
        ("leases", "list", "--json"),
        ("alarms", "list", "--json"),
        ("hosts", "show", "no-such-host", "--json"),
        ("hosts", "show", "gpu-07", "--json"),
        ("hosts", "show", "gpu-03", "--json"),
    ):
        en, zh = _gpufleet(tmp_path, None, *argv), _gpufleet(tmp_path, "zh_CN", *argv)
        if argv[0] == "capacity":  # its "at" is the time it ran: the one line that may differ
            en.stdout, zh.stdout = (_without_at(p.stdout) for p in (en, zh))
        assert (zh.returncode, zh.stdout) == (en.returncode, en.stdout), argv
        assert en.stdout.strip(), argv

    # the error line: translated (read back against the error templates), exit code unchanged
    en = _gpufleet(tmp_path, None, "hosts", "show", "no-such-host")
    zh = _gpufleet(tmp_path, "zh_CN", "hosts", "show", "no-such-host")
    assert zh.returncode == en.returncode == 4
    assert en.stderr.startswith("error: ") and "'no-such-host'" in en.stderr
    assert zh.stderr.startswith("错误： 没有名为 'no-such-host' 的主机"), zh.stderr


def test_an_error_prints_its_translated_template_and_keeps_english_json(chinese: None) -> None:
    from gpufleet.errors import NotFound

    exc = NotFound(what="pool", name="p9")
    assert exc.formatted(i18n._(exc.template)) == "未知的pool 'p9'"
    assert exc.as_json()["error"]["message"] == "unknown pool 'p9'"
    assert NotFound("no host named 'x'").formatted(i18n._(NotFound.template)) == (
        "no host named 'x'"
    )


def test_help_paragraphs_are_the_lines_typer_joins() -> None:
    assert paragraphs("  One line\n  and more.\n\n  Second.\n\n") == [
        "One line and more.", "Second."
    ]
    assert paragraphs("\b\nkept\nlines") == ["\b\nkept\nlines"]


#: Run under GPUFLEET_LANG=zh_CN: every command of the real CLI (built-in, the lab plugin),
#: loaded as ``gpufleet`` loads it, its help rendered, and every help text that has no
#: Chinese in it printed (JSON), with the rendered help of ``hosts list``.
_WALK = """
import contextlib, io, json, sys
import typer
from typer import _click
from gpufleet.cli.help_i18n import translate
from gpufleet.cli.main import app

root = translate(typer.main.get_command(app))
english, rendered, stack = [], {}, [((), root, None)]
while stack:
    path, cmd, parent = stack.pop()
    ctx = _click.Context(cmd, info_name=" ".join(("gpufleet", *path)), parent=parent)
    texts = [cmd.help, *(p.help for p in cmd.params), cmd.get_help_option(ctx).help]
    english += [[" ".join(path), t] for t in texts if t and not any(c >= "\u3000" for c in t)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rendered[" ".join(path)] = cmd.get_help(ctx) + out.getvalue()
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(ctx):
            stack.append(((*path, name), cmd.get_command(ctx, name), ctx))
shown = rendered["hosts list"]
print(json.dumps({"english": english, "paths": sorted(rendered), "hosts list": shown}))
"""


def test_every_command_help_is_chinese_under_zh_cn(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("GPUFLEET_", "LC_"))}
    env.update(GPUFLEET_LANG="zh_CN", COLUMNS="100", HOME=str(tmp_path))
    walk = subprocess.run([sys.executable, "-c", _WALK], env=env, capture_output=True,
                          text=True, timeout=300)
    assert walk.returncode == 0, walk.stderr
    found = json.loads(walk.stdout)
    assert len(found["paths"]) > 100 and "lab demo" in found["paths"]  # the lab plugin too
    assert found["english"] == [], "help without a zh_CN translation (make messages)"
    shown = found["hosts list"]
    for word in ("用法：", "参数", "选项", "列出主机及其状态", "只看该组内的主机。",
                 "显示本帮助并退出。"):
        assert word in shown, word


def test_the_help_speaks_the_language_and_english_stays(tmp_path: Path) -> None:
    zh = _gpufleet(tmp_path, "zh_CN", "--help")
    assert zh.returncode == 0, zh.stderr
    for word in ("用法：gpufleet", "选项：", "命令：", "从资产清单纳管（或更新）主机",
                 "显示本帮助并退出。"):
        assert word in zh.stdout, word
    en = _gpufleet(tmp_path, None, "--help")
    assert "Usage: gpufleet" in en.stdout and "Enroll (or update) hosts" in en.stdout
    assert not any(c >= "\u3000" for c in en.stdout)
    zh = _gpufleet(tmp_path, "zh_CN", "hosts", "show", "--help")
    assert "单台主机的采集信息" in zh.stdout and "Usage:" not in zh.stdout
    # a usage error keeps its exit code in either language
    bad = [_gpufleet(tmp_path, lang, "hosts", "list", "--no-such") for lang in (None, "zh_CN")]
    assert bad[0].returncode == bad[1].returncode == 2


def test_lists_and_outcomes_read_as_chinese(chinese: None) -> None:
    assert i18n.joined(["1 不可达", "30 成功"]) == "1 不可达、30 成功"
    assert [i18n._(o) for o in ("unreachable", "bad output", "XPUs")] == [
        "不可达", "输出无法解析", "XPU"
    ]
    i18n.reset("en")
    assert i18n.joined(["1 unreachable", "30 ok"]) == "1 unreachable, 30 ok"
