"""``gpufleet token create|list|revoke``: API bearer tokens, stored hashed in the database."""

from __future__ import annotations

import sys

import typer

from gpufleet.api.schemas_tokens import TokenCreatedOut, TokenOut
from gpufleet.cli.common import (
    boundary,
    console,
    err_console,
    lit,
    local_time,
    open_fleet,
    print_json,
)
from gpufleet.cli.tables import WIDE_HELP, Col, show
from gpufleet.domain.leases import parse_duration
from gpufleet.i18n import _
from gpufleet.service.core.tokens import (
    Role,
    TokenInfo,
    create_token,
    list_tokens,
    revoke_token,
)

app = typer.Typer(no_args_is_help=True)


@app.command("create")
@boundary
def create_cmd(
    name: str = typer.Option(..., "--name", help="Who the token is for (the actor it records)."),
    role: str = typer.Option(..., "--role", help="viewer, operator or admin."),
    expires: str | None = typer.Option(
        None, "--expires", help="Lifetime, e.g. 30d, 12h (default: no expiry)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Create an API token and print it ONCE (only its SHA-256 is stored). Callers send it
    as 'Authorization: Bearer TOKEN'; the dashboard's sign-in form takes it too."""
    lifetime = parse_duration(expires, "--expires") if expires else None
    info, secret = create_token(open_fleet(), name, Role.parse(role, "--role"), lifetime)
    if as_json:
        print_json(TokenCreatedOut(token=secret, info=TokenOut.of(info)).json_dict())
        return
    sys.stdout.write(secret + "\n")
    until = f", expires {local_time(info.expires_at)}" if info.expires_at else ", no expiry"
    err_console.print(
        f"token {lit(info.name)} ({lit(info.role)}{until}) created: it is shown only this "
        "once, store it now",
        soft_wrap=True,
    )


@app.command("list")
@boundary
def list_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Tokens with their role and state (active, expired, revoked); never a secret."""
    show_tokens(list_tokens(open_fleet()), as_json)


def show_tokens(rows: list[TokenInfo], as_json: bool) -> None:
    """Print tokens (``token list``; local and remote mode)."""
    if as_json:
        print_json([TokenOut.of(t).json_dict() for t in rows])
        return
    cols = [Col("name", ident=True), Col("role", ident=True), Col("state", ident=True),
            Col("created", 3, words=True), Col("by", 4, ident=True),
            Col("expires", 1, words=True), Col("revoked", 2, words=True)]
    show(cols, [
        [
            lit(r.name),
            lit(r.role),
            lit(r.state),
            local_time(r.created_at),
            lit(r.created_by),
            local_time(r.expires_at) if r.expires_at else "never",
            local_time(r.revoked_at),
        ]
        for r in rows
    ], title=_("API tokens"))


@app.command("revoke")
@boundary
def revoke_cmd(
    name: str = typer.Argument(..., help="Token name (token list)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Revoke a token: its next call is refused (401)."""
    show_revoked(revoke_token(open_fleet(), name), as_json)


def show_revoked(info: TokenInfo, as_json: bool) -> None:
    """Print ``token revoke`` (local and remote mode)."""
    if as_json:
        print_json(TokenOut.of(info).json_dict())
        return
    console.print(_("token {name} revoked").format(name=lit(info.name)))
