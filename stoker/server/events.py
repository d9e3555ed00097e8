"""``GET /v1/events``: what happens to jobs, as server-sent events (``text/event-stream``).

The store is the bus, and drivers write to it, not to the manager; so one poller per app
(:class:`EventFeed`, a thread started by the first client and stopped a while after the last
one left) reads the store through the manager every ``POLL_S`` and turns what changed into
events in a bounded ring. Each client streams from the ring from where it is; the poller's
reads do not grow with the number of clients.

Kinds (the SSE ``event:`` field; ``data:`` is one JSON object with ``job_id``):
``job`` (a state change or a new job), ``epoch`` (an epoch committed), ``control`` (a control
event's status change), ``rescale`` (a rescale recorded or its status changed), ``resync``
(the client's ``Last-Event-ID`` is from another run of the manager or fell out of the ring:
read the current state over REST, then go on from this event).

Every event has an ``id:`` (``<run>-<n>``): a client that reconnects sends it as
``Last-Event-ID`` (browsers' EventSource do) and gets every later event still in the ring.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import Request

from stoker.errors import StokerError, TooManyStreams
from stoker.redact import redact_answer
from stoker.types import JobKind

if TYPE_CHECKING:
    from stoker.manager import JobManager
    from stoker.store import JobRecord

log = logging.getLogger("stoker.server.events")

POLL_S = 0.5
RING = 10_000  # events kept for clients that reconnect (a few minutes of a busy manager)
EPOCHS_READ = 50  # per live job and poll: more than can commit in half a second
CONTROLS_READ = 20
RESCALES_READ = 10
IDLE_STOP_S = 30.0  # the poller stops this long after its last client left
HEARTBEAT_S = 15.0  # a comment line keeps proxies from closing a quiet stream
MAX_STREAMS = 64  # event streams open at once; the next is 429
# Of those, what the read-only token may hold: a reader cannot take every stream from the
# full token's clients.
MAX_READ_STREAMS = MAX_STREAMS // 2
KINDS = ("job", "epoch", "control", "rescale")


@dataclass(frozen=True)
class Event:
    """One event in the ring; ``seq`` orders them within a run of the manager."""

    seq: int
    kind: str
    job_id: str
    data: dict[str, Any]


@dataclass
class _Seen:
    """What the poller last saw of one job (or application)."""

    state: str
    epoch: int = -1
    control_version: int | None = None
    controls: dict[str, str] = field(default_factory=dict)  # control id -> status
    controls_open: bool = True
    scaling_key: Any = None
    rescales: dict[int, str] = field(default_factory=dict)  # rescale id -> status


class EventFeed:
    """The shared poller and its ring of events."""

    def __init__(self, manager: JobManager, poll_s: float = POLL_S) -> None:
        self.manager = manager
        self.poll_s = poll_s
        self.run = secrets.token_hex(4)  # ids of another run are not resumable here
        self._ring: deque[Event] = deque(maxlen=RING)
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self._seen: dict[str, _Seen] = {}
        self._clients = 0
        self._streams = self._read_streams = 0  # open or about to (take_stream)
        self._last_client = time.monotonic()
        self._running = False
        self._polled = False  # the first poll is every known job's baseline
        self._poll_lock = threading.Lock()
        self._stop = threading.Event()

    # clients -------------------------------------------------------------------------------
    def take_stream(self, read_only: bool = False) -> None:
        """Count a stream about to open, or :class:`TooManyStreams` when ``MAX_STREAMS`` are
        open already (each holds a connection and a task of the server: without a cap,
        clients that open streams and never read could exhaust it), or, for the read-only
        token, ``MAX_READ_STREAMS``. Counted here, when the call is taken, not when the
        stream starts: a burst of calls cannot all pass before the first is counted. Every
        stream taken is given back (:meth:`give_back_stream`)."""
        with self._lock:
            if self._streams >= MAX_STREAMS:
                raise TooManyStreams(MAX_STREAMS)
            if read_only and self._read_streams >= MAX_READ_STREAMS:
                raise TooManyStreams(MAX_READ_STREAMS, of=" with the read-only token")
            self._streams += 1
            self._read_streams += read_only

    def give_back_stream(self, read_only: bool = False) -> None:
        with self._lock:
            self._streams -= 1
            self._read_streams -= read_only

    def attach(self) -> int:
        """A client joins: the poller runs (a first poll done when this returns, so what
        happens from now on is an event); the newest seq now."""
        with self._lock:
            self._clients += 1
            start, self._running = not self._running, True
        if start:
            self._stop.clear()
            self.poll_once()
            threading.Thread(target=self._loop, name="stoker-events", daemon=True).start()
        return self.newest()

    def detach(self) -> None:
        with self._lock:
            self._clients -= 1
            self._last_client = time.monotonic()

    def close(self) -> None:
        self._stop.set()

    def newest(self) -> int:
        with self._lock:
            return self._ring[-1].seq if self._ring else 0

    def resume_point(self, last_event_id: str | None) -> tuple[int, bool]:
        """(the seq to stream after, whether the client missed events: a ``resync``)."""
        if not last_event_id:
            return self.newest(), False
        run, _, n = last_event_id.strip().rpartition("-")
        if run != self.run or not n.isdigit():
            return self.newest(), True
        seq = int(n)
        with self._lock:
            oldest = self._ring[0].seq if self._ring else self.newest() + 1
            newest = self._ring[-1].seq if self._ring else 0
        if seq > newest or seq < oldest - 1:
            return self.newest(), True
        return seq, False

    def after(self, seq: int, job: str | None = None) -> list[Event]:
        """Events after ``seq`` (of job ``job`` only, if given), oldest first."""
        with self._lock:
            found = [e for e in self._ring if e.seq > seq]
        return [e for e in found if job is None or e.job_id == job]

    # the poller ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            with self._lock:
                if self._clients <= 0 and time.monotonic() - self._last_client > IDLE_STOP_S:
                    self._running = False
                    return
            try:
                self.poll_once()
            except StokerError as e:  # the store unavailable: tried again next poll
                log.warning("events: reading the store failed: %s", e)
            except Exception:  # a bug: logged, and the stream goes on with the next poll
                log.exception("events: a poll failed")
        with self._lock:
            self._running = False

    def poll_once(self) -> None:
        """Read what changed since the last poll and add it to the ring. The first sight of a
        job that existed before the feed started is its baseline (no event); a job created
        since is a ``job`` event, and so is every state change."""
        with self._poll_lock:
            first, self._polled = not self._polled, True
            records = self.manager.all_records()
            changed = self._jobs(records, first)
            live = [r for r in records if not r.state.terminal or str(r.job_id) in changed]
            jobs = [r.job_id for r in live if r.kind == JobKind.JOB]
            epochs = self.manager.recent_epochs_of(jobs, EPOCHS_READ)
            due = [r.job_id for r in live if self._controls_due(r)]
            controls = self.manager.recent_controls_of(due, CONTROLS_READ)
            owners = [r.job_id for r in live if r.app_id is None and self._scaling_due(r)]
            rescales = self.manager.recent_rescales_of(owners, RESCALES_READ)
            for r in live:
                seen = self._seen[str(r.job_id)]
                if r.job_id in epochs:
                    self._epochs(r, seen, epochs[r.job_id])
                if r.job_id in controls:
                    self._controls(r, seen, controls[r.job_id], first)
                if r.job_id in rescales:
                    self._rescales(r, seen, rescales[r.job_id], first)

    def _jobs(self, records: Iterable[JobRecord], first: bool) -> set[str]:
        """Add the state changes and new jobs; the ids of both."""
        changed = set()
        for r in records:
            jid, state = str(r.job_id), str(r.state)
            seen = self._seen.get(jid)
            if seen is None:
                changed.add(jid)
                # Known before the feed started: its newest epoch is the baseline (-2).
                self._seen[jid] = _Seen(state=state, epoch=-2 if first else -1)
                if not first:
                    self._add("job", jid, self._job_data(r, None))
            elif seen.state != state:
                changed.add(jid)
                self._add("job", jid, self._job_data(r, seen.state))
                seen.state = state
        return changed

    @staticmethod
    def _job_data(r: JobRecord, previous: str | None) -> dict[str, Any]:
        return {
            "job_id": str(r.job_id),
            "kind": r.kind.value.lower(),
            "state": str(r.state),
            "previous": previous,
            "attempt": int(r.current_attempt),
            "app_id": None if r.app_id is None else str(r.app_id),
            "error": r.last_error,
            "at": r.updated_at,
        }

    def _epochs(self, r: JobRecord, seen: _Seen, epochs: list[Any]) -> None:
        committed = sorted((e for e in epochs if e.committed_at is not None), key=lambda e: e.epoch)
        if seen.epoch == -2:
            seen.epoch = max([seen.epoch, *(e.epoch for e in committed)])
            return
        for e in committed:
            if e.epoch > seen.epoch:
                seen.epoch = e.epoch
                self._add(
                    "epoch",
                    str(r.job_id),
                    {
                        "job_id": str(r.job_id),
                        "epoch": int(e.epoch),
                        "rows": e.rows_in,
                        "final": e.final,
                        "attempt": int(e.decided_by or e.pinned_by),
                        "control_version": int(e.control_version),
                        "committed_at": e.committed_at,
                        "duration_ms": e.duration_ms,
                        "backlog": e.backlog,
                    },
                )

    def _controls_due(self, r: JobRecord) -> bool:
        seen = self._seen[str(r.job_id)]
        return seen.controls_open or seen.control_version != r.control_version

    def _controls(self, r: JobRecord, seen: _Seen, events: list[Any], mute: bool) -> None:
        seen.control_version = int(r.control_version)
        seen.controls_open = False
        for ev in reversed(events):  # oldest first
            status = str(ev.status)
            seen.controls_open = seen.controls_open or ev.ended_at is None
            if seen.controls.get(ev.control_id) == status:
                continue
            seen.controls[ev.control_id] = status
            if not mute:
                self._add(
                    "control",
                    str(r.job_id),
                    {
                        "job_id": str(r.job_id),
                        "control_id": ev.control_id,
                        "kind": str(ev.kind),
                        "status": status,
                        "version": int(ev.version),
                        "applied_epoch": ev.applied_epoch,
                        "sender": ev.sender,
                        "reason": ev.reason,
                    },
                )
        if len(seen.controls) > 4 * CONTROLS_READ:
            keep = {ev.control_id for ev in events}
            seen.controls = {k: v for k, v in seen.controls.items() if k in keep}

    def _scaling_due(self, r: JobRecord) -> bool:
        """Rescales are read only when the owner's scaling, target or executors moved (every
        decision, observation and bounds change moves one of them), or one is under way."""
        seen = self._seen[str(r.job_id)]
        executors = (r.resources or {}).get("executors")
        key = (json.dumps(r.scaling, sort_keys=True), r.executor_target, executors)
        open_ = any(s in ("decided", "waiting") for s in seen.rescales.values())
        due = seen.scaling_key != key or open_
        seen.scaling_key = key
        return due

    def _rescales(self, r: JobRecord, seen: _Seen, found: list[Any], mute: bool) -> None:
        for rs in reversed(found):
            if seen.rescales.get(rs.rescale_id) == rs.status:
                continue
            seen.rescales[rs.rescale_id] = rs.status
            if not mute:
                self._add(
                    "rescale",
                    str(r.job_id),
                    {
                        "job_id": str(r.job_id),
                        "rescale_id": rs.rescale_id,
                        "kind": rs.kind,
                        "status": rs.status,
                        "from": rs.from_executors,
                        "to": rs.to_executors,
                        "reason": rs.reason,
                        "at": rs.at,
                    },
                )
        if len(seen.rescales) > 4 * RESCALES_READ:
            keep = {rs.rescale_id for rs in found}
            seen.rescales = {k: v for k, v in seen.rescales.items() if k in keep}

    def _add(self, kind: str, job: str, data: dict[str, Any]) -> None:
        # Masked as every REST answer is (a job's error may hold a DSN with its password, a
        # control event's payload a token): the read-only token reads this stream too.
        data = redact_answer(data)
        with self._lock:
            self._ring.append(Event(next(self._seq), kind, job, data))


def frame(run: str, ev: Event) -> str:
    """One event in the wire format of server-sent events."""
    return f"id: {run}-{ev.seq}\nevent: {ev.kind}\ndata: {json.dumps(ev.data, default=str)}\n\n"


async def stream(
    feed: EventFeed,
    request: Request,
    job: str | None,
    last_event_id: str | None,
    tick: float = 0.2,
) -> AsyncIterator[str]:
    """A client's stream: a ``resync`` first if it missed events, then every event after its
    point, until it disconnects."""
    await asyncio.to_thread(feed.attach)
    try:
        seq, missed = feed.resume_point(last_event_id)
        yield "retry: 2000\n\n"  # how soon an EventSource reconnects
        if missed:
            data = {"job_id": job, "reason": "events were missed: read the state over REST"}
            yield frame(feed.run, Event(seq, "resync", job or "", data))
        quiet_since = time.monotonic()
        while not await request.is_disconnected():
            events = feed.after(seq, job)
            if events:
                seq = events[-1].seq
                yield "".join(frame(feed.run, e) for e in events)
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > HEARTBEAT_S:
                yield ": keep-alive\n\n"
                quiet_since = time.monotonic()
            await asyncio.sleep(tick)
    finally:
        feed.detach()


__all__ = ["KINDS", "Event", "EventFeed", "frame", "stream"]
