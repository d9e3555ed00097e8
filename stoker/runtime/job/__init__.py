"""A job's run in this process: ``api`` (``stoker.run``), ``plan`` (checked before anything
starts), ``attempt_run`` (one attempt, phase by phase), ``ending`` (how an attempt ends),
``lease`` (an application job's attempt), ``signals`` (SIGTERM/SIGINT), ``result``."""
