"""The autoscaler end to end: a real ``stoker server`` (its scaler ticking while it leads), an
application in driver mode on its own ``standalone`` cluster, a load that steps up and down
through the control plane, and the workers stoker starts and removes for it.

The program (tests/apps/app_scaling.py) reads ``generator(rows_per_second=R)`` and sleeps
``cost_ms`` per row in each partition: work that a second executor really relieves on one
machine. Each epoch's read is split into one partition per core present, so a second
executor halves an epoch's work.

What is checked is the scaler's own record, against the store's timestamps (no wall-clock
bound on the test's speed):
- up: after the rate steps from 2 to 30 rows/s the backlog grows; the policy wants 2
  executors from the first epochs that show it, decides once the wish has held for the
  stabilization time, stoker starts a worker, the driver's executor target brings an
  executor there and the decision turns ``in_use``; later epochs run on 2 executors/cores;
- bounds: no decision leaves [min, max]; the next decision waits out the cooldown;
- down: after the rate falls to 0.5 rows/s the policy decides 1, and a worker is removed
  gracefully (decommissioned) with no failed epoch;
- every decision carries its signals; the output is exactly once; cancel tears the cluster
  down and leaves no process.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.driver_fixtures import (
    SPARK,
    TUNING,
    World,
    describe,
    ids_once,
    note,
    one_manager,
)
from tests.e2e.test_driver_mode import (
    attempt_states,
    left_of,
    settled,
    wait_gone,
    wait_stopped,
)
from tests.support import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

APP_FILE = "app_scaling.py"
STABILIZATION, COOLDOWN, WINDOW = 4.0, 8.0, 12.0
SCALING = (
    f"auto:min=1,max=2,target_utilization=0.6,catch_up=20s,"
    f"stabilization={STABILIZATION:g}s,cooldown={COOLDOWN:g}s"
)
TICK_SLACK = 2.0  # the scaler looks once a second; its tick may just have passed


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with one_manager(
        tmp_path_factory.mktemp("autoscaling"),
        extra_args=["--scaler-window", f"{WINDOW:g}"],
        app_files=(APP_FILE,),
    ) as w:
        yield w


def rescales(world: World, owner: str) -> list[dict[str, Any]]:
    """The owner's rescale records, oldest first."""
    r = world.manager.http.get(f"/v1/jobs/{owner}/rescales", params={"limit": 500})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["owner"] == owner, body
    return list(reversed(body["rescales"]))


def decisions(world: World, owner: str) -> list[dict[str, Any]]:
    return [r for r in rescales(world, owner) if r["kind"] == "decision"]


def rate(world: World, job: str, rows_per_second: float) -> dict[str, Any]:
    """Set the job's rate through the control plane; the event once COMMITTED."""
    p = world.stoker(
        "control", job, "rate-limit", f"{rows_per_second:g}", "--per", "second",
        "--wait", "committed", "--timeout", "300", "--json", timeout=SPARK,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    return dict(json.loads(p.stdout))


def recent_epochs(world: World, job: str) -> list[tuple[int, int | None, int | None]]:
    return [(e.epoch, e.executors, e.cores) for e in world.view.epochs(job)][-5:]


def alive_workers(cluster: dict[str, Any] | None) -> list[str]:
    workers = ((cluster or {}).get("status") or {}).get("workers", [])
    return sorted(w["host"] for w in workers if w.get("state") == "ALIVE")


def test_load_steps_up_and_down_and_the_autoscaler_follows(world: World) -> None:
    t0 = time.monotonic()
    app, job = "auto", "auto.stream"
    out = world.out / app
    p = world.stoker(
        "run", "--driver", str(world.apps / APP_FILE), "--app-id", app, "-d",
        "--cluster", "standalone:workers=1,cores=1,memory=512m", "--scaling", SCALING,
        *TUNING, f"out={out}", "rate=2", "cost_ms=60", "trigger=1s",
    )  # fmt: skip
    assert (p.returncode, p.stdout) == (0, f"{app}\n"), p.stderr
    view = world.app(app)
    assert view["scaling"]["mode"] == "auto" and view["scaling"]["max_executors"] == 2, view
    cluster_name = view["cluster"]["name"]
    wait_for(
        lambda: f"{job} to commit 4 epochs: {world.app(app)}\n{world.logs(app)}",
        lambda: world.view.committed(job) >= 4,
        SPARK,
        every=1.0,
    )
    wait_for(
        lambda: f"one executor reported: {world.view.store.get_job(app).resources}",
        lambda: (world.view.store.get_job(app).resources or {}).get("executors") == 1,
        SPARK,
    )
    note(t0, "the job commits on one executor")
    assert decisions(world, app) == [], "no decision at a steady low load"

    # Up. -----------------------------------------------------------------------------------
    step = rate(world, job, 30)
    step_epoch = int(step["applied_epoch"])
    note(t0, f"rate 30 rows/s from epoch {step_epoch}")
    up = wait_for(
        lambda: f"a decision to 2 executors: {rescales(world, app)}\n{world.manager.log_tail()}",
        lambda: next((d for d in decisions(world, app) if d["to_executors"] == 2), None),
        SPARK,
    )
    note(t0, f"decided {up['from_executors']} -> 2: {up['reason']}")
    sig = up["signals"]
    for key in ("busy", "input_rate", "backlog", "wanted", "held_s", "epochs", "window_s"):
        assert key in sig, sig
    assert up["from_executors"] == 1 and up["policy"] and up["mode"] == "auto"
    # Stabilization: the wish held that long before it was decided; and it was first seen
    # within an epoch or two of the step (the first epochs that read at the new rate).
    assert sig["held_s"] >= STABILIZATION, sig
    epochs = {e.epoch: e for e in world.view.epochs(job)}
    wished_at = float(up["at"]) - float(sig["held_s"])
    third = epochs.get(step_epoch + 3)
    if third is not None and third.committed_at is not None:  # else decided before it even
        assert wished_at <= third.committed_at + TICK_SLACK, (wished_at, third, sig)
    assert float(up["at"]) > float(step["created_at"])

    in_use = wait_for(
        lambda: f"the decision in use: {rescales(world, app)}\n{world.logs(app)}",
        lambda: next(
            (r for r in rescales(world, app) if r["rescale_id"] == up["rescale_id"]
             and r["status"] == "in_use"),
            None,
        ),
        SPARK,
    )  # fmt: skip
    assert in_use["in_use_at"] >= in_use["at"] and in_use["seconds_to_in_use"] >= 0
    assert in_use["workers"]["added"], in_use
    assert len(alive_workers(world.cluster(cluster_name))) == 2
    used = world.view.committed(job)
    wait_for(
        lambda: f"epochs on 2 executors: {recent_epochs(world, job)}",
        lambda: any((e.executors, e.cores) == (2, 2) for e in world.view.epochs(job)[used:]),
        SPARK,
    )
    note(t0, f"in use after {in_use['seconds_to_in_use']:.1f} s; epochs run on 2 executors")

    # Down. ---------------------------------------------------------------------------------
    rate(world, job, 0.5)
    note(t0, "rate 0.5 rows/s")
    down = wait_for(
        lambda: f"a decision back to 1: {rescales(world, app)}\n{world.manager.log_tail()}",
        lambda: next(
            (d for d in decisions(world, app) if d["rescale_id"] > up["rescale_id"]
             and d["to_executors"] == 1),
            None,
        ),
        SPARK,
    )  # fmt: skip
    note(t0, f"decided 2 -> 1: {down['reason']}")
    assert down["from_executors"] == 2
    assert down["signals"]["held_s"] >= STABILIZATION, down["signals"]
    wait_for(
        lambda: f"the scale-down in use: {rescales(world, app)}",
        lambda: any(
            r["rescale_id"] == down["rescale_id"] and r["status"] == "in_use"
            for r in rescales(world, app)
        ),
        SPARK,
    )
    gone = wait_for(
        lambda: f"a worker removed: {rescales(world, app)}\n{world.cluster(cluster_name)}",
        lambda: next(
            (r for r in rescales(world, app) if r["rescale_id"] == down["rescale_id"]
             and r["workers"].get("removed")),
            None,
        ),
        SPARK,
    )  # fmt: skip
    note(t0, f"removed {gone['workers']['removed']}")
    wait_for(
        lambda: f"one worker left: {world.cluster(cluster_name)}",
        lambda: len(alive_workers(world.cluster(cluster_name))) == 1,
        SPARK,
    )

    # The whole history. ---------------------------------------------------------------------
    made = decisions(world, app)
    assert all(1 <= d["to_executors"] <= 2 for d in made), made
    changes = [d for d in made if d["status"] != "superseded"]
    for a, b in itertools.pairwise(changes):
        assert float(b["at"]) - float(a["at"]) >= COOLDOWN, (a, b)
    # No failed epoch: one attempt of the job and of the application all along, every epoch
    # but the one in flight committed, in order.
    assert attempt_states(settled(world.view.attempts(job))) == [(1, "RUNNING")]
    assert attempt_states(settled(world.view.attempts(app))) == [(1, "RUNNING")]
    epochs_now = world.view.epochs(job)
    assert [e.epoch for e in epochs_now] == list(range(len(epochs_now)))
    assert {str(e.state) for e in epochs_now[:-1]} == {"COMMITTED"}

    p = world.stoker("app", "cancel", app, "--wait", timeout=SPARK)
    assert p.returncode == 0, p.stderr + world.logs(app)
    cluster = wait_stopped(world.cluster, cluster_name)
    wait_gone(world, app)
    left = left_of(world.app_folder(app), [], cluster, world.cluster_folder(cluster_name))
    assert left == [], describe(left)
    ids_once(out / "stream")
    note(t0, "canceled; cluster stopped; output exactly once")
