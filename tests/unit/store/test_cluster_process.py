"""A cluster's process record at the store boundary: the JSON object it is kept as (the shape
stored and shown by the API before records were typed) and back."""

from __future__ import annotations

import json

from stoker.store import ClusterProcess, ClusterRecord, Owner
from stoker.types import ClusterState

# A worker's object as managers have always written it (key order too).
STORED = {
    "role": "worker",
    "id": "worker-2",
    "host": "box-1",
    "address": "127.0.0.3",
    "pid": 4343,
    "pid_started": "918273",
    "port": 40003,
    "web_port": 40004,
    "log": "/state/clusters/c/worker-2.log",
    "cores": 1,
    "memory": "512m",
}


def test_json_round_trip_keeps_the_stored_shape() -> None:
    p = ClusterProcess.from_json(STORED)
    assert (p.role, p.id, p.address, p.pid, p.cores, p.memory) == (
        "worker",
        "worker-2",
        "127.0.0.3",
        4343,
        1,
        "512m",
    )
    assert json.dumps(p.to_json()) == json.dumps(STORED)
    assert ClusterProcess.from_json(p.to_json()) == p
    assert p.owner == Owner("box-1", 4343, "918273")


def test_a_missing_key_reads_as_its_empty_value() -> None:
    p = ClusterProcess.from_json({"role": "master", "id": "master", "pid": 7})
    assert (p.host, p.pid, p.pid_started, p.port, p.cores, p.memory) == (
        "",
        7,
        "unknown",
        0,
        0,
        "",
    )


def test_a_cluster_row_reads_its_processes_typed_and_shows_them_as_stored() -> None:
    row = (
        "c",
        "session",
        None,
        json.dumps({"workers": 1}),
        "RUNNING",
        "spark://127.0.0.1:7077",
        "http://127.0.0.1:8080",
        json.dumps([STORED]),
        None,
        1.0,
        2.0,
    )
    rec = ClusterRecord.from_row(row)
    assert rec.state == ClusterState.RUNNING
    assert rec.processes == [ClusterProcess.from_json(STORED)]
    assert rec.to_dict()["processes"] == [STORED]
