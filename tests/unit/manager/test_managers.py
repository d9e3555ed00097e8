"""Who leads and who stands by, as GET /v1/managers and the web UI say it: the labelling
alone, then supervisors on a real SQLite store recording and forgetting their heartbeats."""

from __future__ import annotations

from pathlib import Path

from stoker.clock import ManualClock
from stoker.manager import JobManager, Supervisor, SupervisorConfig
from stoker.manager.managers import managers_view
from stoker.store import LeaderLease, ManagerRecord, open_store

NOW = 1_000.0
A = ManagerRecord("manager-a", "http://a:1", started_at=900.0, seen_at=999.0)
B = ManagerRecord("manager-b", "http://b:1", started_at=950.0, seen_at=999.5)


def _roles(view: dict[str, object]) -> list[tuple[str, str]]:
    return [(m["holder"], m["role"]) for m in view["managers"]]  # type: ignore[attr-defined,index]


def test_the_holder_of_the_live_lease_is_the_leader_every_other_a_standby() -> None:
    lease = LeaderLease("manager-b", "http://b:1", token=7, expires_at=NOW + 2)
    view = managers_view(lease, [A, B], NOW)
    assert _roles(view) == [("manager-a", "standby"), ("manager-b", "leader")]
    assert view["leader"] == {
        "holder": "manager-b",
        "address": "http://b:1",
        "token": 7,
        "expires_at": NOW + 2,
    }
    assert view["managers"][0] == {  # type: ignore[index]
        "holder": "manager-a",
        "address": "http://a:1",
        "started_at": 900.0,
        "seen_at": 999.0,
        "stoker_version": None,  # a manager of a stoker before its rows named it
        "schema_version": None,
        "role": "standby",
    }


def test_a_lapsed_lease_names_no_leader_though_its_holder_is_listed() -> None:
    for expires_at in (NOW, NOW - 5):  # expired exactly now, or a while ago
        lease = LeaderLease("manager-a", "http://a:1", token=3, expires_at=expires_at)
        view = managers_view(lease, [A, B], NOW)
        assert view["leader"] is None
        assert _roles(view) == [("manager-a", "standby"), ("manager-b", "standby")]


def test_no_lease_yet_and_a_leader_without_a_heartbeat() -> None:
    assert managers_view(None, [A], NOW) == {
        "leader": None,
        "managers": [{**A.to_dict(), "role": "standby"}],
    }
    # A leader whose heartbeat is not listed (stale, or a manager of an older version):
    # named as the leader, and every listed manager is a standby.
    lease = LeaderLease("manager-z", "http://z:1", token=1, expires_at=NOW + 1)
    view = managers_view(lease, [A, B], NOW)
    assert view["leader"]["holder"] == "manager-z"  # type: ignore[index]
    assert _roles(view) == [("manager-a", "standby"), ("manager-b", "standby")]
    assert managers_view(None, [], NOW) == {"leader": None, "managers": []}


def test_supervisors_beat_leader_or_not_and_forget_themselves_on_a_clean_stop(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    url = f"sqlite:///{tmp_path / 'store.db'}"
    stores = [open_store(url, clock) for _ in range(3)]
    a = Supervisor(stores[0], SupervisorConfig(tmp_path, url, address="http://a:1"))
    b = Supervisor(stores[1], SupervisorConfig(tmp_path, url, address="http://b:1"))
    manager = JobManager(stores[2], tmp_path, [tmp_path], leader_ttl=a.cfg.leader_ttl)
    try:
        a.step()
        clock.advance(0.5)
        b.step()
        assert a.is_leader and not b.is_leader
        view = manager.managers()
        assert [(m["address"], m["role"]) for m in view["managers"]] == [
            ("http://a:1", "leader"),
            ("http://b:1", "standby"),
        ]
        assert view["leader"]["holder"] == a.cfg.holder
        # a dies without a word: its lease lapses and b takes over; a's heartbeat goes
        # stale after three leader TTLs and a is no longer listed.
        clock.advance(a.cfg.leader_ttl + 0.1)
        b.lease._beat = float("-inf")  # the next step beats (its throttle runs on the real clock)
        b.step()
        assert b.is_leader
        assert [m["role"] for m in manager.managers()["managers"]] == ["standby", "leader"]
        clock.advance(3 * a.cfg.leader_ttl)
        b.lease._beat = float("-inf")
        b.step()
        assert [m["holder"] for m in manager.managers()["managers"]] == [b.cfg.holder]
        # b stops cleanly: lease resigned and heartbeat gone at once.
        b.stop(resign=True)
        assert manager.managers() == {"leader": None, "managers": []}
        # A stop that leaves the store as a crash would leaves the heartbeat too.
        c = Supervisor(stores[1], SupervisorConfig(tmp_path, url, address="http://c:1"))
        c.step()
        c.stop(resign=False)
        assert [m["address"] for m in manager.managers()["managers"]] == ["http://c:1"]
    finally:
        manager.close()
        for s in stores:
            s.close()
