"""The Kafka source's talk with the brokers: client settings, which topic-partitions the
source reads, their earliest, last stable and by-timestamp offsets, and the offsets a job
starts from (kept in the state folder so that a restart before the first commit starts from the
same place).

Everything here runs in the reader's own process (``latestOffset``, on the driver's host) or
in the driver (the check at open). The records themselves are read by
:mod:`stoker.sources._kafka_read` on the executors.

Offsets are kept as ``{(topic, partition): offset}`` inside the source and written in Spark's
offset log as Spark's own Kafka source writes them: ``{"topic": {"partition": offset}}``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from stoker.errors import InvalidSource, SourceError

TP = tuple[str, int]
# librdkafka settings stoker sets itself; a user's option may not override them.
OWN_SETTINGS = frozenset(
    {
        "bootstrap.servers",
        "isolation.level",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "auto.offset.reset",
        "group.id",
        "enable.partition.eof",
    }
)
OPTION_PREFIX = "kafka."  # a consumer setting among the data source's options
ADMIN_TIMEOUT_S = 30.0
INSTALL_HINT = "the Kafka source needs confluent-kafka: pip install 'stoker[kafka]'"


def require_client() -> None:
    """Raise :class:`InvalidSource` naming the install when confluent-kafka is missing."""
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        raise InvalidSource("kafka", INSTALL_HINT) from None


def client_settings(bootstrap: str, options: dict[str, str], isolation: str) -> dict[str, Any]:
    """librdkafka settings for a metadata client or a reader's consumer."""
    conf: dict[str, Any] = dict(options)
    conf.update(
        {
            "bootstrap.servers": bootstrap,
            "isolation.level": isolation,
            # Positions are the job's, kept in Spark's offset log: the group never commits.
            "group.id": "stoker-kafka-source",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # A position deleted by retention is an error the source handles, not a jump.
            "auto.offset.reset": "error",
            "enable.partition.eof": False,
        }
    )
    conf.setdefault("log_level", 3)  # librdkafka's own notices (reconnects) are not errors
    return conf


def nest(offsets: dict[TP, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): o}`` as Spark's Kafka offset JSON ``{t: {"p": o}}``, in a stable order."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def flat(nested: Any) -> dict[TP, int]:
    """The inverse of :func:`nest`; an empty dict for anything else."""
    out: dict[TP, int] = {}
    if not isinstance(nested, dict):
        return out
    for t, parts in nested.items():
        if isinstance(parts, dict):
            for p, o in parts.items():
                out[(str(t), int(p))] = int(o)
    return out


class Brokers:
    """One AdminClient for the reader's process: metadata and offsets, each call bounded."""

    def __init__(
        self,
        bootstrap: str,
        options: dict[str, str],
        isolation: str,
        timeout: float = ADMIN_TIMEOUT_S,
    ) -> None:
        from confluent_kafka.admin import AdminClient

        self.bootstrap = bootstrap
        self.isolation = isolation
        self.timeout = timeout
        conf: dict[str, Any] = dict(options)
        conf["bootstrap.servers"] = bootstrap
        conf.setdefault("log_level", 3)
        self.admin = AdminClient(conf)

    def _unreachable(self, what: str, e: BaseException) -> SourceError:
        # Transient: the restart strategy tries again (a broker restarting, a network cut).
        return SourceError(
            "kafka.bootstrap_servers",
            f"cannot {what} from the Kafka brokers at {self.bootstrap!r} within "
            f"{self.timeout:.0f} s ({type(e).__name__}: {e})",
        )

    def topics(self) -> dict[str, int]:
        """Every topic (internal ones left out) and its partition count."""
        try:
            meta = self.admin.list_topics(timeout=self.timeout)
        except Exception as e:
            raise self._unreachable("read the topics", e) from e
        return {
            name: len(t.partitions)
            for name, t in meta.topics.items()
            if t.error is None and not name.startswith("__")
        }

    def assigned(self, topics: list[str] | None, pattern: str | None) -> set[TP]:
        """The topic-partitions the source reads now. A named topic that does not exist is
        bad input (:class:`InvalidSource`, exit 2): waiting for it would hang."""
        present = self.topics()
        if topics is not None:
            missing = [t for t in topics if t not in present]
            if missing:
                raise InvalidSource(
                    "kafka.topics",
                    f"topic {missing[0]!r} does not exist on {self.bootstrap!r}"
                    + (f" (and {len(missing) - 1} more named)" if len(missing) > 1 else "")
                    + "; create it, or name an existing one",
                )
            chosen = list(topics)
        else:
            rx = re.compile(pattern or "")
            chosen = [t for t in present if rx.fullmatch(t)]
        return {(t, p) for t in chosen for p in range(present[t])}

    def offsets(self, tps: set[TP], spec: str | int) -> dict[TP, int]:
        """``spec``: ``"earliest"``, ``"latest"`` (the last stable offset under
        read_committed: nothing undecided is offered) or a timestamp in ms (the first
        offset at or after it, the partition's end when none is)."""
        if not tps:
            return {}
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        if spec == "earliest":
            want = OffsetSpec.earliest()
        elif spec == "latest":
            want = OffsetSpec.latest()
        else:
            want = OffsetSpec.for_timestamp(int(spec))
        level = (
            IsolationLevel.READ_COMMITTED
            if self.isolation == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        asked = {TopicPartition(t, p): want for t, p in sorted(tps)}
        try:
            futures = self.admin.list_offsets(
                asked, isolation_level=level, request_timeout=self.timeout
            )
            out = {(k.topic, k.partition): int(f.result().offset) for k, f in futures.items()}
        except Exception as e:
            raise self._unreachable("read the offsets of " + _names(tps), e) from e
        if spec not in ("earliest", "latest"):
            # No record at or after the timestamp: start at the partition's end.
            ends = self.offsets({tp for tp, o in out.items() if o < 0}, "latest")
            out.update(ends)
        return out


def _names(tps: set[TP]) -> str:
    topics = sorted({t for t, _ in tps})
    return ", ".join(topics[:5]) + (f" and {len(topics) - 5} more" if len(topics) > 5 else "")


def parse_starting(value: Any) -> str | int | dict[TP, int]:
    """``starting_offsets`` as ``"earliest"``, ``"latest"``, a timestamp in ms, or explicit
    ``{(t, p): offset}`` (``-2``: earliest, ``-1``: latest, as in Spark). Raises
    :class:`InvalidSource` naming what is allowed."""
    import datetime as dt

    field = "kafka.starting_offsets"
    if value in ("earliest", "latest"):
        return str(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise InvalidSource(field, f"give a datetime with a time zone, got {value!r}")
        return int(value.timestamp() * 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise InvalidSource(field, f"a timestamp in ms must be >= 0, got {value}")
        return value
    if isinstance(value, dict) and value:
        out: dict[TP, int] = {}
        for t, parts in value.items():
            if not isinstance(t, str) or not isinstance(parts, dict) or not parts:
                raise InvalidSource(
                    field, "expects {topic: {partition: offset}}, e.g. {'orders': {0: 42}}"
                )
            for p, o in parts.items():
                try:
                    pn, on = int(p), int(o)
                except (TypeError, ValueError):
                    raise InvalidSource(
                        field, f"topic {t!r}: partition {p!r} -> {o!r} is not integers"
                    ) from None
                if pn < 0 or on < -2:
                    raise InvalidSource(
                        field,
                        f"topic {t!r} partition {pn}: offset {on} (use >= 0, -2 earliest, "
                        "-1 latest)",
                    )
                out[(t, pn)] = on
        return out
    raise InvalidSource(
        field,
        "expects 'earliest', 'latest', a timestamp (ms since the epoch, or an aware "
        f"datetime) or {{topic: {{partition: offset}}}}, got {value!r}",
    )


def encode_starting(value: str | int | dict[TP, int]) -> str:
    """The parsed ``starting_offsets`` as one string option for the reader."""
    if isinstance(value, dict):
        return json.dumps({"explicit": nest(value)})
    return json.dumps({"spec": value})


def decode_starting(text: str) -> str | int | dict[TP, int]:
    d = json.loads(text)
    if "explicit" in d:
        return flat(d["explicit"])
    spec: str | int = d["spec"]
    return spec


def resolve_start(
    brokers: Brokers, tps: set[TP], starting: str | int | dict[TP, int]
) -> dict[TP, int]:
    """Where each of ``tps`` starts. Explicit offsets name every partition they start: a
    partition they leave out starts at its earliest offset (as a partition added later)."""
    if not isinstance(starting, dict):
        return brokers.offsets(tps, starting)
    unknown = sorted(set(starting) - tps)
    if unknown:
        t, p = unknown[0]
        raise InvalidSource(
            "kafka.starting_offsets", f"topic {t!r} has no partition {p} among those read"
        )
    earliest = brokers.offsets({tp for tp in tps if starting.get(tp, -2) == -2}, "earliest")
    latest = brokers.offsets({tp for tp in tps if starting.get(tp) == -1}, "latest")
    out: dict[TP, int] = {}
    for tp in tps:
        o = starting.get(tp, -2)
        out[tp] = earliest[tp] if o == -2 else latest[tp] if o == -1 else o
    return out


def load_start(path: Path) -> dict[TP, int] | None:
    """The start offsets a job recorded at its first start; None before that."""
    try:
        return flat(json.loads(path.read_text())["start"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as e:
        raise SourceError(
            "kafka.start", f"{path} is damaged ({e}); it names where the job began"
        ) from e


def save_start(path: Path, start: dict[TP, int]) -> None:
    """Write the start offsets atomically (a crash leaves the old file or the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"start": nest(start)}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
