"""What a user writes: sources, a per-epoch transform, sinks, and declared config defaults."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stoker.control.events import check_with_schema, merge_config
from stoker.errors import InvalidPipeline
from stoker.sinks.base import TwoPhaseSink
from stoker.sources.base import MapFn, Source
from stoker.types import JobId, job_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from stoker.runtime.context import EpochContext

Transform = Callable[..., "DataFrame"]


@dataclass(frozen=True)
class _Input:
    source: Source
    map: MapFn | None


def _identity(df: DataFrame, ctx: EpochContext) -> DataFrame:
    return df


OUTPUT_MODES = ("append", "update", "complete")


class Pipeline:
    """A streaming pipeline: ``Pipeline(name, config).source(...).transform(fn).sink(...)``.

    ``name`` is the default job id. ``config`` declares the user config keys and their
    defaults; the transform sees them as ``ctx.config`` (pinned per epoch).
    """

    def __init__(
        self,
        name: str,
        config: Mapping[str, Any] | type | None = None,
        *,
        output_mode: str = "append",
    ) -> None:
        self.name = name
        # Spark's output mode of the streaming query: "append" (the default), or "update" /
        # "complete" for a source map that aggregates without a watermark (each epoch's
        # transform then sees the groups that changed, or all of them).
        if output_mode not in OUTPUT_MODES:
            raise InvalidPipeline(
                "output_mode", f"must be one of {', '.join(OUTPUT_MODES)}, got {output_mode!r}"
            )
        self.output_mode = output_mode
        # A pydantic model class declares the config with types and constraints: its fields'
        # defaults are the defaults, and every value (at submit and by control) is checked
        # against its JSON schema, also by a job manager that never imports this file.
        self.config_schema: dict[str, Any] | None = None
        if isinstance(config, type):
            self.config, self.config_schema = _from_model(config)
        else:
            self.config = dict(config or {})
        self.inputs: list[_Input] = []
        self.sinks: list[TwoPhaseSink] = []
        self._transform: Transform = _identity
        self._transform_arity = 2
        # The streaming part (see stream()): on the sources' union, before the epochs.
        self.stream_fn: MapFn | None = None
        # Handlers of custom control events, by event name (see on_control).
        self.handlers: dict[str, Callable[..., Any]] = {}

    def source(self, source: Source, map: MapFn | None = None) -> Pipeline:
        """Add an input. ``map`` (df -> df) shapes this source before the sources are unioned."""
        self.inputs.append(_Input(source, map))
        return self

    def stream(self, fn: MapFn) -> Pipeline:
        """Set the streaming part, ``fn(df) -> DataFrame``, run once on the whole stream (the
        sources' union) before it is cut into epochs. State lives here, across epochs, in
        Spark's checkpoint: ``groupBy(...).agg(...)`` gives running totals,
        ``dropDuplicates`` drops a duplicate whichever epoch it comes in (bound it with
        ``withWatermark``). An aggregation needs ``Pipeline(..., output_mode="update")`` (each
        epoch writes the keys it changed; a PostgreSQL sink upserts them on ``key=``) or
        ``"complete"``. The per-epoch :meth:`transform` runs after it, on each epoch's rows.
        Stateless work may go either place; state across epochs only here."""
        if not callable(fn):
            raise InvalidPipeline("stream", f"must be callable, got {type(fn).__name__}")
        self.stream_fn = fn
        return self

    def transform(self, fn: Transform) -> Pipeline:
        """Set the per-epoch transform, ``fn(df, ctx) -> DataFrame`` (or ``fn(df)``). It sees
        one epoch's rows at a time: an aggregation or a deduplication here covers that epoch
        only (stoker warns at the start); for state across epochs use :meth:`stream`."""
        if not callable(fn):
            raise InvalidPipeline("transform", f"must be callable, got {type(fn).__name__}")
        self._transform = fn
        self._transform_arity = _arity(fn)
        return self

    def on_control(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a handler of custom control events named ``name``::

            @p.on_control("reload_rules")
            def reload(event, ctx): ...

        It is called on the driver at the boundary of the epoch the event applies at (again in
        a replay of that epoch), before the transform, with the event (``name``, ``payload``)
        and the epoch's context; the transform sees the event in ``ctx.events``. A handler that
        raises rejects the event (its status says why); the epoch goes on without it. Only
        registered names are accepted by ``POST /v1/jobs/{id}/control``.
        """
        from stoker.control.events import _EVENT_NAME

        if not isinstance(name, str) or not _EVENT_NAME.match(name):
            raise InvalidPipeline(
                "on_control", f"{name!r} is not an event name like 'reload_rules'"
            )

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            if not callable(fn):
                raise InvalidPipeline(f"on_control({name!r})", "the handler must be callable")
            self.handlers[name] = fn
            return fn

        return register

    def sink(self, sink: TwoPhaseSink) -> Pipeline:
        """Add an output. Several sinks commit together or not at all."""
        self.sinks.append(sink)
        return self

    @property
    def job_id(self) -> JobId:
        return job_id(self.name)

    def apply(self, df: DataFrame, ctx: EpochContext) -> DataFrame:
        """Run the user's transform for one epoch."""
        out = self._transform(df, ctx) if self._transform_arity == 2 else self._transform(df)
        from pyspark.sql import DataFrame as _DF

        if not isinstance(out, _DF):
            raise InvalidPipeline(
                "transform", f"must return a DataFrame, returned {type(out).__name__}"
            )
        return out

    def validate(self) -> None:
        """Check the pipeline before anything runs; raise :class:`InvalidPipeline`."""
        job_id(self.name)
        if not self.inputs:
            raise InvalidPipeline("sources", "the pipeline has no source; add one with .source()")
        if not self.sinks:
            raise InvalidPipeline("sinks", "the pipeline has no sink; add one with .sink()")
        if not callable(self._transform):
            raise InvalidPipeline("transform", "must be callable")
        for i, inp in enumerate(self.inputs):
            for attr in ("bounded", "validate", "open", "describe"):
                if not hasattr(inp.source, attr):
                    raise InvalidPipeline(
                        f"sources[{i}]", f"{inp.source!r} is not a source (no {attr})"
                    )
            if inp.map is not None and not callable(inp.map):
                raise InvalidPipeline(f"sources[{i}].map", "must be callable")
        names = set()
        for i, s in enumerate(self.sinks):
            for attr in ("prepare", "commit", "abort", "recover", "validate", "open", "name"):
                if not hasattr(s, attr):
                    raise InvalidPipeline(f"sinks[{i}]", f"{s!r} is not a sink (no {attr})")
            if s.name in names:
                raise InvalidPipeline(f"sinks[{i}]", f"two sinks are named {s.name!r}")
            names.add(s.name)
            self._tell_mode(i, s)
        for key in self.config:
            if not isinstance(key, str):
                raise InvalidPipeline("config", f"keys must be strings, got {key!r}")

    def _tell_mode(self, i: int, sink: TwoPhaseSink) -> None:
        """Tell a sink the output mode, which it writes as the mode means or refuses
        (InvalidSink naming what to use). A sink that does not say (no
        ``accept_output_mode``, e.g. a user-defined sink) only appends: it is refused any
        other mode rather than silently piling up a changelog or snapshots."""
        accept = getattr(sink, "accept_output_mode", None)
        if callable(accept):
            accept(self.output_mode)
            return
        if self.output_mode == "append":
            return
        what = (
            "each epoch's changed rows (a changelog)"
            if self.output_mode == "update"
            else "each epoch's whole result (one more full copy per epoch)"
        )
        raise InvalidPipeline(
            f"sinks[{i}]",
            f"sink {sink.name!r} does not declare output_mode={self.output_mode!r} (it has no "
            f"accept_output_mode): appending would write {what}. Use sinks.postgres(dsn, "
            "table, key=[...]) (update: an upsert; complete: a replace) or, for complete, "
            "sinks.files(path) (read <path>/current); or give the sink an "
            "accept_output_mode(mode) method that raises for modes it cannot write",
        )

    def check_managed(self) -> None:
        """Refuse, for a job run under a job manager (its driver, or a submission to it),
        a sink that says it may not run there (a sink's optional ``managed_refusal()``, e.g.
        :func:`stoker.sinks.console` without ``allow_under_manager=True``)."""
        for i, s in enumerate(self.sinks):
            refusal = getattr(s, "managed_refusal", None)
            why = refusal() if callable(refusal) else None
            if why:
                raise InvalidPipeline(f"sinks[{i}]", f"sink {s.name!r}: {why}")

    def check_targets(self) -> None:
        """Refuse two sinks that write one place, once each sink's ``validate`` has resolved
        where it writes (a sink's optional ``target()``; e.g. one PostgreSQL table written
        unqualified and schema-qualified, or reached through two search paths): their parts
        would share one name, and each sink's commit would roll the other's back."""
        seen: dict[str, tuple[int, str]] = {}
        for i, s in enumerate(self.sinks):
            where = getattr(s, "target", None)
            target = where() if callable(where) else None
            if target is None:
                continue
            if target in seen:
                j, other = seen[target]
                raise InvalidPipeline(
                    f"sinks[{i}]",
                    f"sinks {other!r} (sinks[{j}]) and {s.name!r} both write {target}; a "
                    "table is written by one sink of a pipeline: drop one, or point it at "
                    "another table",
                )
            seen[target] = (i, s.name)

    def check_config(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The declared defaults with ``values`` on top, each value checked against its default.

        A key the pipeline does not declare, or a value of another type than its default (an
        int is a float too; a default of None takes anything), is :class:`InvalidInput`
        naming ``config.<key>``, the declared keys and the type expected. Nothing is changed.
        """
        if self.config_schema is not None:
            return check_with_schema(self.config_schema, self.config, values)
        return merge_config(self.config, values)

    def _at_least_once(self) -> list[str]:
        weak = [i.source for i in self.inputs if getattr(i.source, "at_least_once", False) is True]
        return [src.describe() for src in weak]

    def spec(self) -> dict[str, Any]:
        """A JSON description of the pipeline, kept with the job."""
        return {
            "name": self.name,
            "sources": [i.source.describe() for i in self.inputs],
            # Sources run without exactly once on purpose (sources.spark(at_least_once=True)).
            **({"at_least_once_sources": weak} if (weak := self._at_least_once()) else {}),
            "sinks": [s.describe() for s in self.sinks],
            "config": self.config,
            "events": sorted(self.handlers),
            **({"output_mode": self.output_mode} if self.output_mode != "append" else {}),
            **({"config_schema": self.config_schema} if self.config_schema else {}),
        }


def _from_model(model: type) -> tuple[dict[str, Any], dict[str, Any]]:
    """Defaults and JSON schema of a pydantic model class declaring a pipeline's config."""
    fields = getattr(model, "model_fields", None)
    schema_of = getattr(model, "model_json_schema", None)
    if not isinstance(fields, dict) or not callable(schema_of):
        raise InvalidPipeline(
            "config", f"expects a dict of defaults or a pydantic model class, got {model!r}"
        )
    defaults: dict[str, Any] = {}
    for name, info in fields.items():
        if info.is_required():
            raise InvalidPipeline(
                f"config.{name}", "every config field needs a default (the job starts with it)"
            )
        defaults[name] = info.get_default(call_default_factory=True)
    schema = schema_of()
    check_with_schema(schema, {}, defaults)
    return defaults, schema


def _arity(fn: Callable[..., Any]) -> int:
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        varargs = any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return 2
    if varargs or len(params) >= 2:
        return 2
    if len(params) == 1:
        return 1
    raise InvalidPipeline("transform", "must take (df, ctx) or (df)")
