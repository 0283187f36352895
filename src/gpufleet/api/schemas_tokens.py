"""API shapes of API tokens (split from :mod:`gpufleet.api.schemas`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from gpufleet.api.schemas import Schema, Time

if TYPE_CHECKING:  # the service's read model, checked by mypy; not loaded at run time
    from gpufleet.service.core.tokens import TokenInfo

# --- API tokens (issue 12 item 3) ---------------------------------------------------------


class TokenOut(Schema):
    """A token as listed: never the token, never its digest."""

    name: str
    role: str
    state: str = Field(description="active, expired or revoked")
    created_at: Time
    created_by: str
    expires_at: Time | None
    revoked_at: Time | None

    @classmethod
    def of(cls, t: TokenInfo) -> TokenOut:
        """From ``service.tokens.TokenInfo``."""
        return cls(
            name=t.name,
            role=t.role,
            state=t.state,
            created_at=t.created_at,
            created_by=t.created_by,
            expires_at=t.expires_at,
            revoked_at=t.revoked_at,
        )


class TokenCreatedOut(Schema):
    """A new token: ``token`` is shown this once and never again (only its hash is kept)."""

    token: str
    info: TokenOut


class TokenIn(Schema):
    name: str = Field(description="Who the token is for; the actor of what it does.")
    role: str = Field(description="viewer, operator or admin")
    expires: str | None = Field(None, description="Lifetime, e.g. 30d, 12h; none: no expiry.")
