"""Lines of text from a TCP server, as Spark's ``socket`` source reads them, but replayable.

Spark's socket source keeps nothing: a line is gone once read, so an epoch replayed after a
crash has no rows, and a restart under its own checkpoint fails for good ("Offsets committed
out of order": its offsets start again at 0 below the logged ones). This source keeps what it
receives instead, as Spark Streaming's receivers kept theirs in a write-ahead log:

- A thread of the reader (which lives in the Python process the driver's JVM starts for the
  query) connects to ``host:port`` and reads lines into a bounded buffer; when the buffer is
  full it stops reading, and TCP holds the sender back. A lost connection is opened again
  every second, for as long as the job runs.
- At each ``latestOffset`` the buffered lines are appended to the source's log in the job's
  state folder (``state/sources/<sid>.socket/``, one file per append, written whole, fsynced
  and renamed into place), numbered on from the log's end; the offset is a line number. Only
  then can an epoch name them, so an epoch replayed after a crash reads the same lines from
  the log. What the server sent that the reader had not appended yet when the driver died
  (in the kernel's buffer, in the reader's) is not received: exactly once holds from the log
  on, which is as far as a socket, with no acknowledgement, can carry it.
- The append runs under an exclusive lock of the log, after a check that this driver still
  runs the job's current attempt (:class:`stoker.sources._fence.AttemptFence`): a zombie
  driver's reader cannot number lines beside the new one's.
- Spark's commit of an epoch deletes the log's files wholly below its end (the newest file
  is kept: it carries the log's end across a restart).

The rows: ``value`` (the line without its end of line), and with ``include_timestamp`` the
moment it was received (``timestamp``, as Spark's ``includeTimestamp`` option gives it),
kept in the log so that a replay gives the same time.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from stoker.errors import InvalidSource, SourceError
from stoker.procs import this_owner
from stoker.sources._control import (
    CV,
    ReaderControl,
    contiguous_groups,
    hush_if_spark_hung_up,
    limit_of,
    partitions_for,
)
from stoker.sources._fence import AttemptFence, owner_from_json, owner_to_json
from stoker.sources._socket_log import LineLog
from stoker.sources.base import FINISHED, SID, SourceContext

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import DataFrame, SparkSession

FORMAT = "stoker_socket"
_log = logging.getLogger("stoker.sources.socket")

# The reader stops reading the socket while this many lines (or bytes) wait for an epoch.
MAX_BUFFERED_LINES = 200_000
MAX_BUFFERED_BYTES = 64 << 20
# A line longer than this (no end of line in sight) fails the source: it would grow without end.
MAX_LINE_BYTES = 16 << 20


class _Receiver:
    """The thread that reads lines from the server into a bounded buffer."""

    def __init__(self, host: str, port: int, sid: str) -> None:
        self.host, self.port, self.sid = host, port, sid
        self.lines: deque[tuple[str, int]] = deque()
        self.bytes = 0
        self.error: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, name=f"socket-{sid}", daemon=True)
        self._thread.start()

    def take(self) -> list[tuple[str, int]]:
        with self._lock:
            out = list(self.lines)
            self.lines.clear()
            self.bytes = 0
            return out

    def waiting(self) -> int:
        with self._lock:
            return len(self.lines)

    def stop(self, wait_s: float = 0.0) -> None:
        """No more lines: the thread ends (waited for up to ``wait_s``)."""
        self._stop.set()
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
        if wait_s > 0:
            self._thread.join(wait_s)

    def _full(self) -> bool:
        with self._lock:
            return len(self.lines) >= MAX_BUFFERED_LINES or self.bytes >= MAX_BUFFERED_BYTES

    def _run(self) -> None:
        down_since: float | None = None
        while not self._stop.is_set():
            try:
                sock = socket.create_connection((self.host, self.port), timeout=5)
            except OSError as e:
                if down_since is None:
                    down_since = time.monotonic()
                    _log.warning(
                        "source %s: cannot connect to %s:%d (%s); trying again every second",
                        self.sid,
                        self.host,
                        self.port,
                        e.strerror or e,
                    )
                self._stop.wait(1.0)
                continue
            if down_since is not None:
                _log.info("source %s: connected to %s:%d", self.sid, self.host, self.port)
                down_since = None
            self._sock = sock
            try:
                self._read(sock)
            except OSError as e:
                if not self._stop.is_set():
                    _log.warning("source %s: connection lost (%s)", self.sid, e.strerror or e)
            finally:
                self._sock = None
                with contextlib.suppress(OSError):
                    sock.close()
            if self.error is not None:
                return
            down_since = time.monotonic()
            self._stop.wait(1.0)

    def _read(self, sock: socket.socket) -> None:
        sock.settimeout(0.5)
        partial = b""
        while not self._stop.is_set():
            if self._full():
                time.sleep(0.05)  # TCP's window holds the sender back meanwhile
                continue
            try:
                chunk = sock.recv(1 << 16)
            except TimeoutError:
                continue
            if not chunk:  # the server closed: its last line counts even without an end
                if partial:
                    self._add([partial])
                return
            parts = (partial + chunk).split(b"\n")
            partial = parts.pop()
            if len(partial) > MAX_LINE_BYTES:
                self.error = (
                    f"a line from {self.host}:{self.port} is over {MAX_LINE_BYTES >> 20} MiB "
                    "without an end of line"
                )
                return
            if parts:
                self._add(parts)

    def _add(self, raw: list[bytes]) -> None:
        micros = time.time_ns() // 1000
        decoded = [r.rstrip(b"\r").decode("utf-8", errors="replace") for r in raw]
        with self._lock:
            for text in decoded:
                self.lines.append((text, micros))
                self.bytes += len(text)


class _Lines(InputPartition):
    def __init__(self, lines: list[tuple[str, int]]) -> None:
        self.lines = lines


class _SocketReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.sid = options["sid"]
        self.stamp = options.get("include_timestamp") == "true"
        self.max_lines = int(options.get("max_lines_per_epoch") or 0)
        self.parts = max(1, int(options["partitions"])) if options.get("partitions") else None
        self.log = LineLog(Path(options["log_path"]))
        self.fence: AttemptFence | None = None
        if options.get("job_id") and options.get("store_url") and options.get("driver"):
            self.fence = AttemptFence(
                options["store_url"], options["job_id"], owner_from_json(options["driver"])
            )
        self.control = ReaderControl(
            options.get("store_url"), options.get("job_id"), options.get("pace_s")
        )
        self.host, self.port = options["host"], int(options["port"])
        # Started by the first offset call, in the driver's streaming runner: the reader is
        # pickled for the tasks (read) before that, and a thread or socket cannot be.
        self._receiver: _Receiver | None = None
        self._end: int | None = None  # the log's end as this reader last saw it

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_receiver": None}

    @property
    def receiver(self) -> _Receiver:
        if self._receiver is None:
            self._receiver = _Receiver(self.host, self.port, self.sid)
        return self._receiver

    def initialOffset(self) -> dict[str, Any]:
        self.receiver  # noqa: B018 - connect now: lines sent before the first epoch count
        return {SID: self.sid, "next": 0, FINISHED: False}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_lines) if self.max_lines else ReadAllAvailable()

    def _receive(self, start: int) -> int:
        """The buffered lines appended to the log; the log's end after it."""
        if self.receiver.error is not None:
            raise SourceError("socket", self.receiver.error)
        lines = self.receiver.take()
        if not lines:  # nothing to write: the log's end as it is (files appear whole)
            self._end = max(self.log.end(), start)
            return self._end
        self._end = self._append(lines, start)
        return self._end

    def _append(self, lines: list[tuple[str, int]], floor: int, ended_ok: bool = False) -> int:
        """``lines`` appended to the log under its lock, once the fence said this driver still
        runs the job (``ended_ok``: its attempt may have ended, as its query stops); numbered
        on from the log's end and never below ``floor`` (a log lost with the checkpoint kept:
        new lines must not take numbers Spark read past). The log's end after them."""
        with self.log.locked():
            if self.fence is not None:
                self.fence.check(ended_ok=ended_ok)  # under the lock: nothing slips in between
            first = max(self.log.end(), floor)
            self.log.append(first, lines)
        return first + len(lines)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        nxt = int(start["next"])
        plan = self.control.plan(start)
        if plan.hold:
            return start
        end = self._receive(nxt)
        if plan.empty:
            return {**start, CV: plan.version}
        # Control's rate limit for an epoch's rows (stoker rate-limit JOB max_rows_per_epoch=N).
        max_lines = limit_of(plan, "max_rows_per_epoch", self.max_lines or None)
        if max_lines:
            end = min(end, nxt + int(max_lines))
        elif isinstance(limit, ReadMaxRows) and "max_rows_per_epoch" not in plan.limits:
            end = min(end, nxt + limit.max_rows)
        offset: dict[str, Any] = {SID: self.sid, "next": max(end, nxt), FINISHED: False}
        if plan.version is not None:
            offset[CV] = plan.version
        return offset

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The lines received so far, whatever one epoch may take (the backlog)."""
        if self._end is None:
            return None
        waiting = self._receiver.waiting() if self._receiver is not None else 0
        return {SID: self.sid, "next": self._end + waiting, FINISHED: False}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        a, b = int(start["next"]), int(end["next"])
        if b <= a:
            return []
        lines = self.log.read(a, b)
        cores = None if self.parts else self.control.cores()
        return [_Lines(g) for g in contiguous_groups(lines, partitions_for(self.parts, cores))]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, _Lines)
        if not self.stamp:
            for text, _ in partition.lines:
                yield (text,)
            return
        for text, micros in partition.lines:
            yield (text, datetime.fromtimestamp(micros / 1e6, UTC))

    def commit(self, end: dict[str, Any]) -> None:
        self.log.drop_below(int(end["next"]))

    def stop(self) -> None:
        if self._receiver is not None:
            self._receiver.stop(wait_s=2.0)
            self._keep_received()
        if self.fence is not None:
            self.fence.close()
        self.control.close_quietly()
        hush_if_spark_hung_up()

    def _keep_received(self) -> None:
        """The lines received since the last offset, appended to the log as the query stops
        (a graceful stop, a pause's restart): the next run's epochs read them. Best effort:
        a driver killed outright loses them, as it loses what the kernel held; a driver no
        longer the job's keeps nothing (another one may be numbering lines)."""
        assert self._receiver is not None
        lines = self._receiver.take()
        if not lines:
            return
        try:
            self._end = self._append(lines, self._end or 0, ended_ok=True)
            _log.info("source %s: %d lines received kept for the next epoch", self.sid, len(lines))
        except Exception as e:
            _log.warning(
                "source %s: %d lines received since the last epoch are lost as the query stops: %s",
                self.sid,
                len(lines),
                e,
            )


class SocketDataSource(DataSource):
    """Spark data source behind :func:`stoker.sources.socket`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        if self.options.get("include_timestamp") == "true":
            return "value string, timestamp timestamp"
        return "value string"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _SocketReader(dict(self.options))


@dataclass(frozen=True)
class SocketSource:
    """Lines from a TCP server at ``host:port`` (the source connects, as Spark's does)."""

    host: str
    port: int
    include_timestamp: bool = False
    max_lines_per_epoch: int | None = None
    partitions: int | None = None  # None: one per core the job's executors have

    bounded = False

    def describe(self) -> str:
        return f"socket({self.host!r}, {self.port})"

    @staticmethod
    def _log_folder(sid: str, state_dir: Path) -> Path:
        """Where the source ``sid`` of a job with this state folder logs the lines it takes."""
        return state_dir / "sources" / f"{sid}.socket"

    def state_behind(self, sid: str, state_dir: Path, offset: dict[str, Any]) -> str | None:
        """What this source's line log lacks that the checkpoint's newest ``offset`` names
        (lines below it are logged before an offset names them), or None."""
        nxt = int(offset.get("next") or 0)
        if nxt <= 0:
            return None
        folder = self._log_folder(sid, state_dir)
        end = LineLog(folder).end()
        if end >= nxt:
            return None
        has = "is missing" if not folder.exists() else f"ends at line {end}"
        return f"has read lines 0..{nxt - 1} of source {sid}, whose log {folder} {has}"

    def validate(self) -> None:
        if not isinstance(self.host, str) or not self.host or len(self.host) > 255:
            raise InvalidSource("socket.host", f"must be a host name or address, got {self.host!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int):
            raise InvalidSource("socket.port", f"must be an integer, got {self.port!r}")
        if not 0 < self.port < 65536:
            raise InvalidSource("socket.port", f"must be 1..65535, got {self.port}")
        if not isinstance(self.include_timestamp, bool):
            raise InvalidSource(
                "socket.include_timestamp", f"must be True or False, got {self.include_timestamp!r}"
            )
        for name in ("max_lines_per_epoch", "partitions"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 1
            ):
                raise InvalidSource(f"socket.{name}", f"must be an integer >= 1, got {value!r}")

    def open(
        self,
        spark: SparkSession,
        sid: str,
        state_dir: Path,
        context: SourceContext | None = None,
    ) -> DataFrame:
        opts = {
            "sid": sid,
            "host": self.host,
            "port": str(self.port),
            "include_timestamp": "true" if self.include_timestamp else "false",
            "log_path": str(self._log_folder(sid, state_dir).resolve()),
            "partitions": "" if self.partitions is None else str(self.partitions),
        }
        if self.max_lines_per_epoch:
            opts["max_lines_per_epoch"] = str(self.max_lines_per_epoch)
        if context is not None:
            opts["job_id"] = context.job_id
            opts["store_url"] = context.store_url
            if context.pace_s is not None:
                opts["pace_s"] = repr(float(context.pace_s))
            opts["driver"] = owner_to_json(this_owner())
        return spark.readStream.format(FORMAT).options(**opts).load()
