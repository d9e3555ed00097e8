"""A chaos harness in the spirit of Jepsen (a nemesis injects faults, a checker reads the
history and the end state) and of seeded simulation (a seed gives one schedule, printed, and
replays it): :mod:`.schedule` draws the faults, :mod:`.nemesis` does them to real processes,
a real PostgreSQL server and a real disk, :mod:`.runner` runs a workload through them as an
operator would, :mod:`.checker` says what must hold. ``python -m tests.chaos`` runs seeds;
tests/chaos/test_chaos.py is CI's short lane and the kept seeds that once found a bug."""
