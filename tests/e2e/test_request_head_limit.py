"""A request's head (line and headers) is bounded before anything reads it whole (issue 39
item 9: a 64 MB header was read and parsed before the 401). A real ``stoker server`` with a
token; a client on a raw socket sends a 64 MB header in pieces and watches for the answer
between them: 431 while most of it is unsent, the connection closed, the manager still
serving, and an ordinary request with a few KB of headers still answered."""

from __future__ import annotations

import contextlib
import select
import socket
from pathlib import Path

import httpx

from tests.support.manager import one_manager

TOKEN = "head-limit-test-token-0123456789"
HEADER = 64 * 1024 * 1024
PIECE = 64 * 1024


def _send_long_head(port: int) -> tuple[bytes, int]:
    """(what the server answered, bytes of the head sent before it answered)."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        start = b"GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
        s.sendall(start)
        sent += len(start)
        piece = b"a" * PIECE
        answer = b""
        while sent < HEADER:
            readable, _, _ = select.select([s], [], [], 0)
            if readable:
                break
            try:
                s.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                break  # closed after the answer: read it below
            sent += len(piece)
        else:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                s.sendall(b"\r\n\r\n")  # the head complete: whatever the server says then
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
        return answer, sent


def test_a_64_mb_header_is_431_before_the_token_check_and_unread(tmp_path: Path) -> None:
    with one_manager(tmp_path, "m", token=TOKEN) as m:
        answer, sent = _send_long_head(m.port)
        status = answer.split(b"\r\n", 1)[0]
        assert status == b"HTTP/1.1 431 Request Header Fields Too Large", (status, sent)
        assert b"RequestHeaderFieldsTooLarge" in answer, answer
        # Answered after the limit and a read or two, not after the 64 MB.
        assert sent < 4 * 1024 * 1024, sent
        # Still serving: an ordinary call with a few KB of headers, with and without the token.
        extra = {"X-Note": "n" * 8000}
        r = httpx.get(f"{m.url}/v1/jobs", headers=extra, timeout=30)
        assert r.status_code == 401, r.text
        auth = {**extra, "Authorization": f"Bearer {TOKEN}"}
        r = httpx.get(f"{m.url}/v1/jobs", headers=auth, timeout=30)
        assert r.status_code == 200, r.text
        # A body of 512 KB after a small head is the body limit's business, not this one's.
        body = b"{" + b" " * 512 * 1024 + b"}"
        posted = {**auth, "Content-Type": "application/json"}
        r = httpx.post(f"{m.url}/v1/jobs", headers=posted, content=body, timeout=30)
        assert r.status_code == 422, r.text
