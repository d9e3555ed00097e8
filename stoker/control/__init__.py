"""Control of a running job, as user code sees it.

``current()`` is the control state of the epoch being processed, the same in every task of the
epoch and again in a replay of it: on the driver inside the transform, and in Spark tasks
(a UDF, ``mapInPandas``, a data source's ``read``), where it comes from a local property the
epoch sets on the Spark jobs it launches. Nothing here imports Spark until it is called.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

LOCAL_PROPERTY = "stoker.control"


@dataclass(frozen=True)
class Event:
    """A custom control event, as handlers and ``ctx.events`` see it."""

    name: str
    payload: Any
    control_id: str
    version: int


@dataclass(frozen=True)
class ControlView:
    """The control state pinned for one epoch."""

    job_id: str
    epoch: int
    version: int
    config: Mapping[str, Any]
    log_level: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "job_id": self.job_id,
                "epoch": self.epoch,
                "version": self.version,
                "config": dict(self.config),
                "log_level": dict(self.log_level),
            },
            sort_keys=True,
        )

    @staticmethod
    def from_json(text: str) -> ControlView:
        d = json.loads(text)
        return ControlView(
            job_id=str(d["job_id"]),
            epoch=int(d["epoch"]),
            version=int(d["version"]),
            config=MappingProxyType(dict(d.get("config") or {})),
            log_level=MappingProxyType(dict(d.get("log_level") or {})),
        )


_driver = threading.local()  # the view of the epoch running on this driver thread
_applied_levels: dict[str, Any] = {}  # in a Python worker: the levels set there already


def _set_driver_view(view: ControlView | None) -> None:
    _driver.view = view


def current() -> ControlView | None:
    """The control state of the epoch in progress; None outside one.

    In a Spark task it also brings the worker's Python loggers to the epoch's log levels.
    """
    view: ControlView | None = getattr(_driver, "view", None)
    if view is not None:
        return view
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - stoker always has pyspark beside it
        return None
    tc = TaskContext.get()
    if tc is None:
        return None
    text = tc.getLocalProperty(LOCAL_PROPERTY)
    if not text:
        return None
    view = ControlView.from_json(text)
    apply_python_levels(view.log_level)
    return view


def apply_python_levels(levels: Mapping[str, Any]) -> None:
    """Set Python loggers to control's levels (root and named), once per change."""
    from stoker.control.events import PYTHON_LEVELS

    wanted = {"": levels.get("root"), **dict(levels.get("loggers") or {})}
    for name, level in wanted.items():
        if level is None or _applied_levels.get(name) == level:
            continue
        number = PYTHON_LEVELS.get(str(level), logging.INFO)
        logging.getLogger(name or None).setLevel(number)
        if not name:
            # py4j logs every gateway call at DEBUG: a root level of DEBUG must not turn
            # that on (it would slow the driver down by orders of magnitude).
            logging.getLogger("py4j").setLevel(max(number, logging.WARNING))
        _applied_levels[name] = level


__all__ = ["LOCAL_PROPERTY", "ControlView", "Event", "current"]
