"""The SQL store: one mixin per concept over the shared plumbing; backends supply the dialect."""

from __future__ import annotations

from stoker.store._retention import RetentionMixin
from stoker.store.records import WriteLock
from stoker.store.sql_attempts import AttemptsMixin
from stoker.store.sql_clusters import ClustersMixin
from stoker.store.sql_control import ControlMixin
from stoker.store.sql_epochs import EpochsMixin
from stoker.store.sql_jobs import JobsMixin
from stoker.store.sql_leader import LeaderMixin
from stoker.store.sql_lineage import LineageMixin
from stoker.store.sql_operations import OperationsMixin
from stoker.store.sql_recovery import RecoveryHoldMixin
from stoker.store.sql_scaling import ScalingMixin
from stoker.store.sql_standbys import StandbysMixin
from stoker.store.sql_txns import TxnsMixin


class SqlStore(
    JobsMixin,
    AttemptsMixin,
    RecoveryHoldMixin,
    EpochsMixin,
    TxnsMixin,
    ControlMixin,
    LeaderMixin,
    RetentionMixin,
    ClustersMixin,
    ScalingMixin,
    OperationsMixin,
    StandbysMixin,
    LineageMixin,
):
    """Implements :class:`stoker.store.base.Store` for any DB-API backend.

    Each concept's methods live in their own module (``sql_jobs``, ``sql_attempts``,
    ``sql_recovery``, ``sql_epochs``, ``sql_txns``, ``sql_control``, ``sql_leader``, ``_retention``,
    ``sql_clusters``, ``sql_scaling``, ``sql_operations``, ``sql_standbys``, ``sql_lineage``),
    all on
    :class:`~stoker.store._sqlbase.SqlBase` (pool, transactions, migrations). A backend
    subclass provides ``_connect()``, ``_begin(cur, write)`` and ``dialect``.
    """

    def write_lock(self) -> WriteLock | None:
        return None  # a server backend: it sees and ends its own stuck sessions
