"""``/api/v1/tokens``: API tokens (admin only: list, create, revoke)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from gpufleet.api.deps import as_admin
from gpufleet.api.routes import ERRORS
from gpufleet.api.schemas_tokens import TokenCreatedOut, TokenIn, TokenOut
from gpufleet.domain.leases import parse_duration
from gpufleet.service.core import tokens
from gpufleet.service.core.fleet import Fleet

router = APIRouter(tags=["tokens"], responses=ERRORS)


@router.get("/tokens", summary="API tokens (names, roles, states; never a secret)")
def tokens_list(fleet: Fleet = Depends(as_admin)) -> list[TokenOut]:
    return [TokenOut.of(t) for t in tokens.list_tokens(fleet)]


@router.post("/tokens", summary="Create a token (returned once, stored hashed)")
def tokens_create(body: TokenIn, fleet: Fleet = Depends(as_admin)) -> TokenCreatedOut:
    info, secret = tokens.create_token(
        fleet,
        body.name,
        tokens.Role.parse(body.role),
        parse_duration(body.expires, "expires") if body.expires else None,
    )
    return TokenCreatedOut(token=secret, info=TokenOut.of(info))


@router.delete("/tokens/{name}", summary="Revoke a token (refused from its next call)")
def tokens_revoke(name: str, fleet: Fleet = Depends(as_admin)) -> TokenOut:
    return TokenOut.of(tokens.revoke_token(fleet, name))
