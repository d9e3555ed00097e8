"""A job's error, cut to what its user acts on: :mod:`stoker.errortext`, shared with the job
manager's web UI (its exception history); the CLI's name for it."""

from stoker.errortext import ErrorSummary, Frame, is_library, one_line, status_lines, summarize

__all__ = ["ErrorSummary", "Frame", "is_library", "one_line", "status_lines", "summarize"]
