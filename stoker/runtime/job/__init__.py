"""A job's run in this process, one module per step of ``stoker.run``:

``api`` (``stoker.run``: reads the launcher's context once), ``plan`` (options, scope, the plan,
checked before anything starts), ``attempt_run`` (:class:`AttemptRun`: one attempt, phase by
phase), ``opening`` (Spark, the sources' stream, the executors' watch), ``ending`` (how an
attempt ends: ``classify_end``, the store transaction, nothing left prepared), ``lease`` (an
application job's attempt and lease), ``signals`` (SIGTERM/SIGINT), ``result``."""
