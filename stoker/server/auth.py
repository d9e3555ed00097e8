"""Who may call: the bearer token (or ``X-Stoker-Token``) checked before routing, for every
path but the open ones; a read-only token refused on every call that changes state."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from stoker.server.docs import DOCS_URL, OPENAPI_URL, STATIC_URL
from stoker.server.ui import OPEN_PAGES as UI_OPEN_PAGES
from stoker.server.ui import OPEN_PATHS as UI_OPEN_PATHS
from stoker.server.ui import OPEN_PREFIXES as UI_OPEN_PREFIXES

# Open without a token: liveness and readiness (load balancers and orchestrators probe them,
# without a token; they answer only whether and who leads) and the API's
# description (a browser cannot send a bearer token with the page it opens): the docs page,
# its assets and the schema, which hold no job, log or setting. The calls the page makes go
# with the token typed into its "Authorize" dialog.
# The web UI's pages and assets are open for the same reason (they hold no data; what they
# show comes in guarded fragments, see stoker.server.ui).
OPEN_PATHS = frozenset({"/healthz", "/readyz", DOCS_URL, OPENAPI_URL, *UI_OPEN_PATHS})
_OPEN_PREFIX = (STATIC_URL + "/", *UI_OPEN_PREFIXES)
# A refusal names the REST fix (the header); the CLI adds its own (--token, STOKER_TOKEN).
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def is_open(path: str) -> bool:
    """Whether ``path`` is served without a token: the probes, the docs, static assets, the
    UI's pages (which hold no data)."""
    return (
        path in OPEN_PATHS
        or path.startswith(_OPEN_PREFIX)
        or UI_OPEN_PAGES.fullmatch(path) is not None
    )


def given_token(request: Request) -> str | None:
    """The token the request came with: ``Authorization: Bearer`` or ``X-Stoker-Token``."""
    auth = request.headers.get("authorization")
    if auth and auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-stoker-token")


def same_token(given: str, expected: str | None) -> bool:
    # Constant time: the answer's timing does not tell how much of a token matched.
    return expected is not None and hmac.compare_digest(given.encode(), expected.encode())


def sender(request: Request, token: str | None) -> str:
    """Who sent a control event: ``operator`` (the full token) or ``anonymous``."""
    given = given_token(request)
    return "operator" if token is not None and given and same_token(given, token) else "anonymous"


class TokenGuard:
    """The ``http`` middleware: before routing and body parsing, so an unauthenticated call
    learns nothing else, not even whether its body was well-formed. ``token`` None: open."""

    def __init__(self, token: str | None, read_token: str | None) -> None:
        self.token = token
        self.read_token = read_token

    async def __call__(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        path = request.url.path
        if self.token is not None and not is_open(path):
            given = given_token(request)
            if not given:
                return JSONResponse(
                    {
                        "error": "missing token: send 'Authorization: Bearer <token>'",
                        "type": "Unauthorized",
                    },
                    status_code=401,
                    headers=_CHALLENGE,
                )
            full, read_only = same_token(given, self.token), same_token(given, self.read_token)
            if not (full or read_only):
                return JSONResponse(
                    {
                        "error": "wrong token: send 'Authorization: Bearer <token>' with the "
                        "token the manager was started with",
                        "type": "Unauthorized",
                    },
                    status_code=401,
                    headers=_CHALLENGE,
                )
            request.state.read_only = not full  # what a read-only token may hold is less
            if not full and request.method not in _READ_METHODS:
                return JSONResponse(
                    {
                        "error": "the token is read-only: this call changes state and needs the "
                        "token the manager was given with --token, as 'Authorization: Bearer "
                        "<token>'",
                        "type": "Forbidden",
                    },
                    status_code=403,
                )
        return await call_next(request)


__all__ = ["OPEN_PATHS", "TokenGuard", "given_token", "same_token", "sender"]
