"""Who the job managers of a store are: the leader and the standbys, as people see them.

Each supervisor leaves a heartbeat in the store (``Store.heartbeat_manager``); the leader is
whoever holds the leader lease now. The heartbeats only describe: the lease alone decides.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stoker.store import LeaderLease, ManagerRecord, Store

# A manager counts as present while its heartbeat is younger than this many leader TTLs: a
# supervisor beats every third of a TTL, so a few missed beats (a slow store) do not hide it.
FRESH_TTLS = 3.0


def managers_view(
    lease: LeaderLease | None, managers: Iterable[ManagerRecord], now: float
) -> dict[str, Any]:
    """``{"leader": ..., "managers": [...]}`` as ``GET /v1/managers`` answers it.

    ``leader``: the lease while it is live at ``now`` (holder, address, token, expires_at),
    else None (no manager leads until one takes it). Each of ``managers`` (in the order given)
    gets ``role``: ``leader`` for the lease's live holder, ``standby`` for every other.
    """
    live = lease if lease is not None and lease.expires_at > now else None
    return {
        "leader": None
        if live is None
        else {
            "holder": live.holder,
            "address": live.address,
            "token": live.token,
            "expires_at": live.expires_at,
        },
        "managers": [
            {
                **m.to_dict(),
                "role": "leader" if live is not None and m.holder == live.holder else "standby",
            }
            for m in managers
        ],
    }


def list_managers(store: Store, leader_ttl: float) -> dict[str, Any]:
    """The managers of ``store`` seen within ``FRESH_TTLS`` leader TTLs, oldest first, each
    with its role (:func:`managers_view`)."""
    records = store.list_managers(FRESH_TTLS * leader_ttl)
    lease = store.get_leader()  # after the list: a leader that just took over is named as such
    return managers_view(lease, records, store.clock.now())
