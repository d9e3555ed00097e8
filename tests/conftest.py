"""Fixtures shared by the whole suite. Keep each one small; group them by what they provide."""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.pg import ThrowawayPostgres
from tests.support import LIGHT_JVM

# Light JVMs for every Spark process the tests start -------------------------------------------
# The suite runs hundreds of short Spark JVMs on two cores, where the C2 compiler and G1's
# parallel threads cost CPU that a test of seconds never earns back: C1 only and the serial
# collector took a run of the example from 24-26 to 17-19 CPU seconds here. Spark's own
# variables carry them, so no test and no stoker default changes: SPARK_SUBMIT_OPTS reaches every
# driver JVM (and, as a system property, every standalone executor through
# spark.executor.defaultJavaOptions, which a job's extraJavaOptions extend), the daemons' and the
# launcher's variables reach the masters, workers and spark-class's launcher. A variable the
# caller set is kept.
os.environ.setdefault(
    "SPARK_SUBMIT_OPTS", f"{LIGHT_JVM} -Dspark.executor.defaultJavaOptions='{LIGHT_JVM}'"
)
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", LIGHT_JVM)
os.environ.setdefault("SPARK_LAUNCHER_OPTS", LIGHT_JVM)
# A standby warms up with one epoch: more cost each standby test seconds and save mostly C2's
# compilations, which these JVMs leave out (runtime/job/standby.py).
os.environ.setdefault("STOKER_STANDBY_WARM_EPOCHS", "1")

# Ctrl-C as a terminal delivers it -----------------------------------------------------------
# A suite started in the background of a non-interactive shell (`bash -c 'pytest &'`, nohup,
# some CI runners) inherits SIGINT ignored, and an ignored signal stays ignored across exec: the
# stoker processes the tests start would then never see the Ctrl-C a test sends them, and wait
# out its timeout. Children of a terminal get SIGINT at its default; give them that.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# The driver JVM's class archive -----------------------------------------------------------------
def pytest_sessionstart(session: pytest.Session) -> None:
    """Make the driver JVM's class archive once, before any test (stoker.runtime.jvmcache):
    every driver of the run then starts in about half the time, as on a user's machine from
    its second driver on. Without it, the first driver would start a builder in the
    background, in the middle of a test. The controller does it, not each xdist worker."""
    if hasattr(session.config, "workerinput"):
        return
    from stoker.runtime import jvmcache

    if jvmcache.enabled(""):
        jvmcache.build()


# PostgreSQL ------------------------------------------------------------------------------------
_db_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[ThrowawayPostgres]:
    """One throwaway PostgreSQL server for the whole session, started on first use."""
    with ThrowawayPostgres() as server:
        yield server


@pytest.fixture
def pg_dsn(pg_server: ThrowawayPostgres) -> Iterator[str]:
    """A fresh, empty database of its own for one test; dropped (connections and all) after."""
    name = f"t{os.getpid()}_{next(_db_numbers)}"
    yield pg_server.create_database(name)
    pg_server.drop_database(name)


# Kafka -----------------------------------------------------------------------------------------
_topic_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def kafka_server() -> Iterator[Any]:
    """One throwaway Kafka broker (tests/kafka.py) per test process, started on first use. Tests
    that kill or stop the broker start a :class:`tests.kafka.ThrowawayKafka` of their own."""
    from tests.kafka import ThrowawayKafka

    with ThrowawayKafka() as server:
        yield server


@pytest.fixture
def kafka_topic(kafka_server: Any) -> Callable[..., str]:
    """Makes a fresh topic on the session's broker: ``kafka_topic(partitions=3)`` -> its name,
    unique to the test process and the call."""

    def make(partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}{os.getpid()}_{next(_topic_numbers)}"
        kafka_server.create_topic(name, partitions)
        return name

    return make


# Spark -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spark(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One local SparkSession for the tests of a module that run pipelines in the test's own
    process, stopped after the module: ``local[2]``, or the module's ``SPARK_MASTER``."""
    from tests.support.spark import local_session

    master = getattr(request.module, "SPARK_MASTER", "local[2]")
    yield from local_session(master, request.module.__name__.rpartition(".")[2])


# SQLite ----------------------------------------------------------------------------------------
@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    """Where a test's SQLite store file goes (not created yet)."""
    return tmp_path / "store.db"


# Lanes ----------------------------------------------------------------------------------------
# Markers say what a test costs (declared in pyproject.toml): `cluster` starts standalone
# clusters (masters and workers, minutes of JVMs), `soak` repeats faults at random for minutes,
# `browser` drives a real Chromium, `scenario` runs a user's whole scenario through the CLI or
# REST API (control, observability, the README, config, state repartition: features whose
# crash paths are the protocol's, tested in the lane), `variant` is one more form of a fault test
# whose other forms run in both lanes. The fast lane (`--fast`) leaves them out and asks the
# repeated-fault tests that stay for fewer rounds (the `rounds` fixture), never fewer kinds of
# fault: it still starts real Spark drivers and SIGKILLs them at every step of the protocol (and
# tasks after PREPARE, managers, drivers under managers).
FAST_LANE = "not cluster and not soak and not browser and not scenario and not variant"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help=f"the fast lane: -m '{FAST_LANE}', fewer rounds of the repeated-fault tests",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--fast"):
        chosen = config.option.markexpr
        config.option.markexpr = f"({chosen}) and {FAST_LANE}" if chosen else FAST_LANE


@pytest.fixture
def rounds(request: pytest.FixtureRequest) -> Callable[[int, int], int]:
    """``rounds(full, fast)``: how many times a repeated-fault test repeats its faults, ``full``
    in the whole suite, ``fast`` in the fast lane (each kind of fault still at least once)."""
    fast_lane = bool(request.config.getoption("--fast"))
    return lambda full, fast: fast if fast_lane else full


# Parallel runs (pytest-xdist, `--dist loadgroup`) ----------------------------------------------
# Tests marked `cluster` (standalone clusters on 127.0.0.2, .3, ...) run one after the other on
# one process: two clusters at once would share loopback addresses and double the JVMs on a
# 2-core machine. Every other module runs whole on one process (its module fixtures, servers and
# jobs, are set up once, and some run their tests in order), except modules marked `spread`,
# whose tests stand alone and are long: they spread over the processes test by test.
def _rank(item: pytest.Item, module: str) -> int:
    """When a test is handed out: longest first, so that the two processes end together
    (xdist keeps the order given with --no-loadscope-reorder; its own order, by number of
    tests, put the longest single crash tests last, where one process ran them while the other
    sat idle). The clusters (about 20 minutes on one process), then the long lone tests, then
    the other Spark tests, then the quick ones that fill the end."""
    if item.get_closest_marker("cluster"):
        return 0
    if item.get_closest_marker("spread"):
        return 1
    if module.startswith(("tests/unit/", "tests/integration/store/")):
        return 3
    return 2


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(str(config.rootpath))
    modules = [Path(str(item.path)).relative_to(root).as_posix() for item in items]
    for item, module in zip(items, modules, strict=True):
        if item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.xdist_group("clusters"))
        elif not item.get_closest_marker("spread"):
            item.add_marker(pytest.mark.xdist_group(module))
    # A stable sort: each module keeps its tests' order (every process collects the same).
    order = sorted(range(len(items)), key=lambda i: _rank(items[i], modules[i]))
    items[:] = [items[i] for i in order]
