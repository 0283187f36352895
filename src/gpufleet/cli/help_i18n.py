"""The commands' help in the language of the messages (issue 29 item 8), in one place.

The help texts (the commands' docstrings, ``help=`` of groups, options and arguments) are
written in English where the commands are defined; they are not marked one by one. When a
command is built (:func:`gpufleet.cli.main._loaded`, the top-level group, the project's own
plugins) :func:`translate` walks it and replaces each text by its translation, paragraph by
paragraph (a paragraph's line breaks are spaces to Typer's rich help, so a message is the
paragraph on one line). English changes nothing and costs one look at the language.

``make messages`` adds every help paragraph to the template (``python -m
gpufleet.cli.help_i18n POT``: :func:`help_messages` loads every command); tests/test_i18n.py
fails when one has no zh_CN entry. Typer's and Click's own words (the panels' titles, ``--help``)
are set here too (:func:`_framework`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from gpufleet.i18n import _, language

#: Typer's rich help words (module constants of ``typer.rich_utils``), in Chinese.
_TYPER_ZH = {
    "ARGUMENTS_PANEL_TITLE": "参数",
    "OPTIONS_PANEL_TITLE": "选项",
    "COMMANDS_PANEL_TITLE": "命令",
    "ERRORS_PANEL_TITLE": "错误",
    "DEFAULT_STRING": "[默认：{}]",
    "ENVVAR_STRING": "[环境变量：{}]",
    "REQUIRED_LONG_STRING": "[必填]",
    "DEPRECATED_STRING": "（已弃用） ",
    "ABORTED_TEXT": "已中止。",
    "RICH_HELP": "运行 [blue]'{command_path} {help_option}'[/] 查看帮助。",
}
#: Click's plain help (the top-level group's) headings, in Chinese.
_CLICK_ZH = {"Usage: ": "用法：", "Options:": "选项：", "Commands:": "命令："}
_HELP_OPTION_ZH = "显示本帮助并退出。"


def paragraphs(text: str) -> list[str]:
    """The messages of one help text: its paragraphs, each on one line (a ``\\b`` paragraph,
    whose lines Typer keeps, as written)."""
    out = []
    for para in text.strip().split("\n\n"):
        para = para.strip()
        if para:
            out.append(para if para.startswith("\b") else " ".join(para.split()))
    return out


def translated(text: str | None) -> str | None:
    """``text`` with each paragraph translated (None stays None)."""
    if not text or language() == "en":
        return text
    return "\n\n".join(_(p) for p in paragraphs(text))


def _texts(cmd: Any) -> Iterator[tuple[Any, str]]:
    """Every (object, attribute) holding a help text of ``cmd`` and its subcommands."""
    seen: set[int] = set()
    stack = [cmd]
    while stack:
        c = stack.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        yield c, "help"
        yield c, "short_help"
        for p in getattr(c, "params", ()):
            yield p, "help"
        stack.extend(getattr(c, "commands", {}).values())


def translate(cmd: Any) -> Any:
    """``cmd`` (a Click command or group) with its help texts and its subcommands' in the
    language of the messages (in place; returned for chaining)."""
    if language() == "en" or getattr(cmd, "_gpufleet_translated", False):
        return cmd
    _framework()
    cmd._gpufleet_translated = True
    for obj, attr in _texts(cmd):
        text = getattr(obj, attr, None)
        if isinstance(text, str):
            setattr(obj, attr, translated(text))
        if attr == "help" and hasattr(obj, "get_help_option"):
            _command_words(obj)
    return cmd


def _command_words(cmd: Any) -> None:
    """The words Click writes itself into one command's help: ``--help``'s help and the
    ``Usage:`` prefix (hard-coded in Click, so set on the command)."""
    from typer import _click

    option = cmd.get_help_option(_click.Context(cmd))
    if option is not None:
        option.help = _HELP_OPTION_ZH

    def format_usage(ctx: Any, formatter: Any) -> None:
        pieces = cmd.collect_usage_pieces(ctx)
        formatter.write_usage(ctx.command_path, " ".join(pieces), prefix=_CLICK_ZH["Usage: "])

    cmd.format_usage = format_usage


def click_heading(text: str) -> str:
    """A heading of Click's plain help (``Usage: ``...) in the language of the messages."""
    return text if language() == "en" else _CLICK_ZH.get(text, text)


def _framework() -> None:
    from typer import rich_utils

    for name, value in _TYPER_ZH.items():
        setattr(rich_utils, name, value)


def help_messages() -> set[str]:
    """Every help paragraph of every built-in command, the top-level group and the project's
    own plugins (every command module imported): the messages ``make messages`` adds."""
    import typer

    from gpufleet.cli.main import _REGISTER, COMMANDS, app
    from gpufleet.cli.plugins import load_plugin, plugins

    roots: list[Any] = [typer.main.get_command(app)]
    for key in _REGISTER:
        sub = typer.Typer(rich_markup_mode="rich")
        _REGISTER[key](sub)
        roots.append(typer.main.get_group(sub))
    roots += [load_plugin(ep) for ep in plugins().values() if ep.value.startswith("gpufleet.")]
    out = {p for _n, one_line in COMMANDS.values() for p in paragraphs(one_line)}
    for root in roots:
        for obj, attr in _texts(root):
            text = getattr(obj, attr, None)
            if isinstance(text, str):
                out.update(paragraphs(text))
    return out


def add_to_template(pot: str) -> None:
    """Add :func:`help_messages` to the gettext template ``pot`` (sorted, as Babel writes)."""
    from babel.messages.pofile import read_po, write_po

    with open(pot, "rb") as f:
        catalog = read_po(f)
    for message in sorted(help_messages()):
        if message not in catalog:
            catalog.add(message)
    with open(pot, "wb") as f:
        write_po(f, catalog, no_location=True, sort_output=True, width=76)


if __name__ == "__main__":  # pragma: no cover - make messages
    add_to_template(sys.argv[1])
