"""Who may reach the API from a browser: the Host allow-list and the same-origin rule for
calls that change state.

A web page the operator visits can make the browser send requests to the manager: simple
requests (a form post, a ``text/plain`` or body-less ``fetch``) need no CORS preflight, and
after DNS rebinding a foreign name resolves to 127.0.0.1, so the page even reads answers. The
token stops both (a page cannot know it), but a manager run without one
(``--insecure-no-token``) and the token check itself deserve a second wall:

- **Host**: a request whose ``Host`` names no host this manager answers to (loopback names,
  the address it binds, ``--allow-host`` names) is refused, 400: a rebound name never gets an
  answer. ``/healthz`` and ``/readyz`` stay reachable for probes that address the manager by
  an IP.
- **Origin**: a call that changes state (any method but GET, HEAD, OPTIONS) sent with an
  ``Origin`` (or ``Sec-Fetch-Site: cross-site``) of another origin than the manager's own is
  refused, 403. Browsers send ``Origin`` with every such request, form posts included;
  the CLI and other programs send none.
- **Content type**: such a call with a body must send ``Content-Type: application/json``,
  else 415: no form or ``text/plain`` body reaches a route.

Checked before the token and before routing, in front of everything but the body limit.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from stoker import procs

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
PROBES = frozenset({"/healthz", "/readyz"})
_READS = frozenset({"GET", "HEAD", "OPTIONS"})
_WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def host_name(host_header: str) -> str:
    """The host part of a ``Host`` header value (``[::1]:8081`` -> ``::1``), lower case."""
    text = host_header.strip().lower()
    if text.startswith("["):
        return text[1 : text.find("]")] if "]" in text else text
    if text.count(":") == 1:
        return text.split(":", 1)[0]
    return text


def allowed_hosts(bound: str, extra: Iterable[str]) -> frozenset[str]:
    """The names a manager bound to ``bound`` answers to: loopback names, ``bound`` itself
    (unless a wildcard), and ``extra`` (``--allow-host``)."""
    names = set(LOOPBACK_NAMES)
    if host_name(bound) not in _WILDCARDS:
        names.add(host_name(bound))
    names.update(host_name(h) for h in extra if h.strip())
    return frozenset(names)


def is_loopback(host: str) -> bool:
    """Whether a ``--host`` value binds loopback only."""
    return procs.is_loopback(host_name(host))


def _refuse(status: int, kind: str, error: str) -> JSONResponse:
    return JSONResponse({"error": error, "type": kind}, status_code=status)


class RequestGuard:
    """The ``http`` middleware of the three rules above; ``hosts`` None: no Host check (an
    app made in a test, reached through a test client's fixed name)."""

    def __init__(self, hosts: frozenset[str] | None) -> None:
        self.hosts = hosts

    async def __call__(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        host = request.headers.get("host", "")
        if (
            self.hosts is not None
            and request.url.path not in PROBES
            and host_name(host) not in self.hosts
        ):
            return _refuse(
                400,
                "BadHost",
                f"Host {host[:200]!r} is not a name this manager answers to (a page after DNS "
                "rebinding would use one); start it with --allow-host NAME to answer to it",
            )
        if request.method not in _READS:
            refusal = self._check_write(request, host)
            if refusal is not None:
                return refusal
        return await call_next(request)

    @staticmethod
    def _check_write(request: Request, host: str) -> Response | None:
        origin = request.headers.get("origin")
        if origin is not None and origin != "null":
            theirs = urlsplit(origin).netloc.lower()
            if theirs != host.strip().lower():
                return _refuse(
                    403,
                    "CrossOrigin",
                    f"a call that changes state came from another origin ({origin[:200]!r}): "
                    "refused (a web page may not drive the job manager)",
                )
        elif origin == "null" or request.headers.get("sec-fetch-site") == "cross-site":
            return _refuse(
                403,
                "CrossOrigin",
                "a call that changes state came from a page of another site: refused",
            )
        has_body = request.headers.get("content-length", "0") not in ("0", "") or (
            "transfer-encoding" in request.headers
        )
        ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if has_body and ctype != "application/json":
            return _refuse(
                415,
                "UnsupportedMediaType",
                "a call that changes state takes a JSON body: send 'Content-Type: "
                f"application/json' (got {ctype[:100] or 'none'!r})",
            )
        return None


__all__ = ["LOOPBACK_NAMES", "RequestGuard", "allowed_hosts", "host_name", "is_loopback"]
