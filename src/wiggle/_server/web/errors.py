"""Every error of the HTTP port as the documented JSON body, and the headers of every response.

An error answers ``{"error": "<what was wrong>", "code": "<ErrorCode>"}`` with its HTTP status:
400, 401, 403, 404, 405, 409, 413, 415, 429, 500, 503 (docs/dashboard.md#errors). A page a browser
navigates to (GET, ``Accept: text/html``, outside /api/) gets the same message as an HTML page.
An unexpected exception is logged with its traceback and answers 500 without it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from html import escape

from aiohttp import web

from ...errors import ErrorCode, WiggleError
from ..caller_text import loggable

__all__ = ["HttpProblem", "HTTP_STATUS", "errors", "error_reply", "wants_html", "secure_headers", "CSP"]

log = logging.getLogger("wiggle.http")

HTTP_STATUS = {
    ErrorCode.INVALID_ARGUMENT: 400,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.FAILED_PRECONDITION: 409,
    ErrorCode.ALREADY_EXISTS: 409,
    ErrorCode.RESOURCE_EXHAUSTED: 503,
    ErrorCode.UNIMPLEMENTED: 501,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.DEADLINE_EXCEEDED: 504,
}

#: no inline script or style anywhere (the pages load /static/dashboard.js and .css), nothing
#: framed, nothing loaded from elsewhere, forms and fetches to this origin only
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HttpProblem(Exception):
    """An HTTP-level refusal with its status, code and message (415, 413, a forged request...)."""

    def __init__(self, status: int, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def wants_html(request: web.Request) -> bool:
    """A browser navigating to a page (not the API, not a script, not the pages' own refresh)."""
    return (
        request.method in ("GET", "HEAD")
        and not request.path.startswith("/api/")
        and request.headers.get("X-Fragment") != "1"
        and "text/html" in request.headers.get("Accept", "")
    )


def error_reply(request: web.Request, status: int, code: ErrorCode | str, message: str) -> web.Response:
    """The error as JSON, or as an HTML page for a browser's navigation."""
    if wants_html(request):
        from .pages import layout  # pages imports nothing from here

        body = layout("error", "", f'<h2>{status}</h2><p class="err" id="error">{escape(message)}</p>')
        return web.Response(text=body, status=status, content_type="text/html")
    return web.json_response({"error": message, "code": str(code)}, status=status)


def _http_exception(request: web.Request, exc: web.HTTPException) -> web.Response:
    where = f"{request.method} {request.path[:200]}"
    if exc.status == 404:
        return error_reply(request, 404, ErrorCode.NOT_FOUND, f"nothing at {where}: see docs/dashboard.md")
    if exc.status == 405:
        allowed = ", ".join(sorted(getattr(exc, "allowed_methods", ()) or ()))
        message = f"{where} is not allowed; this path takes {allowed or 'other methods'}"
        return error_reply(request, 405, ErrorCode.INVALID_ARGUMENT, message)
    if exc.status == 413:
        return error_reply(
            request, 413, ErrorCode.INVALID_ARGUMENT, f"{where}: {exc.text or 'body too large'}"
        )
    code = ErrorCode.INVALID_ARGUMENT if exc.status < 500 else ErrorCode.INTERNAL
    return error_reply(request, exc.status, code, f"{where}: {exc.reason}")


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every refusal and failure below as a JSON error (or an HTML page for a browser)."""
    try:
        return await handler(request)
    except WiggleError as exc:
        status = HTTP_STATUS.get(exc.code, 500)
        return error_reply(request, status, exc.code, str(exc))
    except HttpProblem as exc:
        return error_reply(request, exc.status, exc.code, str(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise  # a redirect
        return _http_exception(request, exc)
    except RecursionError:  # a decoder deeper than the edge's check expected: still the caller's input
        return error_reply(request, 400, ErrorCode.INVALID_ARGUMENT, "the request nests too deep")
    except Exception:
        log.exception("HTTP %s %s failed", request.method, loggable(request.path, 200))  # decoded: escaped
        message = (
            "internal error: the server logged it (logger wiggle.http); nothing was changed by this answer"
        )
        return error_reply(request, 500, ErrorCode.INTERNAL, message)


async def secure_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Headers on every response (an ``on_response_prepare`` signal): no framing, no sniffing,
    no inline code, no Referer to other sites, nothing cached but the static files."""
    headers = response.headers
    headers["Content-Security-Policy"] = CSP
    headers["X-Frame-Options"] = "DENY"
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Referrer-Policy"] = "same-origin"
    headers["Cross-Origin-Opener-Policy"] = "same-origin"
    headers["Cross-Origin-Resource-Policy"] = "same-origin"
    if "Cache-Control" not in headers:
        headers["Cache-Control"] = "no-store"
