"""What every route receives: the fleet, acting as the caller's token, checked for its role."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpufleet.api.auth import Authenticator, Principal, Role
from gpufleet.service.core.fleet import Fleet

#: The security scheme the OpenAPI document names; errors are ours (auto_error off).
bearer = HTTPBearer(
    auto_error=False,
    description="A token from 'gpufleet token create' or listed in GPUFLEET_API_TOKENS_FILE.",
)


@dataclass
class ApiContext:
    """One server: the fleet it serves and the tokens it accepts."""

    fleet: Fleet
    tokens: Authenticator


def context(request: Request) -> ApiContext:
    ctx = request.app.state.ctx
    assert isinstance(ctx, ApiContext)
    return ctx


def caller(
    request: Request,
    creds: HTTPAuthorizationCredentials | None = Depends(bearer),
) -> Principal:
    """The authenticated caller (401 otherwise); authenticated once per request (a request
    with a body already was, by api/limits.py, before its body was read)."""
    who = getattr(request.state, "principal", None)
    if not isinstance(who, Principal):
        header = f"{creds.scheme} {creds.credentials}" if creds is not None else None
        who = context(request).tokens.authenticate(header)
    request.state.principal = who  # the audit of mutating calls names it (app.py)
    return who


def _as(role: Role) -> Callable[..., Fleet]:
    def dependency(request: Request, who: Principal = Depends(caller)) -> Fleet:
        who.require(role, f"{request.method} {request.url.path}")
        # the caller's token name is the actor of every event this request writes
        return dataclasses.replace(context(request).fleet, actor=f"api:{who.name}")

    dependency.__name__ = f"as_{role.label}"
    return dependency


#: The fleet for a route any token may call (reads).
as_viewer = _as(Role.VIEWER)
#: The fleet for a route that acts on hosts or leases.
as_operator = _as(Role.OPERATOR)
#: The fleet for an administrative route.
as_admin = _as(Role.ADMIN)
