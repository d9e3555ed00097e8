"""Control at an epoch boundary, on the driver: what the epoch's pinned version brings.

Called by the epoch protocol right after the pin (step 2). The version and the events applied
at the epoch are the store's record, so a replay of the epoch gets exactly what the first run
got: the same config, the same custom events (minus those a handler rejected), the same log
levels. Rate limits and pause act earlier, in the sources' readers, which planned the epoch's
offsets under the same version (see :mod:`stoker.sources._control`).
"""

from __future__ import annotations

import logging
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from stoker.control import LOCAL_PROPERTY, ControlView, Event, _set_driver_view, apply_python_levels
from stoker.store.records import ControlEvent, ControlSnapshot
from stoker.types import ControlKind, ControlVersion, Epoch, JobId

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stoker.pipeline import Pipeline
    from stoker.runtime.context import EpochContext
    from stoker.store import Store

log = logging.getLogger("stoker.control")


class EpochControl:
    """The driver's side of control for one attempt."""

    def __init__(self, store: Store, job: JobId, pipeline: Pipeline) -> None:
        self.store = store
        self.job = job
        self.pipeline = pipeline
        self._snapshots: dict[int, ControlSnapshot] = {}
        self._last_version: int | None = None
        self._levels: dict[str, Any] | None = None  # log levels set on this driver

    def snapshot(self, version: ControlVersion) -> ControlSnapshot:
        if version not in self._snapshots:
            self._snapshots[version] = self.store.control_snapshot(self.job, version)
            if len(self._snapshots) > 16:
                self._snapshots.pop(next(iter(self._snapshots)))
        return self._snapshots[version]

    def events_of(self, epoch: Epoch, version: ControlVersion) -> list[ControlEvent]:
        """The events applied at ``epoch``. Read only when the version moved: an epoch pinned
        at the version of the one before applies no event (the cheap path of every epoch)."""
        if self._last_version == version:
            return []
        self._last_version = version
        return self.store.applied_controls(self.job, epoch)

    def begin(
        self, spark: SparkSession, epoch: Epoch, version: ControlVersion, ctx: EpochContext
    ) -> tuple[Event, ...]:
        """Apply the epoch's control on the driver; the custom events its transform sees."""
        snap = self.snapshot(version)
        applied = self.events_of(epoch, version)
        self._apply_levels(spark, snap.log_level)
        view = ControlView(
            job_id=str(self.job),
            epoch=int(epoch),
            version=int(version),
            config=MappingProxyType(dict(snap.config)),
            log_level=MappingProxyType(snap.log_level),
        )
        _set_driver_view(view)
        # Tasks of the Spark jobs this thread launches read it (stoker.control.current()).
        spark.sparkContext.setLocalProperty(LOCAL_PROPERTY, view.to_json())
        events: list[Event] = []
        for ev in applied:
            if ev.kind != ControlKind.EVENT:
                if ev.kind != ControlKind.CHECKPOINT:
                    log.info(
                        "job %s: control %s (v%d) applies at epoch %d",
                        self.job,
                        ev.kind,
                        ev.version,
                        epoch,
                    )
                continue
            event = Event(str(ev.body["name"]), ev.body.get("payload"), ev.control_id, ev.version)
            handler = self.pipeline.handlers.get(event.name)
            if handler is not None:
                try:
                    handler(event, ctx)
                except Exception as e:
                    reason = f"handler of {event.name!r} raised {type(e).__name__}: {e}"
                    log.warning(
                        "job %s: control event %s rejected: %s", self.job, ev.control_id, reason
                    )
                    self.store.reject_control(self.job, ev.control_id, reason)
                    continue
            events.append(event)
        return tuple(events)

    def end(self) -> None:
        _set_driver_view(None)

    def _apply_levels(self, spark: SparkSession, levels: dict[str, Any]) -> None:
        if levels == (self._levels or {}) or (not levels and self._levels is None):
            return
        root = levels.get("root")
        if root:
            spark.sparkContext.setLogLevel(str(root))
        jvm = spark.sparkContext._jvm
        for name, level in (levels.get("loggers") or {}).items():
            try:
                assert jvm is not None
                jlevel = jvm.org.apache.logging.log4j.Level.toLevel(str(level))
                jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(str(name), jlevel)
            except Exception:
                log.warning(
                    "job %s: could not set the JVM logger %s to %s",
                    self.job,
                    name,
                    level,
                    exc_info=True,
                )
        apply_python_levels(levels)
        self._levels = dict(levels)
        log.info("job %s: log levels now %s", self.job, levels)
