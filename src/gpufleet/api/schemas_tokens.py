"""API shapes of API tokens (split from :mod:`gpufleet.api.schemas`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from gpufleet.api.schemas import Mirror, Schema, Time

if TYPE_CHECKING:  # the service's read model, checked by mypy; not loaded at run time
    from gpufleet.service.core.tokens import TokenInfo  # noqa: F401  (Mirror[...])

# --- API tokens (issue 12 item 3) ---------------------------------------------------------


class TokenOut(Mirror["TokenInfo"]):
    """A token as listed: never the token, never its digest."""

    name: str
    role: str
    state: str = Field(description="active, expired or revoked")
    created_at: Time
    created_by: str
    expires_at: Time | None
    revoked_at: Time | None


class TokenCreatedOut(Schema):
    """A new token: ``token`` is shown this once and never again (only its hash is kept)."""

    token: str
    info: TokenOut


class TokenIn(Schema):
    name: str = Field(description="Who the token is for; the actor of what it does.")
    role: str = Field(description="viewer, operator or admin")
    expires: str | None = Field(None, description="Lifetime, e.g. 30d, 12h; none: no expiry.")
