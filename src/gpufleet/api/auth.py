"""API authentication: bearer tokens with a role, from the database or a tokens file.

Two sources, both holding only the **SHA-256** of a token, never the token:

* the database (``gpufleet token create --role R --name N [--expires 30d]`` prints a token
  ``gft_...`` once; ``token revoke N`` stops it at its next call; ``token list``);
* ``GPUFLEET_API_TOKENS_FILE`` (kept working, for deployments that manage tokens as files),
  YAML keyed by the SHA-256 hex digest of the token::

    # printf %s "$TOKEN" | sha256sum
    3f1c...e9: viewer
    a81b...04: {role: operator, name: ci-pipeline}

  re-read when it changes, so a removed line revokes its token without a restart.

A ``gft_`` token is looked up in the database, any other in the file. Roles are ordered:
``viewer`` reads; ``operator`` also acts on hosts and leases (allocate, renew, release,
record failures, acknowledge alarms); ``admin`` may do everything (maintenance, tokens, ...).
Neither a file nor a database token: every call is refused (401): the API fails closed.
"""

from __future__ import annotations

from gpufleet.service.core.tokens import (
    Authenticator,
    Principal,
    Role,
    TokenStore,
    parse_tokens,
    token_digest,
)

__all__ = ["Authenticator", "Principal", "Role", "TokenStore", "parse_tokens", "token_digest"]
