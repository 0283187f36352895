"""CLI plugins: command groups that installed distributions add through entry points.

An entry point of the group ``gpufleet.cli`` names a :class:`typer.Typer` app; its name is the
command (``lab = "gpufleet.lab.cli:app"`` adds ``gpufleet lab ...``). Plugins are loaded
lazily, only when one of their commands runs or the command list is printed, so importing the
product CLI never imports a plugin (the lab stays off the product's import path).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup

from gpufleet.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

# Context and Command are click's (vendored inside newer Typer releases): typed as Any here so
# this module does not depend on where a given Typer version keeps click.

ENTRY_POINT_GROUP = "gpufleet.cli"


def plugins() -> dict[str, EntryPoint]:
    """The plugin entry points by command name (read when a plugin may be needed)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_plugin(ep: EntryPoint) -> Any:
    """The click command of one plugin entry point (a :class:`typer.Typer` app)."""
    try:
        sub = ep.load()
    except Exception as exc:
        raise ConfigError(
            f"CLI plugin {ep.name} = {ep.value}: cannot load: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(sub, typer.Typer):
        raise ConfigError(
            f"CLI plugin {ep.name} = {ep.value}: is a {type(sub).__name__}, expected typer.Typer"
        )
    cmd = typer.main.get_command(sub)
    cmd.name = ep.name
    return cmd


def _click_exceptions() -> Any:
    """The exception module of the click that Typer runs on (newer Typer vendors click as
    ``typer._click``; older ones use the ``click`` distribution)."""
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - older Typer
        from click import exceptions  # type: ignore[no-redef]
    return exceptions


class PluginGroup(TyperGroup):
    """The top-level command group: built-in commands plus lazily loaded plugin groups.

    It is also where a command line that does not parse (unknown option, ``--forks nan``) is
    reported like every other error: one ``error:`` line on stderr (or the JSON error shape on
    stdout under ``--json``) and exit 2, instead of Click's multi-line usage panel.
    """

    def main(self, args: Any = None, *a: Any, **kw: Any) -> Any:
        """Run the CLI; usage errors go through the one error format (exit 2)."""
        import sys

        click = _click_exceptions()
        argv = list(sys.argv[1:] if args is None else args)
        kw["standalone_mode"] = False
        try:
            rv = super().main(argv, *a, **kw)
        except click.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            if ctx is not None and (
                isinstance(exc, click.NoArgsIsHelpError)
                or exc.format_message() == "Missing command."
            ):
                # A bare group (`gpufleet`, `gpufleet hosts`): its help, exit 2 like click.
                sys.stdout.write(ctx.get_help() + "\n")
                sys.exit(2)
            command = ctx.command_path if ctx is not None else "gpufleet"
            err = UsageError(command=command, cause=exc.format_message())
            from gpufleet.cli.common import fail

            raise SystemExit(fail(err, as_json="--json" in argv).exit_code) from None
        except typer.Abort:
            sys.stderr.write("aborted\n")
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def list_commands(self, ctx: Any) -> list[str]:
        """Built-in commands in their order, then plugins not shadowing one, by name."""
        own = super().list_commands(ctx)
        return own + sorted(n for n in plugins() if n not in own)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """A built-in command, else a plugin (loaded now, once)."""
        found = super().get_command(ctx, cmd_name)
        if found is not None:
            return found
        ep = plugins().get(cmd_name)
        if ep is None:
            return None
        cmd = load_plugin(ep)
        self.add_command(cmd, cmd_name)
        return cmd
