"""The job managers of one store, as an operator sees them: ``GET /v1/managers`` and the web
UI's manager panel list the leader and the standby.

Two real ``stoker server`` managers (leader candidates) and one ``--api-only`` manager on one
SQLite store, with a token. No job runs, so no driver or Spark starts: the module takes
seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stoker.client import Client
from stoker.server.routes.managers import ManagersView
from stoker.version import __version__ as stoker_version
from tests.e2e.driver_fixtures import cli
from tests.support import wait_for
from tests.support.manager import Manager, stop_all

pytestmark = pytest.mark.timeout(300)

TOKEN = "managers-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SETTLE = 30.0  # both candidates beat and one leads: a second or two, on a loaded machine more


@pytest.fixture
def managers(tmp_path: Path) -> Iterator[list[Manager]]:
    """[candidate, candidate, --api-only] on one store, all up."""
    store = f"sqlite:///{tmp_path / 'store.db'}"
    ms: list[Manager] = []
    try:
        for name, extra in (("one", []), ("two", []), ("api", ["--api-only"])):
            ms.append(
                Manager(
                    name,
                    store,
                    tmp_path / "state",
                    [tmp_path],
                    tmp_path / f"{name}.log",
                    token=TOKEN,
                    extra_args=extra,
                )
            )
        for m in ms:
            m.wait_up()
        yield ms
    finally:
        stop_all(ms)


def _listed(m: Manager) -> dict[str, Any]:
    r = m.http.get("/v1/managers", headers=AUTH)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _settled(m: Manager) -> dict[str, Any] | None:
    """The answer once two managers are listed and one of them leads."""
    got = _listed(m)
    roles = sorted(x["role"] for x in got["managers"])
    return got if roles == ["leader", "standby"] else None


def test_the_leader_and_the_standby_are_listed_and_shown(managers: list[Manager]) -> None:
    one, two, api = managers
    got = wait_for(
        lambda: f"one leader and one standby: {_listed(api)}", lambda: _settled(api), SETTLE
    )
    ManagersView.model_validate(got)  # the answer is what the OpenAPI schema says
    rows = got["managers"]
    # The two candidates, by the address each serves at; never the --api-only one.
    assert {x["address"] for x in rows} == {one.url, two.url}
    assert set(rows[0]) == {
        *("holder", "address", "role", "started_at", "seen_at"),
        *("stoker_version", "schema_version"),  # issue 39 item 5: which stoker each runs
    }
    assert {x["stoker_version"] for x in rows} == {stoker_version}
    assert all(isinstance(x["schema_version"], int) for x in rows)
    assert rows[0]["started_at"] <= rows[1]["started_at"]  # oldest first
    assert all(x["started_at"] <= x["seen_at"] for x in rows)
    leader = next(x for x in rows if x["role"] == "leader")
    standby = next(x for x in rows if x["role"] == "standby")
    assert got["leader"]["holder"] == leader["holder"]
    assert got["leader"]["address"] == leader["address"]
    assert got["leader"]["token"] >= 1
    by_url = {one.url: one, two.url: two}
    assert by_url[leader["address"]].http.get("/healthz").json()["leader"] is True
    assert by_url[standby["address"]].http.get("/healthz").json()["leader"] is False
    # Every manager reads the same store: the same managers and roles from each.
    for m in (one, two):
        assert {(x["holder"], x["role"]) for x in _listed(m)["managers"]} == {
            (x["holder"], x["role"]) for x in rows
        }
    # A read like the others: the token guards it (a read-only token would do).
    r = api.http.get("/v1/managers")
    assert (r.status_code, r.json()["type"]) == (401, "Unauthorized")
    with Client(api.url, token=TOKEN) as client:
        assert {x["holder"] for x in client.managers()["managers"]} == {x["holder"] for x in rows}

    # The manager panel names both, each with its role; this manager's own row is marked.
    for m in (one, two, api):
        r = m.http.get("/ui/f/manager", headers=AUTH)
        assert r.status_code == 200, r.text
        html = r.text
        assert one.url in html and two.url in html and api.url not in html
        assert 'id="manager-facts"' in html and "<caption>" in html
        assert html.count('<th scope="col">') == 5
        assert html.count("<td>leader") == 1 and html.count("<td>standby") == 1
        assert html.count("(this manager)") == (0 if m is api else 1)
        assert f'data-holder="{leader["holder"]}"' in html
        assert f'data-holder="{standby["holder"]}"' in html
    assert api.http.get("/ui/f/manager").status_code == 401

    # `stoker managers` says the same: a line a manager, its role first; --json is the answer.
    out = cli("managers", "--server", api.url, "--token", TOKEN)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert sorted(line.split()[:2] for line in lines) == sorted(
        [x["role"], x["address"]] for x in rows
    )
    assert f"token {got['leader']['token']}" in next(x for x in lines if x.startswith("leader"))
    out = cli("managers", "--server", api.url, "--token", TOKEN, "--json")
    assert out.returncode == 0, out.stderr
    assert {x["holder"] for x in json.loads(out.stdout)["managers"]} == {x["holder"] for x in rows}
    # Refused without the token (and the wrong one is not echoed); no --server is bad input.
    out = cli("managers", "--server", api.url, "--token", "wr0ng-t0ken")
    assert out.returncode == 11 and "wr0ng-t0ken" not in out.stdout + out.stderr
    assert "wrong token" in out.stderr, out.stderr
    out = cli("managers")
    assert out.returncode == 2 and "--server" in out.stderr, out.stderr

    # The leader stops cleanly: gone from the list as soon as it has exited (no waiting for
    # its heartbeat to go stale), and the standby takes over.
    first, second = by_url[leader["address"]], by_url[standby["address"]]
    first.stop()
    assert first.proc.returncode == 0, first.log_tail()
    left = _listed(api)["managers"]
    assert [x["holder"] for x in left] == [standby["holder"]]
    now = wait_for(
        "the standby to lead",
        lambda: (g := _listed(api))["leader"] and g["leader"]["holder"] == standby["holder"] and g,
        SETTLE,
        every=0.2,
    )
    assert now["managers"] == [{**now["managers"][0], "role": "leader"}]
    assert now["leader"]["token"] > got["leader"]["token"]
    assert second.http.get("/healthz").json()["leader"] is True
