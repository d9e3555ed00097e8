"""A limit on request bodies, before anything parses them (a 150 MB body
took 671 MB of memory and the manager lost its leader lease).

The outermost layer of the app, in front of the token check too: a body whose
``Content-Length`` is over the limit is answered 413 at once, unread; a body sent without one
(chunked) is counted as it arrives and cut off at the limit: the client is answered 413 and the
app's read of the body raises, so the route never runs on it. Every call of the API takes a
small JSON body or none.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY = 1024 * 1024  # bytes


class _TooLarge(Exception):
    """Raised to the app reading a body past the limit (the client has its 413)."""


class BodyLimit:
    """ASGI middleware: request bodies of at most ``limit`` bytes."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await self._refuse(send)
            return
        seen = 0
        refused = False

        async def counted() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    if not refused:
                        refused = True
                        await self._refuse(send)
                    raise _TooLarge  # the reader stops here; caught below
            return message

        async def guarded(message: Message) -> None:
            if not refused:  # once refused, what the app says is not sent
                await send(message)

        with contextlib.suppress(_TooLarge):  # answered 413 already
            await self.app(scope, counted, guarded)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(
            {
                "error": f"request body over {self.limit} bytes: nothing read, nothing changed",
                "type": "PayloadTooLarge",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
