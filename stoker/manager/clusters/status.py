"""What a standalone master says about its cluster (its web UI's ``/json/``)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from stoker.errors import ClusterError

HTTP_TIMEOUT = 3.0
# The master is on loopback: never through a proxy the environment names.
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def master_status(web_url: str, timeout: float = HTTP_TIMEOUT) -> dict[str, Any]:
    """The master's ``/json/``: ``workers`` (id, host, port, state, cores, coresused, memory,
    ...), ``activeapps``, ``completedapps``, ``aliveworkers``, ``status``. ``timeout``: the
    web UI's shorter one keeps a page quick when a master hangs."""
    try:
        with HTTP.open(f"{web_url}/json/", timeout=timeout) as answer:
            data = json.load(answer)
    except (OSError, ValueError) as exc:
        raise ClusterError(f"the master at {web_url} does not answer: {exc}") from exc
    if not isinstance(data, dict):
        raise ClusterError(f"the master at {web_url} answered {type(data).__name__}, not JSON")
    return data


def try_status(web_url: str) -> dict[str, Any] | None:
    try:
        return master_status(web_url)
    except ClusterError:
        return None


def alive_addresses(status: dict[str, Any] | None) -> set[str]:
    """Hosts of the workers the master lists ALIVE."""
    workers = (status or {}).get("workers", [])
    return {str(w.get("host")) for w in workers if w.get("state") == "ALIVE"}
