"""Submitting an application to the job manager: every field checked before anything is
written, the same idempotence as a job's, one id space shared with jobs. A real SQLite store,
no driver (nothing is ever started by a submission: the leader starts drivers)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stoker import procs
from stoker.driverargs import DriverArgs, DriverRole
from stoker.errors import InvalidInput, JobConflict, JobOwnedElsewhere, JobTerminal
from stoker.manager import JobManager
from stoker.manager import processes as procs_mod
from stoker.manager.cluster_records import check_cluster_name
from stoker.manager.logs import tail_lines
from stoker.store import Store, open_store
from stoker.types import AttemptNo, AttemptState, ClusterState, JobKind, JobState, job_id

MEMTOTAL_MB = procs.memory_total_mb() or 0
CPUS = os.cpu_count() or 1


def _children() -> set[int]:
    """Processes whose parent is this test process."""
    return {st.pid for st in procs.all_stats() if st.ppid == os.getpid()}


class World:
    def __init__(self, root: Path) -> None:
        self.apps = root / "apps"
        self.apps.mkdir()
        self.outside = root / "outside"
        self.outside.mkdir()
        self.app = self.apps / "etl.py"
        self.app.write_text("print('never run by a submission')\n")
        self.store: Store = open_store(f"sqlite:///{root / 'store.db'}")
        self.manager = JobManager(self.store, root / "state", [self.apps])

    def submit(self, **kw: Any) -> Any:
        kw.setdefault("entrypoint", str(self.app))
        return self.manager.submit_application(kw.pop("app_id", None), **kw)

    def records(self) -> list[str]:
        return [r.job_id for r in self.store.list_jobs(kind=None)]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.manager.close()
    w.store.close()


def test_a_submission_stores_the_application_and_starts_nothing(world: World) -> None:
    before = _children()
    res = world.submit(
        app_id="etl",
        args=["--day", "1"],
        conf={"stoker.trigger": "1s"},
        cluster="standalone:workers=1,cores=1,memory=512m",
        driver_memory="1G",
        driver_cores=1,
        restart_strategy={"strategy": "fixed-delay", "attempts": 2},
    )
    assert res.outcome == "created"
    app = world.store.get_job(job_id("etl"))
    assert (app.kind, app.app_id, app.state, app.current_attempt) == (
        JobKind.APPLICATION,
        None,
        JobState.CREATED,
        0,
    )
    assert app.spec == {
        "kind": "application",
        "entrypoint": str(world.app.resolve()),
        "args": ["--day", "1"],
        "conf": {
            "spark.driver.cores": "1",
            "spark.driver.memory": "1g",
            "stoker.trigger": "1s",
        },
        "cluster": "standalone:workers=1,cores=1,memory=512m",
        "restart_strategy": {
            "strategy": "fixed-delay",
            "attempts": 2,
            "delay": 1.0,
            "reset_after": 600.0,
        },
        "state_dir": str(world.manager.apps_dir / "etl"),
    }
    assert world.store.list_attempts(app.job_id) == []
    assert world.store.list_clusters(include_stopped=True) == []  # the leader starts it
    assert _children() == before
    # Not a job: GET /v1/jobs never lists it.
    assert world.manager.list_views() == []
    assert [a["app_id"] for a in world.manager.applications()] == ["etl"]


def test_the_default_id_is_the_files_name_and_a_resubmission_is_idempotent(world: World) -> None:
    assert world.submit().job.job_id == "etl"
    assert world.submit().outcome == "duplicate"
    assert world.submit(app_id="etl", cluster="local").outcome == "duplicate"
    with pytest.raises(JobConflict) as err:
        world.submit(args=["other"])
    assert "args" in err.value.difference
    # An ended application is not run again unless asked: the same submission returns it.
    world.store.request_cancel(job_id("etl"))  # CREATED: ends CANCELED at once
    again = world.submit()
    assert (again.outcome, again.job.state) == ("duplicate", JobState.CANCELED)
    with pytest.raises(JobTerminal) as ended:
        world.submit(args=["other"])
    assert ended.value.difference is not None and "args" in ended.value.difference
    res = world.submit(restart=True)
    assert (res.outcome, res.job.state) == ("restarted", JobState.RESTARTING)
    assert world.records() == ["etl"]


def _session(world: World, name: str, state: ClusterState) -> None:
    world.store.create_cluster(name, "session", {"cluster": "standalone:workers=1"})
    if state == ClusterState.RUNNING:
        world.store.update_cluster(name, state=state, master_url="spark://127.0.0.1:7077")
    elif state != ClusterState.STARTING:
        world.store.update_cluster(name, state=state)


def test_a_session_cluster_must_exist_and_run(world: World) -> None:
    _session(world, "shared", ClusterState.RUNNING)
    _session(world, "booting", ClusterState.STARTING)
    assert world.submit(cluster="shared").job.spec["cluster"] == "shared"
    for name, words in (("nosuch", "no session cluster"), ("booting", "is STARTING")):
        with pytest.raises(InvalidInput) as err:
            world.submit(app_id="other", cluster=name)
        assert err.value.field == "cluster" and words in err.value.message, err.value
    assert world.records() == ["etl"]


BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown cluster kind", {"cluster": "mesos:workers=2"}, "cluster", "unknown cluster kind"),
    ("unknown URL scheme", {"cluster": "yarn://rm:8032"}, "cluster", "unknown master URL"),
    ("unknown key", {"cluster": "standalone:gpus=1"}, "cluster", "unknown standalone setting"),
    ("workers=0", {"cluster": "standalone:workers=0"}, "cluster", "at least 1 worker"),
    (
        "memory above the machine's",
        {"cluster": f"standalone:workers=2,memory={MEMTOTAL_MB}m"},
        "cluster",
        "above this machine's memory",
    ),
    ("cores above the machine's", {"cluster": f"standalone:cores={CPUS + 1}"}, "cluster", "CPUs"),
    (
        "driver memory above the machine's",
        {"driver_memory": f"{MEMTOTAL_MB + 1024}m"},
        "driver_memory",
        "above this machine's memory",
    ),
    ("driver memory without a unit", {"driver_memory": "2048"}, "driver_memory", "512m or 2g"),
    ("driver memory too small", {"driver_memory": "100m"}, "driver_memory", "450m"),
    ("driver cores 0", {"driver_cores": 0}, "driver_cores", ">= 1"),
    ("driver cores above the machine's", {"driver_cores": CPUS + 1}, "driver_cores", "cores"),
    (
        "driver memory twice",
        {"driver_memory": "2g", "conf": {"spark.driver.memory": "1g"}},
        "driver_memory",
        "conflicts",
    ),
    (
        "a master in conf",
        {"cluster": "standalone:workers=1", "conf": {"spark.master": "local[2]"}},
        "conf.spark.master",
        "set by the application's cluster",
    ),
    ("unknown setting", {"conf": {"nope.x": "1"}}, "conf.nope.x", "unknown setting"),
    (
        "a standby on a cluster",
        {"cluster": "standalone:workers=1", "standby": True},
        "standby",
        "a second Spark application",
    ),
    (
        "a standby on an external master",
        {"cluster": "spark://127.0.0.1:7077", "standby": True},
        "standby",
        "cluster local",
    ),
    ("bad id", {"app_id": "no/slash"}, "app_id", "not a valid application id"),
    (
        "bad strategy",
        {"restart_strategy": {"strategy": "sometimes"}},
        "restart_strategy.strategy",
        "not one of",
    ),
    # Outside the allowed folders, whether it exists is not told (issue 22, low).
    ("missing file", {"entrypoint": "/nonexistent/app.py"}, "entrypoint", "lies outside"),
]


@pytest.mark.parametrize(("why", "given", "field", "words"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_names_the_field_and_stores_nothing(
    world: World, why: str, given: dict[str, Any], field: str, words: str
) -> None:
    before = _children()
    with pytest.raises(InvalidInput) as err:
        world.submit(**given)
    assert err.value.field == field, err.value
    assert words in err.value.message, err.value
    assert world.records() == []
    assert world.store.list_clusters(include_stopped=True) == []
    assert _children() == before


def test_an_entrypoint_outside_the_allowed_folders_is_refused(world: World) -> None:
    elsewhere = world.outside / "etl.py"
    elsewhere.write_text("")
    for path in (elsewhere, world.apps / ".." / "outside" / "etl.py"):
        with pytest.raises(InvalidInput) as err:
            world.submit(entrypoint=str(path))
        assert err.value.field == "entrypoint"
        assert "lies outside the allowed folders" in err.value.message
    assert world.records() == []


def test_a_file_name_that_is_no_id_asks_for_one(world: World) -> None:
    odd = world.apps / "my etl.py"
    odd.write_text("")
    with pytest.raises(InvalidInput) as err:
        world.submit(entrypoint=str(odd))
    assert err.value.field == "app_id" and "give app_id" in err.value.message
    assert world.submit(entrypoint=str(odd), app_id="my-etl").outcome == "created"


def test_jobs_and_applications_share_one_id_space(world: World) -> None:
    # A job submitted alone owns its id: no application may take it, and the other way round.
    world.manager.submit("lone", str(world.app))
    with pytest.raises(JobOwnedElsewhere) as err:
        world.submit(app_id="lone")
    assert "job submitted alone" in str(err.value)
    world.submit(app_id="etl")
    with pytest.raises(JobOwnedElsewhere) as err2:
        world.manager.submit("etl", str(world.app))
    assert "it is an application" in str(err2.value)
    # A job of application etl: another application cannot take its id.
    world.store.create_job(job_id("etl.orders"), "orders", {"kind": "in_app"}, {}, app_id="etl")  # type: ignore[arg-type]
    with pytest.raises(JobOwnedElsewhere) as err3:
        world.submit(app_id="etl.orders")
    assert "application 'etl' owns it" in str(err3.value)
    assert sorted(world.records()) == ["etl", "etl.orders", "lone"]
    assert world.store.get_job(job_id("lone")).kind == JobKind.JOB


def test_views_of_an_application_and_its_jobs(world: World) -> None:
    world.submit(app_id="etl")
    store = world.store
    store.create_job(job_id("etl.orders"), "orders", {"kind": "in_app"}, {}, app_id="etl")  # type: ignore[arg-type]
    from stoker.store import Owner

    store.start_attempt(
        job_id("etl"), Owner("h", 4242, "x"), 30.0, AttemptNo(0), state=AttemptState.STARTING
    )
    view = world.manager.application("etl")
    assert (view["app_id"], view["state"], view["attempt"]) == ("etl", "RUNNING", 1)
    assert view["driver"] == {"pid": 4242, "host": "h"}
    assert [a["state"] for a in view["attempts"]] == ["STARTING"]
    assert view["cluster"] == {
        "spec": "local",
        "name": None,
        "state": None,
        "master_url": None,
        "workers": None,
    }
    assert view["jobs"] == [
        {
            "job_id": "etl.orders",
            "state": "CREATED",
            "last_epoch": None,
            "attempt": 0,
            "error": None,
        }
    ]
    # GET /v1/jobs lists the application's job, with its application named; never the app.
    assert [(j["job_id"], j["app_id"]) for j in world.manager.list_views()] == [
        ("etl.orders", "etl")
    ]
    with pytest.raises(Exception, match="it is an application"):
        world.manager.view("etl")
    with pytest.raises(Exception, match="it is a job"):
        world.manager.application("etl.orders")
    assert world.manager.applications()[0]["jobs"] == 1


def test_cluster_names(tmp_path: Path) -> None:
    assert check_cluster_name("shared-1") == "shared-1"
    for bad, words in (
        ("app-x", "applications' own"),
        ("local", "keyword"),
        ("standalone", "keyword"),
        ("a b", "not a valid cluster name"),
        ("", "not a valid cluster name"),
    ):
        with pytest.raises(InvalidInput) as err:
            check_cluster_name(bad)
        assert words in err.value.message, (bad, err.value)


def test_tail_reads_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "attempt-1.log"
    log.write_text("".join(f"line {i}\n" for i in range(100_000)))
    assert tail_lines(log, 2) == "line 99998\nline 99999\n"
    small = tmp_path / "small.log"
    small.write_text("".join(f"line {i}\n" for i in range(10_000)))
    assert tail_lines(small, None) == small.read_text()  # under 1 MiB: all of it
    big = tmp_path / "big.log"
    big.write_text("".join(f"line {i:07d}\n" for i in range(200_000)))  # 2.6 MB
    default = tail_lines(big, None)
    assert len(default.encode()) <= 1 << 20 and default.startswith("line ")
    assert default.endswith("line 0199999\n")
    assert tail_lines(tmp_path / "missing.log", 5) == ""


def test_the_application_driver_argv_keeps_secrets_off_its_command_line(tmp_path: Path) -> None:
    argv = procs_mod.DriverArgv.of(
        DriverArgs(
            role=DriverRole.APP,
            name="etl",
            attempt=3,
            store="postgresql://u:pw@db/stoker",
            state_dir=tmp_path / "apps" / "etl",
            entrypoint=tmp_path / "etl.py",
            args=("--day", "1"),
            conf={
                "spark.master": "spark://127.0.0.1:7077",
                "spark.hadoop.fs.s3a.secret.key": "s3cr3t",
            },
            lease_ttl=10.0,
        )
    )
    assert argv[1:11] == [
        "-m",
        "stoker.runtime.appdriver",
        "--app",
        "etl",
        "--attempt",
        "3",
        "--store",
        "postgresql://u:***@db/stoker",
        "--state-dir",
        str(tmp_path / "apps" / "etl"),
    ]
    assert argv[-4:] == ["--", str(tmp_path / "etl.py"), "--day", "1"]
    assert "-D" in argv and "spark.master=spark://127.0.0.1:7077" in argv
    assert "s3cr3t" not in " ".join(argv) and "pw" not in " ".join(argv)
    assert argv.env[procs_mod.STORE_URL_ENV] == "postgresql://u:pw@db/stoker"
    assert "s3cr3t" in argv.env[procs_mod.SECRETS_ENV]


def test_secret_values_under_any_key_stay_off_the_drivers_command_line(tmp_path: Path) -> None:
    """Issue 22 item 2: the argv masked by key name only; a URL password or a
    ``password=...`` under another key was in ``ps``. They travel in the environment too."""
    conf = {
        "spark.mongodb.read.connection.uri": "mongodb://reader:pw-9xq@db.example/x",
        "spark.jdbc.opts": "host=db password=pw-8zz sslmode=require",
        "spark.sql.shuffle.partitions": "4",
    }
    argv = procs_mod.DriverArgv.of(
        DriverArgs(
            role=DriverRole.JOB,
            name="etl",
            attempt=1,
            store="sqlite:////tmp/s.db",
            state_dir=tmp_path,
            entrypoint=tmp_path / "etl.py",
            args=(),
            conf=conf,
            lease_ttl=10.0,
        )
    )
    shown = " ".join(argv)
    assert "pw-9xq" not in shown and "pw-8zz" not in shown
    assert "spark.sql.shuffle.partitions=4" in argv
    assert "spark.mongodb.read.connection.uri=***" in argv
    secrets = json.loads(argv.env[procs_mod.SECRETS_ENV])
    assert secrets["spark.mongodb.read.connection.uri"].endswith("reader:pw-9xq@db.example/x")
    assert secrets["spark.jdbc.opts"] == "host=db password=pw-8zz sslmode=require"


def test_an_entrypoint_outside_the_allowed_folders_is_refused_alike_whether_it_exists(
    tmp_path: Path,
) -> None:
    """The refusal of a path outside the allowed folders does not tell whether a file is
    there (issue 22, low: it was an oracle for any file of the host)."""
    from stoker.manager.submit import validate_submission

    allowed, outside = tmp_path / "apps", tmp_path / "elsewhere"
    allowed.mkdir()
    outside.mkdir()
    (outside / "there.py").write_text("x = 1\n")
    answers = []
    for name in ("there.py", "absent.py"):
        with pytest.raises(InvalidInput) as err:
            validate_submission(str(outside / name), [], {}, None, [allowed.resolve()])
        answers.append(err.value.message.replace(name, "NAME"))
    assert answers[0] == answers[1] and "lies outside the allowed folders" in answers[0]


def test_a_log_path_a_driver_recorded_elsewhere_is_not_served(tmp_path: Path) -> None:
    """A driver holds the store's credentials: it could record /etc/shadow as its attempt's
    log, and the API would serve it (issue 22, low). Only a manager's own log layout is."""
    from stoker.manager.logs import served_log

    good = tmp_path / "logs" / "job-1" / "attempt-2.log"
    assert served_log(str(good), "job-1", 2) == good
    for bad in (
        "/etc/shadow",
        str(tmp_path / "logs" / "job-1" / "attempt-3.log"),  # another attempt's name
        str(tmp_path / "logs" / "other" / "attempt-2.log"),  # another job's folder
        str(tmp_path / "logs" / "job-1" / ".." / "job-1" / "attempt-2.log"),
        "logs/job-1/attempt-2.log",  # relative
    ):
        with pytest.raises(InvalidInput) as err:
            served_log(bad, "job-1", 2)
        assert err.value.field == "attempt"
    real = tmp_path / "real"
    (real / "job-1").mkdir(parents=True)
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "logs").symlink_to(real)
    with pytest.raises(InvalidInput):
        served_log(str(tmp_path / "linked" / "logs" / "job-1" / "attempt-2.log"), "job-1", 2)


def test_a_standby_is_part_of_the_applications_spec(world: World) -> None:
    res = world.submit(standby=True, conf={"spark.master": "local[2]"})
    assert res.job.spec["standby"] is True
    # Without it the spec has no key at all: applications stored before it stay the same.
    other = world.submit(app_id="plain")
    assert "standby" not in other.job.spec
    # The same submission again is the same application; without standby, another spec.
    assert world.submit(standby=True, conf={"spark.master": "local[2]"}).outcome == "duplicate"
    with pytest.raises(JobConflict):
        world.submit(conf={"spark.master": "local[2]"})


def test_resuming_an_ended_application_keeps_its_spec_standby_included(world: World) -> None:
    first = world.submit(standby=True, conf={"spark.master": "local[2]"})
    app = first.job.job_id
    world.store.set_job_state(app, JobState.CANCELED)
    res = world.manager.resume_application(app)
    assert res.outcome == "restarted", res
    assert res.job.spec == first.job.spec  # the same application, its standby with it
    assert res.job.spec["standby"] is True
