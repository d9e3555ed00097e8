"""Group commit of job creation (CreateBatcher) and the async submit path, on a real SQLite
store."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from stoker.errors import JobConflict
from stoker.manager import JobManager
from stoker.manager.batch import CreateBatcher
from stoker.store import open_store
from stoker.types import job_id

SPEC = {"kind": "app", "entrypoint": "/x/app.py", "args": [], "conf": {}}


def test_concurrent_creates_share_transactions_and_each_id_is_created_once(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "store.db")
    batcher = CreateBatcher(store)
    gate = threading.Barrier(48)
    futures: list = [None] * 48

    def one(i: int) -> None:
        gate.wait()
        # 16 ids, each submitted three times
        futures[i] = batcher.create(job_id(f"j{i % 16}"), f"n{i}", {"i": i}, {})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(48)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results = [f.result(timeout=30) for f in futures]
    batcher.close()

    for k in range(16):
        mine = [results[i] for i in range(48) if i % 16 == k]
        assert sum(created for _, created in mine) == 1
        assert [rec for rec, _ in mine] == [store.get_job(job_id(f"j{k}"))] * 3
    assert 1 <= batcher.batches < 48
    assert len(store.list_jobs()) == 16


def test_one_bad_creation_fails_alone_and_the_rest_of_its_batch_commits(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store.db")
    batcher = CreateBatcher(store)
    # Another process's writer holds the lock: the first creation waits for it, and the next
    # three queue up behind it and go as one batch.
    other = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    first = batcher.create(job_id("first"), "f", SPEC, {})
    deadline = time.monotonic() + 30
    while not first.running():  # taken by the writer thread, which now waits for the lock
        assert time.monotonic() < deadline
        time.sleep(0.001)
    futures = [
        batcher.create(job_id("good-1"), "g1", SPEC, {}),
        batcher.create(job_id("bad"), "b", {"oops": {1, 2}}, {}),  # a set is not JSON
        batcher.create(job_id("good-2"), "g2", SPEC, {}),
    ]
    other.execute("COMMIT")
    other.close()

    assert first.result(timeout=30)[1] is True
    assert futures[0].result(timeout=30)[1] is True
    with pytest.raises(TypeError):
        futures[1].result(timeout=30)
    assert futures[2].result(timeout=30)[1] is True
    batcher.close()
    assert batcher.batches == 1  # the first; the failed batch was retried one by one
    assert sorted(j.job_id for j in store.list_jobs()) == ["first", "good-1", "good-2"]


def test_submit_async_answers_like_submit(tmp_path: Path) -> None:
    apps = tmp_path / "apps"
    apps.mkdir()
    app = apps / "app.py"
    app.write_text("from stoker import Pipeline\n")
    store = open_store(tmp_path / "store.db")
    manager = JobManager(store, tmp_path, [apps])

    async def burst() -> list:
        calls = [manager.submit_async("same", str(app)) for _ in range(20)]
        calls.append(manager.submit_async("other", str(app), args=["x"]))
        return await asyncio.gather(*calls)

    results = asyncio.run(burst())

    assert sorted(r.outcome for r in results[:20]) == ["created"] + ["duplicate"] * 19
    assert results[20].outcome == "created"
    assert manager.submit("same", str(app)).outcome == "duplicate"
    with pytest.raises(JobConflict):
        asyncio.run(manager.submit_async("same", str(app), args=["different"]))
    manager.close()
    assert len(store.list_jobs()) == 2
