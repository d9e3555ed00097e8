"""sources.socket's reader without Spark: a real TCP server, the log in a temp folder, and the
reader's calls made as Spark's streaming runner makes them (a second reader standing for the
process of a driver started after a crash)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from stoker.errors import InvalidSource, SourceError
from stoker.sources import socket as socket_source
from stoker.sources._socket_log import LineLog
from stoker.sources.spark import SparkSource
from stoker.sources.textsocket import _SocketReader
from tests.support.core import wait_for
from tests.support.lineserver import LineServer


@pytest.fixture
def server() -> Iterator[LineServer]:
    s = LineServer()
    try:
        yield s
    finally:
        s.close()


def reader(tmp_path: Path, port: int, **extra: str) -> _SocketReader:
    opts = {
        "sid": "s0",
        "host": "127.0.0.1",
        "port": str(port),
        "log_path": str(tmp_path / "s0.socket"),
        "partitions": "2",
        **extra,
    }
    return _SocketReader(opts)


def rows(r: _SocketReader, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [row for part in r.partitions(start, end) for row in r.read(part)]


def offset_until(r: _SocketReader, start: dict[str, Any], n: int) -> dict[str, Any]:
    """latestOffset, called as Spark polls, until it names ``n`` lines past ``start``."""
    box: dict[str, Any] = {}

    def reached() -> bool:
        box["end"] = r.latestOffset(start, ReadAllAvailable())
        return int(box["end"]["next"]) >= int(start["next"]) + n

    wait_for(f"{n} lines past {start}", reached, 30)
    return box["end"]


def test_lines_are_logged_before_an_epoch_names_them_and_a_new_reader_replays_them(
    tmp_path: Path, server: LineServer
) -> None:
    r = reader(tmp_path, server.port)
    try:
        start = r.initialOffset()
        wait_for("the reader's connection", lambda: server.clients, 30)
        server.send(b"a b\r\nc\n\xff\n")
        end = offset_until(r, start, 3)
        assert end == {"sid": "s0", "next": 3, "finished": False}
        assert rows(r, start, end) == [("a b",), ("c",), ("\ufffd",)]
        # The driver dies here (the epoch planned, not committed): a new reader, in a new
        # process, is asked for the same range and reads it from the log.
    finally:
        r.stop()
    server.drop_clients()
    again = reader(tmp_path, server.port)
    try:
        assert rows(again, start, end) == [("a b",), ("c",), ("\ufffd",)]
        assert again.latestOffset(end, ReadAllAvailable())["next"] == 3  # connects
        wait_for("the new reader's connection", lambda: len(server.clients) == 2, 30)
        server.send(b"d\n")
        later = offset_until(again, end, 1)
        assert later["next"] == 4  # numbered on from the log, not from 0
        assert rows(again, end, later) == [("d",)]
        again.commit(later)  # the newest file is kept: the log's end survives
        assert LineLog(tmp_path / "s0.socket").end() == 4
        assert [s.first for s in LineLog(tmp_path / "s0.socket").segments()] == [3]
    finally:
        again.stop()


def test_a_lost_connection_is_opened_again_and_a_log_gap_is_an_error(
    tmp_path: Path, server: LineServer
) -> None:
    r = reader(tmp_path, server.port, include_timestamp="true")
    try:
        start = r.initialOffset()
        wait_for("the reader's connection", lambda: server.clients, 30)
        server.send(b"x\n")
        end = offset_until(r, start, 1)
        server.drop_clients()  # the server hangs up: the reader connects again
        wait_for("the reader's second connection", lambda: len(server.clients) == 2, 30)
        server.send(b"y\n")
        end2 = offset_until(r, end, 1)
        got = rows(r, start, end2)
        assert [g[0] for g in got] == ["x", "y"]
        assert all(isinstance(g[1], datetime) and g[1].tzinfo is UTC for g in got)
        assert rows(r, start, end2) == got  # the received time is kept, not taken again
        # A start past the log's end (the log lost, the checkpoint kept): new lines are
        # numbered from the start, and the range below it is named as gone.
        far = {**end2, "next": 10}
        server.send(b"z\n")
        end3 = offset_until(r, far, 1)
        assert end3["next"] == 11 and [g[0] for g in rows(r, far, end3)] == ["z"]
        with pytest.raises(SourceError, match=r"lines 2\.\.9 of the epoch are not in"):
            rows(r, start, end3)
    finally:
        r.stop()


def test_arguments_are_checked_and_sparks_socket_is_refused_with_the_way_out() -> None:
    socket_source("localhost", 9999, include_timestamp=True).validate()
    for bad, field in [
        (socket_source("", 1), "socket.host"),
        (socket_source("h", 0), "socket.port"),
        (socket_source("h", True), "socket.port"),  # type: ignore[arg-type]
        (socket_source("h", 1, max_lines_per_epoch=0), "socket.max_lines_per_epoch"),
        (socket_source("h", 1, include_timestamp="yes"), "socket.include_timestamp"),  # type: ignore[arg-type]
    ]:
        with pytest.raises(InvalidSource, match=field.replace(".", r"\.")):
            bad.validate()
    for at_least_once in (False, True):
        with pytest.raises(InvalidSource) as e:
            SparkSource(
                "socket", {"host": "h", "port": "1"}, at_least_once=at_least_once
            ).validate()
        assert "Offsets committed out of order" in str(e.value)
        assert "sources.socket(host, port)" in str(e.value)


def test_an_epoch_is_capped_and_control_can_cap_it(tmp_path: Path, server: LineServer) -> None:
    from stoker.control.events import supported_rate_keys

    r = reader(tmp_path, server.port, max_lines_per_epoch="2")
    try:
        start = r.initialOffset()
        wait_for("the reader's connection", lambda: server.clients, 30)
        server.send(b"1\n2\n3\n4\n5\n")
        ends = [offset_until(r, start, 2)]
        ends.append(r.latestOffset(ends[-1], ReadAllAvailable()))
        ends.append(r.latestOffset(ends[-1], ReadAllAvailable()))
        assert [e["next"] for e in ends] == [2, 4, 5]  # the rest waits in the log
        assert r.reportLatestOffset() == {"sid": "s0", "next": 5, "finished": False}
    finally:
        r.stop()
    assert supported_rate_keys({"sources": ["socket('localhost', 9999)"]}) == {"max_rows_per_epoch"}


def test_lines_received_when_the_query_stops_are_kept_for_the_next_run(
    tmp_path: Path, server: LineServer
) -> None:
    r = reader(tmp_path, server.port)
    start = r.initialOffset()
    wait_for("the reader's connection", lambda: server.clients, 30)
    server.send(b"a\n")
    end = offset_until(r, start, 1)
    server.send(b"b\nc\n")  # received, in no offset yet: a graceful stop comes now
    wait_for("the lines received", lambda: r.receiver.waiting() == 2, 30)
    r.stop()  # as Spark's runner does when the query stops
    again = reader(tmp_path, server.port)
    try:
        later = again.latestOffset(end, ReadAllAvailable())
        assert later["next"] == 3
        assert rows(again, end, later) == [("b",), ("c",)]
    finally:
        again.stop()
