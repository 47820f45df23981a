"""The HTTP port's face of the failure throttle (wiggle/_server/auth_failures.py).

A wrong token at ``POST /signin``, in an ``Authorization`` header of the JSON API, or a client
certificate the identity file does not know, is counted against the caller's address with the
gRPC port's failures; an address that presented ``MAX_FAILURES`` different unknown credentials
in the last ``WINDOW_SECONDS`` is answered 429 (RESOURCE_EXHAUSTED) for any credential until the
oldest of them is that old. A browser session is no credential presented: it is not refused.
"""

from __future__ import annotations

from aiohttp import web

from ..._security.tokens import Identity
from ...errors import ErrorCode
from ..auth_failures import MAX_FAILURES, WINDOW_SECONDS, Throttled
from ..guard import Authenticator
from .errors import HttpProblem

__all__ = ["authenticate", "MAX_FAILURES", "WINDOW_SECONDS"]


def authenticate(
    authenticator: Authenticator, request: web.Request, authorization: str, common_name: str, where: str
) -> Identity:
    """The identity of what ``request`` presents (``Authenticator.authenticate``); a waiting
    address is a 429 HttpProblem, an unknown credential Unauthenticated (401), counted."""
    try:
        return authenticator.authenticate(authorization, common_name, lambda: request.remote or "", where)
    except Throttled as exc:
        raise HttpProblem(429, ErrorCode.RESOURCE_EXHAUSTED, str(exc)) from None
