"""The store's protocols, one per concept; :class:`~stoker.store.base.Store` is their union.

* ``jobs.py``: :class:`JobStore` (jobs and applications), :class:`ControlStore` (a job's
  config as numbered control versions);
* ``runs.py``: :class:`AttemptStore` (attempts and their leases), :class:`EpochStore`,
  :class:`TxnStore` (sink transactions), :class:`RetentionStore` (pruning committed epochs);
* ``fleet.py``: :class:`ClusterStore`, :class:`ScalingStore`, :class:`LeaderStore`.
"""
