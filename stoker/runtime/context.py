"""What the transform sees of its epoch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from stoker.types import AttemptNo, ControlVersion, Epoch, JobId

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stoker.control import Event


@dataclass(frozen=True)
class EpochContext:
    """The epoch being processed and the control state pinned for it (read-only).

    A replay of the epoch after a crash sees the same ``config``, ``control_version`` and
    ``events`` (the custom control events that apply at this epoch, in the order sent).
    """

    job_id: JobId
    epoch: Epoch
    attempt: AttemptNo
    control_version: ControlVersion
    config: Mapping[str, Any]
    spark: SparkSession
    events: tuple[Event, ...] = field(default=())

    @staticmethod
    def frozen(config: dict[str, Any]) -> Mapping[str, Any]:
        return MappingProxyType(dict(config))
