"""The read-only token cannot hold every event stream (issue 39 item 9: it could take all 64,
and the full token's clients got 429). A real ``stoker server`` with both tokens; streams
opened on raw connections and held: the read-only token gets ``MAX_READ_STREAMS`` of them
and then 429, the full token still gets its stream, and a read-only stream closed gives its
place back."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import pytest

from stoker.server.events import MAX_READ_STREAMS, MAX_STREAMS
from tests.support import wait_for
from tests.support.manager import one_manager

pytestmark = pytest.mark.timeout(300)

TOKEN = "streams-full-token-0123456789"
READ_TOKEN = "streams-read-token-0123456789"


def _open(port: int, token: str) -> tuple[int, socket.socket]:
    """(status, the connection, left open) of ``GET /v1/events`` with ``token``."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(
        f"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk
    return int(head.split(b" ", 2)[1]), s


def test_the_read_only_token_holds_at_most_half_of_the_streams(tmp_path: Path) -> None:
    assert 0 < MAX_READ_STREAMS < MAX_STREAMS
    held: list[socket.socket] = []
    try:
        with one_manager(tmp_path, "m", token=TOKEN, read_token=READ_TOKEN) as m:
            for _ in range(MAX_READ_STREAMS):
                status, conn = _open(m.port, READ_TOKEN)
                held.append(conn)
                assert status == 200, status
            status, conn = _open(m.port, READ_TOKEN)
            conn.close()
            assert status == 429, status
            # The full token's clients still get theirs.
            status, conn = _open(m.port, TOKEN)
            held.append(conn)
            assert status == 200, status
            # A read-only stream closed: its place is given back once the server sees it go.
            held.pop(0).close()

            def reopened() -> bool:
                status, conn = _open(m.port, READ_TOKEN)
                if status == 200:
                    held.append(conn)
                    return True
                conn.close()
                return False

            wait_for("a read-only stream's place to come back", reopened, 30, every=0.5)
    finally:
        for c in held:
            with contextlib.suppress(OSError):
                c.close()
