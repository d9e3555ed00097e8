"""Request bodies are limited before anything reads them (issue 22, item 5): over the limit,
declared or sent in chunks, 413 and the route never runs."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from stoker.server.limits import BodyLimit

LIMIT = 1000


def _app(calls: list[int]) -> FastAPI:
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        body = await request.body()
        calls.append(len(body))
        return {"n": len(body)}

    app.add_middleware(BodyLimit, limit=LIMIT)
    return app


def _chunks(n: int, size: int = 100) -> Iterator[bytes]:
    for _ in range(n):
        yield b"x" * size


def test_a_body_over_the_limit_is_413_and_never_reaches_the_route() -> None:
    calls: list[int] = []
    with TestClient(_app(calls)) as client:
        assert client.post("/echo", content=b"x" * LIMIT).json() == {"n": LIMIT}
        r = client.post("/echo", content=b"x" * (LIMIT + 1))  # declared: refused unread
        assert (r.status_code, r.json()["type"]) == (413, "PayloadTooLarge"), r.text
        assert r.json()["error"] == (
            f"request body over {LIMIT} bytes: nothing read, nothing changed"
        )
        r = client.post("/echo", content=_chunks(50))  # chunked, no length: cut off
        assert r.status_code == 413, r.text
        assert client.post("/echo", content=_chunks(5)).json() == {"n": 500}
    assert calls == [LIMIT, 500]
