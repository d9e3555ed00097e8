"""Run settings: stoker's own keys and Spark configuration, from code or ``-D key=value``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from stoker.durations import parse_duration
from stoker.errors import InvalidInput


def parse_window(value: str | float | int, field_name: str) -> float:
    """Seconds from a retention window (``"7d"``, ``"12h"``, ``"30m"``, seconds): a positive
    duration (stoker.durations)."""
    return parse_duration(value, field_name, positive=True)


@dataclass(frozen=True)
class Settings:
    """Where and how a job runs. Defaults: ``local[*]`` Spark, SQLite under ``state_dir``."""

    trigger: float = 0.5
    state_dir: Path | None = None
    store: str | None = None
    master: str = "local[*]"
    lease_ttl: float = 30.0
    spark_conf: dict[str, str] = field(default_factory=dict)
    # Retention of the job's epoch records (None: keep all): the last N epochs and / or those
    # committed within a window, pruned by a background thread every ``retention_interval``.
    retention_epochs: int | None = None
    retention_time: float | None = None
    retention_interval: float = 10.0
    # Jobs of stoker's sources only: the readers pace epochs at the trigger interval while the
    # query runs at trigger 0, so control changes the interval without a query restart. False:
    # Spark's ProcessingTime trigger paces (a change of interval restarts the query).
    paced_trigger: bool = True
    # The progress watchdog (runtime/job/watchdog.py): an attempt whose query shows no progress
    # (no epoch, no progress or idle event, no task completing in an epoch) for this long, plus
    # the trigger interval, fails so that the restart strategy starts the next one. 0: off.
    progress_timeout: float = 300.0
    # Not given (-D stoker.progress_timeout): the bound adapts, never below that default, to
    # three times the longest quiet time the job showed while healthy (a job whose tasks
    # take ten minutes is not stalled at five).
    progress_adaptive: bool = True
    # A cancel lets the epoch in flight commit; one that has not ended after this long (a
    # hung sink, a stuck task) is abandoned: the job ends CANCELED, that epoch uncommitted
    # (it runs again if the job is restarted). For every driver, and the only bound for the
    # jobs of an application (the job manager's --cancel-timeout kills a lone job's driver).
    cancel_timeout: float = 60.0
    # A job manager's driver's start (runtime/startwatch.py): the app's import, its code before
    # stoker.run, opening and recovery (Spark's own start not counted) longer than this, and
    # the driver ends its attempt FAILED, naming the phase and where it hung. Not given: the
    # bound adapts to the job's recent starts, never below this floor (5 minutes). Given: any
    # positive duration (tests use seconds), or off.
    startup_timeout: float = 300.0
    startup_adaptive: bool = True

    KEYS = (
        "trigger",
        "state_dir",
        "store",
        "master",
        "lease_ttl",
        "retention.epochs",
        "retention.time",
        "retention.interval",
        "paced_trigger",
        "progress_timeout",
        "cancel_timeout",
        "startup_timeout",
    )

    def with_overrides(self, overrides: dict[str, str]) -> Settings:
        """Apply ``-D`` pairs: ``spark.*`` go to Spark, ``stoker.<key>`` to these settings."""
        s = self
        conf = dict(s.spark_conf)
        for key, value in overrides.items():
            if key.startswith("spark."):
                conf[key] = value
            elif key.startswith("stoker."):
                s = s._set(key[len("stoker.") :], value)
            else:
                raise InvalidInput(
                    key,
                    "unknown setting: use spark.<conf> or stoker.<key> with key one of "
                    + ", ".join(self.KEYS),
                )
        return replace(s, spark_conf=conf)

    def _set(self, key: str, value: Any) -> Settings:
        if key == "trigger":
            return replace(self, trigger=parse_duration(value, "stoker.trigger"))
        if key == "lease_ttl":
            ttl = parse_duration(value, "stoker.lease_ttl")
            if ttl < 1:
                raise InvalidInput("stoker.lease_ttl", "must be at least 1s")
            return replace(self, lease_ttl=ttl)
        if key == "state_dir":
            return replace(self, state_dir=Path(value))
        if key == "store":
            return replace(self, store=str(value))
        if key == "master":
            return replace(self, master=str(value))
        if key == "retention.epochs":
            text = str(value).strip()
            if not text.isdigit() or int(text) < 1:
                raise InvalidInput(
                    "stoker.retention.epochs", f"must be a whole number >= 1, got {value!r}"
                )
            return replace(self, retention_epochs=int(text))
        if key == "retention.time":
            return replace(self, retention_time=parse_window(value, "stoker.retention.time"))
        if key == "retention.interval":
            every = parse_duration(value, "stoker.retention.interval")
            if every <= 0:
                raise InvalidInput("stoker.retention.interval", "must be a positive duration")
            return replace(self, retention_interval=every)
        if key == "paced_trigger":
            text = str(value).strip().lower()
            if text not in ("true", "false", "1", "0"):
                raise InvalidInput("stoker.paced_trigger", f"must be true or false, got {value!r}")
            return replace(self, paced_trigger=text in ("true", "1"))
        if key == "progress_timeout":
            text = str(value).strip().lower()
            if text in ("off", "none"):
                return replace(self, progress_timeout=0.0, progress_adaptive=False)
            bound = parse_duration(value, "stoker.progress_timeout")
            return replace(self, progress_timeout=bound, progress_adaptive=False)
        if key == "cancel_timeout":
            wait = parse_duration(value, "stoker.cancel_timeout")
            if wait <= 0:
                raise InvalidInput("stoker.cancel_timeout", "must be a positive duration")
            return replace(self, cancel_timeout=wait)
        if key == "startup_timeout":
            if str(value).strip().lower() in ("off", "none"):
                return replace(self, startup_timeout=0.0, startup_adaptive=False)
            bound = parse_duration(value, "stoker.startup_timeout")
            if bound <= 0:
                raise InvalidInput("stoker.startup_timeout", "must be a positive duration or off")
            return replace(self, startup_timeout=bound, startup_adaptive=False)
        raise InvalidInput(
            f"stoker.{key}", "unknown stoker setting; known: " + ", ".join(self.KEYS)
        )


def parse_pairs(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``["a=1", "b=2"]`` -> ``{"a": "1", "b": "2"}``, naming any malformed pair."""
    out = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key.strip():
            raise InvalidInput("-D", f"{p!r} is not key=value")
        out[key.strip()] = value
    return out
