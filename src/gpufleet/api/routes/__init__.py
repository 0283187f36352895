"""The ``/api/v1`` routers: each parses its request, calls one service function (the same
the CLI calls) and maps the result onto :mod:`gpufleet.api.schemas`. No logic lives here."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path

from gpufleet.api.schemas import ErrorOut

#: A row id in a path (lease, alarm, run): a positive 32-bit integer, as the databases store
#: it; a larger number is refused (422) before it reaches the database.
RowId = Annotated[int, Path(ge=1, le=2**31 - 1)]

#: Error responses every route may give, documented in the OpenAPI document.
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "No, an unknown or a revoked token."},
    403: {"model": ErrorOut, "description": "The token's role may not do this."},
    404: {"model": ErrorOut, "description": "Unknown host, lease, baseline ..."},
    409: {"model": ErrorOut, "description": "Not allowed in this state, or lost a race."},
    422: {"model": ErrorOut, "description": "Invalid request (the message names the field)."},
    503: {"model": ErrorOut, "description": "The database is unavailable."},
}
