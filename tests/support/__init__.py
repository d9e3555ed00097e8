"""Helpers shared by the tests, one of each: the poll (:func:`wait_for`), the free port
(:func:`free_port`), drivers as real processes, sink readers; job managers in
:mod:`tests.support.manager`, the process table in :mod:`tests.support.procs`, the local
SparkSession behind the ``spark`` fixture in :mod:`tests.support.spark`."""

from tests.support.core import (
    APPS,
    JVM_OPTS,
    LIGHT_JVM,
    REPO,
    free_port,
    stoker_cmd,
    wait_for,
)
from tests.support.drivers import kill_group, start_driver, wait_group_gone
from tests.support.sinks import exactly_once, file_sink_ids, pg_ids, pg_prepared

__all__ = [
    "APPS",
    "JVM_OPTS",
    "LIGHT_JVM",
    "REPO",
    "exactly_once",
    "file_sink_ids",
    "free_port",
    "kill_group",
    "pg_ids",
    "pg_prepared",
    "start_driver",
    "stoker_cmd",
    "wait_for",
    "wait_group_gone",
]
