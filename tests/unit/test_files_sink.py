"""The files sink's ownership of its output folder, without Spark: staged parts made by hand.

Real folders, real processes for the race; ``prepare`` (the Spark write) is covered by
tests/integration/test_files_ownership.py.
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from stoker.errors import SinkError
from stoker.sinks._files_owner import MARKER, claim_folder, read_claim
from stoker.sinks.base import SinkOwner
from stoker.sinks.files import FilesSink
from stoker.types import AttemptNo, Epoch, JobId

A = SinkOwner(JobId("job-a"), "aaaa1111")
B = SinkOwner(JobId("job-b"), "bbbb2222")
A_AGAIN = SinkOwner(JobId("job-a"), "cccc3333")  # same id, another store: another job record
E0, E1, E2 = Epoch(0), Epoch(1), Epoch(2)
ONE, TWO = AttemptNo(1), AttemptNo(2)


def _sink(out: Path) -> FilesSink:
    return FilesSink(path=str(out))


def _opened(out: Path, owner: SinkOwner, state: Path) -> FilesSink:
    sink = _sink(out)
    sink.validate(owner)
    sink.open(owner, state)
    return sink


def _stage(sink: FilesSink, name: str, rows: str = "x") -> Path:
    """A staged part as Spark's writer leaves it: a folder with a data file."""
    folder = sink.staging / name
    folder.mkdir(parents=True)
    (folder / "part-0.json").write_text(rows)
    return folder


def _manifest(folder: Path, **fields: Any) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "_manifest.json").write_text(json.dumps(fields))


def _tree(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*"))


# claiming --------------------------------------------------------------------------------------


def test_open_claims_a_fresh_folder_and_validate_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = _sink(out)
    sink.validate(A)
    assert not out.exists()

    sink.open(A, tmp_path / "state")

    claim = read_claim(out)
    assert claim is not None
    assert (claim.job_id, claim.uid, claim.adopted) == ("job-a", "aaaa1111", False)
    assert claim.claimed_at > 0 and claim.pid > 0
    assert _tree(out) == ["_staging", MARKER]
    # The same job opens it again (a restart, a new attempt): still its own, marker unchanged.
    before = (out / MARKER).read_text()
    _opened(out, A, tmp_path / "state")
    assert (out / MARKER).read_text() == before


def test_another_job_is_refused_at_validate_naming_the_owner(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _opened(out, A, tmp_path / "a")
    before = _tree(out)

    with pytest.raises(SinkError) as err:
        _sink(out).validate(B)

    msg = str(err.value)
    assert msg.startswith("files.path: output folder ")
    assert "belongs to job 'job-a' (uid aaaa1111), which claimed it at " in msg
    assert "UTC" in msg
    assert "job 'job-b' cannot write to it: choose another path, or delete the folder" in msg
    # open refuses too (a caller that skipped validate), and nothing changed.
    with pytest.raises(SinkError, match="belongs to job 'job-a'"):
        _sink(out).open(B, tmp_path / "b")
    assert _tree(out) == before


def test_the_same_job_id_with_another_uid_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _opened(out, A, tmp_path / "a")

    with pytest.raises(SinkError) as err:
        _sink(out).validate(A_AGAIN)

    msg = str(err.value)
    assert "belongs to an earlier job of the same id: job 'job-a' (uid aaaa1111)" in msg
    assert "this job (uid cccc3333) is not that job's record" in msg
    assert "choose another path, or delete the folder" in msg


def test_an_unreadable_marker_refuses_everyone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / MARKER).write_text("{not json")
    with pytest.raises(SinkError, match=r"owner marker .* cannot be read"):
        _sink(out).validate(A)


def test_a_uid_unsafe_in_a_folder_name_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(SinkError, match=r"files.owner: job uid 'a/b' is not 1-64 of"):
        _sink(tmp_path / "out").validate(SinkOwner(JobId("j"), "a/b"))
    assert not (tmp_path / "out").exists()


def _claim_in_child(out: str, n: int, start: Any, results: Any) -> None:
    owner = SinkOwner(JobId(f"job-{n}"), f"uid{n}")
    sink = FilesSink(path=out)
    start.wait()
    try:
        sink.open(owner, Path(out).parent / f"state{n}")
        results.put((n, "won"))
    except SinkError as e:
        results.put((n, str(e)))


@pytest.mark.parametrize("round_", range(3))
def test_of_jobs_racing_to_claim_a_fresh_folder_exactly_one_wins(
    tmp_path: Path, round_: int
) -> None:
    out = tmp_path / "out"
    ctx = multiprocessing.get_context("fork")
    start, results = ctx.Barrier(6), ctx.Queue()
    procs = [
        ctx.Process(target=_claim_in_child, args=(str(out), n, start, results)) for n in range(6)
    ]
    for p in procs:
        p.start()
    answers = dict(results.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(60)

    winners = [n for n, a in answers.items() if a == "won"]
    assert len(winners) == 1, answers
    claim = read_claim(out)
    assert claim is not None and claim.job_id == f"job-{winners[0]}"
    for n, a in answers.items():
        if n != winners[0]:
            assert f"belongs to job 'job-{winners[0]}'" in a
    # No temporary marker is left behind.
    assert sorted(p.name for p in out.iterdir()) == ["_staging", MARKER]


# commit, abort, recovery -----------------------------------------------------------------------


def test_commit_writes_the_owner_into_the_manifest_and_is_idempotent(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = _opened(out, A, tmp_path / "a")
    _stage(sink, "epoch=0.attempt=1.owner=aaaa1111")

    sink.commit(E0, ONE)
    sink.commit(E0, ONE)

    manifest = json.loads((out / "epoch=0" / "_manifest.json").read_text())
    assert {k: manifest[k] for k in ("job_id", "uid", "epoch", "attempt", "files")} == {
        "job_id": "job-a",
        "uid": "aaaa1111",
        "epoch": 0,
        "attempt": 1,
        "files": ["part-0.json"],
    }
    assert list(sink.staging.iterdir()) == []


def test_an_epoch_folder_of_another_job_at_commit_is_an_error(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = _opened(out, A, tmp_path / "a")
    staged = _stage(sink, "epoch=2.attempt=1.owner=aaaa1111")
    _manifest(out / "epoch=2", job_id="job-b", uid="bbbb2222", epoch=2, attempt=1)

    with pytest.raises(SinkError) as err:
        sink.commit(E2, ONE)

    msg = str(err.value)
    assert "epoch 2 of job 'job-a' was decided for attempt 1, but " in msg
    assert "holds job 'job-b' (uid bbbb2222), attempt 1" in msg
    assert staged.exists()  # not silently dropped either
    assert json.loads((out / "epoch=2" / "_manifest.json").read_text())["job_id"] == "job-b"


@pytest.mark.parametrize(
    "manifest",
    [
        {"job_id": "job-a", "uid": "cccc3333", "epoch": 1, "attempt": 1},  # an earlier job-a
        {"job_id": "job-a", "uid": "aaaa1111", "epoch": 1, "attempt": 2},  # not the decider
        None,  # no manifest at all
    ],
)
def test_an_epoch_folder_not_of_this_owner_and_attempt_is_never_taken_for_committed(
    tmp_path: Path, manifest: dict[str, Any] | None
) -> None:
    out = tmp_path / "out"
    sink = _opened(out, A, tmp_path / "a")
    _stage(sink, "epoch=1.attempt=1.owner=aaaa1111")
    (out / "epoch=1").mkdir()
    if manifest is not None:
        _manifest(out / "epoch=1", **manifest)

    with pytest.raises(SinkError, match="epoch 1 of job 'job-a' was decided for attempt 1"):
        sink.commit(E1, ONE)
    # Recovery, which commits the decided part it finds staged, says the same.
    with pytest.raises(SinkError, match="epoch 1 of job 'job-a' was decided for attempt 1"):
        sink.recover(lambda e: ONE)


def test_commit_stops_when_the_folder_was_claimed_anew_by_another_job(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = _opened(out, A, tmp_path / "a")
    staged = _stage(sink, "epoch=0.attempt=1.owner=aaaa1111")
    (out / MARKER).unlink()  # someone deleted the marker, and job B claimed the folder
    claim_folder(out, B)

    with pytest.raises(SinkError, match=r"is no longer job 'job-a'.s: its owner marker names job"):
        sink.commit(E0, ONE)
    assert staged.exists() and not (out / "epoch=0").exists()


def test_recovery_never_touches_a_part_staged_by_another_owner(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = _opened(out, A, tmp_path / "a")
    _stage(sink, "epoch=0.attempt=1.owner=aaaa1111")  # decided: committed
    _stage(sink, "epoch=1.attempt=1.owner=aaaa1111")  # undecided: aborted
    _stage(sink, "epoch=3.attempt=1")  # named by a version without markers: this owner's
    foreign = _stage(sink, "epoch=0.attempt=1.owner=bbbb2222")

    done = sink.recover(lambda e: ONE if e == E0 else None)

    assert (done.committed, done.aborted) == ([(E0, ONE)], [(E1, ONE), (Epoch(3), ONE)])
    assert json.loads((out / "epoch=0" / "_manifest.json").read_text())["uid"] == "aaaa1111"
    assert [p.name for p in sink.staging.iterdir()] == [foreign.name]
    sink.abort(E0, ONE)  # abort of (0, 1) is this owner's part only
    assert foreign.exists()


# folders written before owner markers ----------------------------------------------------------


def _legacy_folder(out: Path, job: str) -> None:
    """What the previous version left: epochs with manifests naming a job id, no uid, no marker."""
    for n in (0, 1):
        _manifest(out / f"epoch={n}", job_id=job, epoch=n, attempt=1, files=[])
    (out / "_staging" / "epoch=2.attempt=1").mkdir(parents=True)


def test_an_old_folder_of_another_job_is_refused_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _legacy_folder(out, "job-b")
    with pytest.raises(SinkError) as err:
        _sink(out).validate(A)
    assert "holds outputs of another job (epoch=0 holds job 'job-b', attempt 1)" in str(err.value)
    assert not (out / MARKER).exists()


def test_an_old_folder_of_this_job_id_is_refused_to_a_fresh_state_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _legacy_folder(out, "job-a")
    sink = _sink(out)
    sink.validate(A)  # the job id matches: whether it resumes is known at open

    with pytest.raises(SinkError, match=r"starts from a fresh state folder .* write epochs 0"):
        sink.open(A, tmp_path / "fresh")
    assert not (out / MARKER).exists()


def test_an_old_folder_of_this_job_is_adopted_by_the_job_resuming_its_state(
    tmp_path: Path,
) -> None:
    out, state = tmp_path / "out", tmp_path / "state"
    _legacy_folder(out, "job-a")
    (state / "checkpoint").mkdir(parents=True)

    sink = _opened(out, A, state)

    claim = read_claim(out)
    assert claim is not None and (claim.job_id, claim.uid, claim.adopted) == (
        "job-a",
        "aaaa1111",
        True,
    )
    sink.commit(E1, ONE)  # an old manifest of this job id and attempt: committed already
    (out / "_staging" / "epoch=2.attempt=1" / "part-0.json").write_text("x")
    done = sink.recover(lambda e: ONE)  # the old-style staged part is this job's now
    assert done.committed == [(E2, ONE)]
    assert json.loads((out / "epoch=2" / "_manifest.json").read_text())["uid"] == "aaaa1111"
    # From then on it is an ordinary owned folder: another uid of the same id is refused.
    with pytest.raises(SinkError, match="earlier job of the same id"):
        _sink(out).validate(A_AGAIN)


def test_a_folder_without_marker_holding_another_uids_staged_part_is_refused(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    (out / "_staging" / "epoch=0.attempt=1.owner=bbbb2222").mkdir(parents=True)
    with pytest.raises(SinkError, match="was staged by a job of uid bbbb2222"):
        _sink(out).validate(A)
    with pytest.raises(SinkError, match="was staged by a job of uid bbbb2222"):
        _sink(out).open(A, tmp_path / "a")
    assert not (out / MARKER).exists()


def test_recovery_up_to_an_attempt_leaves_a_later_attempts_staged_parts_alone(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    sink = _opened(out, A, tmp_path / "a")
    _stage(sink, "epoch=1.attempt=1.owner=aaaa1111")  # attempt 1's leftover: aborted
    later = _stage(sink, "epoch=1.attempt=2.owner=aaaa1111")  # attempt 2, preparing now
    decided_later = _stage(sink, "epoch=0.attempt=2.owner=aaaa1111")  # attempt 2's decision

    done = sink.recover(lambda e: TWO if e == E0 else None, up_to=ONE)

    assert (done.committed, done.aborted) == ([], [(E1, ONE)])
    assert later.exists() and decided_later.exists() and not (out / "epoch=0").exists()
    done = sink.recover(lambda e: TWO if e == E0 else None)  # unbounded: every attempt's
    assert (done.committed, done.aborted) == ([(E0, TWO)], [(E1, TWO)])
