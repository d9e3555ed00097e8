"""What to change when Spark refuses a query's output mode, by Spark's own rules."""

from __future__ import annotations


def mode_hint(refusal: str) -> str:
    """What to change for Spark's refusal ``refusal`` of an output mode, by Spark's rules: the
    hint follows the operation Spark names (a session window refused in
    ``update`` mode was told to use ``update``)."""
    low = refusal.lower()
    if "session window" in low:
        return (
            "Spark takes session windows in output_mode='append' (with a watermark: "
            "withWatermark before session_window) or 'complete', not 'update'"
        )
    if "without watermark" in low:
        return (
            "an aggregation without a watermark needs Pipeline(..., output_mode='update') or "
            "'complete'; for 'append', add a watermark (withWatermark) on its event time"
        )
    if "no streaming aggregations" in low:
        return "'complete' needs an aggregation: Pipeline(..., output_mode='append') or 'update'"
    return "Pipeline(..., output_mode=...) takes 'append', 'update' or 'complete'"
