"""The ``/api/v1`` routers: each parses its request, calls one service function (the same
the CLI calls) and maps the result onto :mod:`gpufleet.api.schemas`. No logic lives here."""

from __future__ import annotations

from typing import Any

from gpufleet.api.schemas import ErrorOut

#: Error responses every route may give, documented in the OpenAPI document.
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "No, an unknown or a revoked token."},
    403: {"model": ErrorOut, "description": "The token's role may not do this."},
    404: {"model": ErrorOut, "description": "Unknown host, lease, baseline ..."},
    409: {"model": ErrorOut, "description": "Not allowed in this state, or lost a race."},
    422: {"model": ErrorOut, "description": "Invalid request (the message names the field)."},
    503: {"model": ErrorOut, "description": "The database is unavailable."},
}
