"""The control commands of the ``stoker`` CLI, as a user runs them (subprocesses), against a
real ``stoker server`` (``--server``) and against a local job's store (``--state-dir``).

No Spark: jobs are made directly in the store with a pipeline's spec; no driver applies the
events, so they stay PENDING, and a ``--wait`` runs into its timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stoker.store import open_store
from stoker.types import JobState, job_id
from tests.support import REPO, stoker_cmd
from tests.support.manager import Manager, stop_all

pytestmark = [pytest.mark.timeout(600), pytest.mark.scenario]

TOKEN = "cli-ctl-t0ken"
SPEC: dict[str, Any] = {
    "name": "x",
    "sources": ["generator(rows_per_second=10)", "files(path='/in')"],
    "sinks": ["files('/out')"],
    "config": {"min_amount": 10.0, "tag": "a", "rules": None},
    "events": ["reload_rules"],
}


def _make_job(url: str, name: str, state: JobState | None = None) -> None:
    st = open_store(url)
    try:
        st.create_job(job_id(name), name, {**SPEC, "name": name}, dict(SPEC["config"]))
        if state is not None:
            st.set_job_state(job_id(name), state)
    finally:
        st.close()


def _stored(url: str, name: str) -> list[Any]:
    st = open_store(url)
    try:
        return st.list_controls(job_id(name), limit=1000)
    finally:
        st.close()


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Manager]:
    root = tmp_path_factory.mktemp("ctlcli")
    (root / "allowed").mkdir()
    m = Manager(
        "ctl-cli",
        f"sqlite:///{root / 'store.db'}",
        root / "state",
        [root / "allowed"],
        root / "manager.log",
        token=TOKEN,
        extra_args=["--api-only"],
    )
    try:
        m.wait_up()
        yield m
    finally:
        stop_all([m])


def stoker(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STOKER_")}
    return subprocess.run(
        stoker_cmd(*args),
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _ok(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_every_command_against_a_server(manager: Manager) -> None:
    _make_job(manager.store, "orders", JobState.RUNNING)
    env = {"STOKER_SERVER": manager.url, "STOKER_TOKEN": TOKEN}
    lines = [
        _ok(stoker("control", "orders", "set", "min_amount=20", "tag=x y", env=env)),
        _ok(stoker("control", "orders", "set", "rules=[1, 2]", "--unset", "tag", env=env)),
        _ok(stoker("control", "orders", "rate-limit", "500", env=env)),
        _ok(stoker("control", "orders", "rate-limit", "3", "--per", "files", env=env)),
        _ok(stoker("control", "orders", "rate-limit", "none", env=env)),
        _ok(stoker("control", "orders", "log-level", "debug", "--logger", "my.mod", env=env)),
        _ok(stoker("control", "orders", "trigger", "2s", env=env)),
        _ok(stoker("control", "orders", "event", "reload_rules", "--payload", '{"a": 1}', env=env)),
        _ok(stoker("pause", "orders", env=env)),
        _ok(stoker("resume", "orders", env=env)),
        _ok(stoker("checkpoint", "orders", "--no-wait", env=env)),
        _ok(stoker("savepoint", "orders", env=env)),
    ]
    kinds = [
        "config",
        "config",
        "rate_limit",
        "rate_limit",
        "rate_limit",
        "log_level",
        "trigger",
        "event",
        "pause",
        "resume",
        "checkpoint",
        "savepoint",
    ]
    stored = list(reversed(_stored(manager.store, "orders")))
    assert [e.kind for e in stored] == kinds
    # One line each: job, kind, id, version, status.
    for out, ev in zip(lines, stored, strict=True):
        assert out == f"orders: {ev.kind} {ev.control_id} version {ev.version} PENDING\n"
        assert ev.sender == "operator"
    assert stored[0].body == {"set": {"min_amount": 20, "tag": "x y"}, "unset": []}
    assert stored[1].body == {"set": {"rules": [1, 2]}, "unset": ["tag"]}
    assert [e.body for e in stored[2:5]] == [
        {"rows_per_second": 500.0},
        {"max_files_per_epoch": 3},
        {"rows_per_second": None},
    ]
    assert stored[5].body == {"level": "DEBUG", "logger": "my.mod"}
    assert stored[7].body == {"name": "reload_rules", "payload": {"a": 1}}
    # --json: the event's view, as the API answers it.
    view = json.loads(
        _ok(stoker("control", "orders", "status", stored[0].control_id, "--json", env=env))
    )
    assert (view["control_id"], view["kind"], view["status"]) == (
        stored[0].control_id,
        "config",
        "PENDING",
    )
    history = _ok(stoker("control", "orders", "history", "--limit", "2", "--json", env=env))
    assert [json.loads(x)["kind"] for x in history.splitlines()] == ["savepoint", "checkpoint"]
    cfg = json.loads(_ok(stoker("config", "orders", "--json", env=env)))
    assert cfg["config"] == {"min_amount": 20.0, "tag": "a", "rules": [1, 2]}
    assert (cfg["paused"], cfg["trigger_s"], cfg["pending"]) == (False, 2.0, 12)
    text = _ok(stoker("config", "orders", env=env))
    assert "trigger    2s" in text and "log level  my.mod=DEBUG" in text
    # A pause shows in the job's status.
    _ok(stoker("pause", "orders", env=env))
    assert "state      PAUSED" in _ok(stoker("status", "orders", env=env))
    # Without --wait a savepoint says how to get its folder (issue 23 item 5), and that works.
    p = stoker("savepoint", "orders", env=env)
    sp = list(reversed(_stored(manager.store, "orders")))[-1]
    hint = f"its folder, once written: stoker control orders status {sp.control_id}"
    assert p.returncode == 0 and p.stderr.startswith(hint), p.stderr
    shown = stoker("control", "orders", "status", sp.control_id, env=env)
    assert _ok(shown).startswith(f"orders: savepoint {sp.control_id} ")


def test_bad_input_and_refusals_against_a_server(manager: Manager) -> None:
    _make_job(manager.store, "strict")
    env = {"STOKER_SERVER": manager.url, "STOKER_TOKEN": TOKEN}
    p = stoker("control", "strict", "set", "max_amount=1", env=env)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == (
        "stoker: error: config.max_amount: is not a declared config key "
        "(declared: min_amount, rules, tag)\n"
    )
    p = stoker("control", "strict", "set", "min_amount", env=env)
    assert (p.returncode, p.stderr) == (
        2,
        "stoker: error: set: expects KEY=VALUE, got 'min_amount'\n",
    )
    p = stoker("control", "strict", "rate-limit", "--", "-5", env=env)
    assert p.returncode == 2 and "rows_per_second: must be > 0" in p.stderr
    p = stoker("control", "strict", "event", "reload_rules", "--payload", "{oops", env=env)
    assert p.returncode == 2 and "--payload: is not JSON" in p.stderr
    p = stoker("savepoint", "strict", "--dir", "/etc/sp", env=env)
    assert p.returncode == 2 and "dir: '/etc/sp' lies outside the allowed folders" in p.stderr
    # Issue 23 item 7: what is asked holds already (a job that is not paused, resumed):
    # exit 0 with a note, not 9; nothing is stored.
    p = stoker("resume", "strict", env=env)
    assert (p.returncode, p.stderr) == (0, "stoker: job 'strict' is not paused: nothing to do\n")
    p = stoker("resume", "strict", "--json", env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {
        "job_id": "strict",
        "kind": "resume",
        "note": "not paused: nothing to do",
    }
    p = stoker("pause", "nope", env=env)
    assert p.returncode == 3 and "'nope' not found" in p.stderr
    p = stoker("control", "strict", "status", "abc", env=env)
    assert p.returncode == 3 and "has no control event 'abc'" in p.stderr
    p = stoker("pause", "strict", env={"STOKER_SERVER": manager.url})
    assert p.returncode == 11 and "missing token" in p.stderr
    assert _stored(manager.store, "strict") == []
    # A wait that no driver ends: the event is stored, the wait says how far it got.
    p = stoker("checkpoint", "strict", "--timeout", "0.5", env=env)
    assert p.returncode == 1, p.stderr
    (ev,) = _stored(manager.store, "strict")
    assert p.stderr.splitlines() == [
        f"strict: checkpoint {ev.control_id} version 1 PENDING",
        f"stoker: error: control event {ev.control_id} of job 'strict' is still PENDING after "
        "0.5 s (waiting until committed)",
    ]


def test_every_command_against_a_local_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "orders-state"
    state.mkdir()
    url = f"sqlite:///{state / 'store.db'}"
    _make_job(url, "orders")
    d = ("--state-dir", str(state))
    out = _ok(stoker("control", "orders", "set", "min_amount=30", *d))
    ev = _stored(url, "orders")[0]
    assert out == f"orders: config {ev.control_id} version 1 PENDING\n"
    assert ev.sender.startswith("local:") and ev.body["set"] == {"min_amount": 30.0}
    view = json.loads(_ok(stoker("control", "orders", "trigger", "250ms", "--json", *d)))
    assert (view["kind"], view["version"], view["body"]["seconds"]) == ("trigger", 2, 0.25)
    # Issue 23 item 7: status shows the trigger in force, as `stoker config` does.
    status = _ok(stoker("status", "orders", *d)).splitlines()
    assert "trigger    0.25s" in status, status
    assert "trigger    0.25s (set by control)" in _ok(stoker("config", "orders", *d)).splitlines()
    assert json.loads(_ok(stoker("status", "orders", "--json", *d)))["trigger_s"] == 0.25
    _ok(stoker("pause", "orders", *d))
    # Paused already: done, with a note (exit 0), and nothing stored (issue 23 item 7).
    again = stoker("pause", "orders", *d)
    assert (again.returncode, again.stdout) == (0, ""), again.stderr
    assert again.stderr == "stoker: job 'orders' is paused already: nothing to do\n"
    _ok(stoker("resume", "orders", *d))
    _ok(stoker("control", "orders", "event", "reload_rules", *d))
    # A relative savepoint folder is the caller's: made absolute before it is stored.
    _ok(stoker("savepoint", "orders", "--dir", "sp", "--stop", *d, cwd=tmp_path))
    sp = _stored(url, "orders")[0]
    assert sp.body == {"stop": True, "dir": str(tmp_path / "sp")}
    lines = _ok(stoker("control", "orders", "history", *d)).splitlines()
    assert [x.split()[1] for x in lines] == [
        "savepoint",
        "event",
        "resume",
        "pause",
        "trigger",
        "config",
    ]
    cfg = json.loads(_ok(stoker("config", "orders", "--json", *d)))
    assert (cfg["version"], cfg["config"]["min_amount"], cfg["pending"]) == (6, 30.0, 6)
    # A bad key: the same clear error as over REST, and nothing stored.
    p = stoker("control", "orders", "set", "nope=1", *d)
    assert (p.returncode, p.stderr) == (
        2,
        "stoker: error: config.nope: is not a declared config key "
        "(declared: min_amount, rules, tag)\n",
    )
    p = stoker("control", "orders", "rate-limit", "10", "--per", "bogus", *d)
    assert p.returncode == 2 and "--per" in p.stderr  # click's own usage error
    p = stoker("pause", "other", "--state-dir", str(tmp_path / "none"))
    assert p.returncode == 3 and "no store at" in p.stderr
    assert len(_stored(url, "orders")) == 6
    # The job ended: refused, exit code of JobTerminal.
    st = open_store(url)
    try:
        st.set_job_state(job_id("orders"), JobState.CANCELED)
    finally:
        st.close()
    p = stoker("pause", "orders", *d)
    assert p.returncode == 5 and "has ended in state CANCELED" in p.stderr


def test_waiting_follows_the_event_to_its_end(manager: Manager) -> None:
    """The client's wait (what ``--wait`` uses) against events the store moves on, as the
    runtime would: a savepoint applied then committed with its folder, a rejected event."""
    from stoker.client import Client
    from stoker.errors import ControlConflict
    from stoker.types import ControlStatus, Epoch

    _make_job(manager.store, "waited", JobState.RUNNING)
    env = {"STOKER_SERVER": manager.url, "STOKER_TOKEN": TOKEN}
    with Client(manager.url, TOKEN) as c:
        sp = c.savepoint("waited")
        assert (sp["kind"], sp["status"], sp["body"]) == (
            "savepoint",
            "PENDING",
            {"stop": False, "dir": None},
        )
        with pytest.raises(TimeoutError, match=r"still PENDING after 0\.2 s"):
            c.wait_control("waited", sp["control_id"], until="applied", timeout=0.2)
        st = open_store(manager.store)
        try:
            result = {"path": "/srv/sp/savepoint-4", "epoch": 4, "stop": False}
            jid = job_id("waited")
            st.finish_control(jid, sp["control_id"], ControlStatus.APPLIED, Epoch(4), result)
            got = c.wait_control("waited", sp["control_id"], until="applied", timeout=5)
            assert (got["status"], got["applied_epoch"]) == ("APPLIED", 4)
            with pytest.raises(TimeoutError, match="still APPLIED"):
                c.wait_control("waited", sp["control_id"], until="committed", timeout=0.2)
            st.finish_control(jid, sp["control_id"], ControlStatus.COMMITTED, Epoch(4), result)
            got = c.wait_control("waited", sp["control_id"], until="committed", timeout=5)
            assert (got["status"], got["result"]) == ("COMMITTED", result)
            assert c.savepoints("waited")["events"] == [got]
            ev = c.control("waited", {"kind": "event", "name": "reload_rules"})
            st.reject_control(jid, ev["control_id"], "handler raised ValueError: bad rules")
        finally:
            st.close()
        with pytest.raises(ControlConflict, match="was rejected: handler raised ValueError"):
            c.wait_control("waited", ev["control_id"], timeout=5)
    out = _ok(stoker("control", "waited", "status", sp["control_id"], env=env))
    assert out == (
        f"waited: savepoint {sp['control_id']} version 1 COMMITTED at epoch 4, "
        "savepoint /srv/sp/savepoint-4\n"
    )
    out = _ok(stoker("control", "waited", "status", ev["control_id"], env=env))
    assert out == (
        f"waited: event {ev['control_id']} version 2 REJECTED: handler raised ValueError: "
        "bad rules\n"
    )
    p = stoker("control", "waited", "history", "--kind", "event", env=env)
    assert _ok(p) == out
