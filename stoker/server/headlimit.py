"""A limit on a request's head (its request line and headers), in the HTTP parser itself, before
the app, the guard and the token check see anything (a 64 MB header was read
whole and parsed before the 401).

uvicorn's httptools protocol has no such limit (its h11 one has
``h11_max_incomplete_event_size``, answered 400): this subclass counts the bytes that arrive
while a request's head is incomplete and, past :data:`MAX_HEAD`, answers 431 and closes the
connection without feeding the parser the rest, so what the server holds of a long head is
bounded by the limit and one read. A body is not counted (its own limit is
:mod:`stoker.server.limits`).
"""

from __future__ import annotations

import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD = 64 * 1024  # bytes: the request line and every header together

_BODY = json.dumps(
    {
        "error": f"request line and headers over {MAX_HEAD} bytes: nothing read, nothing changed",
        "type": "RequestHeaderFieldsTooLarge",
    }
).encode()
_ANSWER = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: application/json\r\n"
    b"connection: close\r\n"
    b"content-length: " + str(len(_BODY)).encode() + b"\r\n\r\n" + _BODY
)


class BoundedHeadProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bound on each request's head (:data:`MAX_HEAD`)."""

    max_head = MAX_HEAD

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0  # of the request whose head is arriving
        self._in_head = True  # a connection starts with a head
        self._refused = False

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # answered and closing: the rest is dropped unread
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        # Still in a head past the limit (a chunk that also holds the head's end and part of
        # the body is not: the head completed inside it).
        if self._in_head and self._head_bytes > self.max_head and not self._refused:
            self._refused = True
            if self.transport is not None and not self.transport.is_closing():
                self.transport.write(_ANSWER)
                self.transport.close()

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_bytes = True, 0  # the next request on the connection
