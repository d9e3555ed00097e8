"""stoker.pipeline: building a pipeline, validating it before anything runs, calling the transform.

Pure Python: the sources and sinks are stoker's own spec objects, which need no Spark until a
job opens them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stoker import sinks, sources
from stoker.errors import InvalidInput, InvalidPipeline
from stoker.pipeline import Pipeline


def _complete(tmp_path: Path, name: str = "p") -> Pipeline:
    return Pipeline(name).source(sources.generator(total=10)).sink(sinks.files(str(tmp_path / "o")))


def _error(fn: Any) -> InvalidPipeline:
    with pytest.raises(InvalidPipeline) as info:
        fn()
    return info.value


# building --------------------------------------------------------------------------------------


def test_a_complete_pipeline_validates_and_its_name_is_the_job_id(tmp_path: Path) -> None:
    p = _complete(tmp_path, "orders.daily-1")
    p.validate()
    assert p.job_id == "orders.daily-1"


def test_builder_methods_return_the_pipeline(tmp_path: Path) -> None:
    p = Pipeline("p")
    src, sink = sources.generator(total=1), sinks.files(str(tmp_path / "o"))
    assert p.source(src) is p
    assert p.transform(lambda df: df) is p
    assert p.sink(sink) is p
    assert [i.source for i in p.inputs] == [src]
    assert p.sinks == [sink]


def test_config_is_copied_from_the_caller(tmp_path: Path) -> None:
    declared = {"mod": 2}
    p = Pipeline("p", config=declared)
    declared["mod"] = 3
    assert p.config == {"mod": 2}
    assert Pipeline("q").config == {}


def test_spec_describes_sources_sinks_and_config(tmp_path: Path) -> None:
    out = tmp_path / "o"
    p = (
        Pipeline("p", config={"k": "v"})
        .source(sources.generator(total=10, max_rows_per_epoch=5))
        .sink(sinks.files(str(out), format="json"))
    )
    assert p.spec() == {
        "name": "p",
        "sources": ["generator(total=10, rows_per_second=None, max_rows_per_epoch=5)"],
        "sinks": [f"files({str(out)!r}, format='json')"],
        "config": {"k": "v"},
        "events": [],
    }


# validation ------------------------------------------------------------------------------------


def test_no_source(tmp_path: Path) -> None:
    err = _error(Pipeline("p").sink(sinks.files(str(tmp_path / "o"))).validate)
    assert (err.field, err.message) == (
        "sources",
        "the pipeline has no source; add one with .source()",
    )


def test_no_sink() -> None:
    err = _error(Pipeline("p").source(sources.generator(total=1)).validate)
    assert (err.field, err.message) == ("sinks", "the pipeline has no sink; add one with .sink()")


def test_bad_name_is_refused_as_a_job_id(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as info:
        _complete(tmp_path, "no spaces please").validate()
    assert info.value.field == "job_id"
    with pytest.raises(InvalidInput):
        _ = Pipeline("a/b").job_id


def test_something_that_is_not_a_source(tmp_path: Path) -> None:
    p = _complete(tmp_path).source(object())  # type: ignore[arg-type]
    err = _error(p.validate)
    assert err.field == "sources[1]"
    assert err.message.endswith("is not a source (no bounded)")


def test_map_must_be_callable(tmp_path: Path) -> None:
    p = _complete(tmp_path).source(sources.generator(total=1), map="id + 1")  # type: ignore[arg-type]
    err = _error(p.validate)
    assert (err.field, err.message) == ("sources[1].map", "must be callable")


def test_something_that_is_not_a_sink(tmp_path: Path) -> None:
    p = _complete(tmp_path).sink(object())  # type: ignore[arg-type]
    err = _error(p.validate)
    assert err.field == "sinks[1]"
    assert err.message.endswith("is not a sink (no prepare)")


def test_two_sinks_with_one_name(tmp_path: Path) -> None:
    out = str(tmp_path / "o")
    p = _complete(tmp_path).sink(sinks.files(out))
    err = _error(p.validate)
    assert (err.field, err.message) == ("sinks[1]", f"two sinks are named 'files:{out}'")


def test_config_keys_must_be_strings(tmp_path: Path) -> None:
    p = _complete(tmp_path)
    p.config[1] = "x"  # type: ignore[index]
    err = _error(p.validate)
    assert (err.field, err.message) == ("config", "keys must be strings, got 1")


# transform -------------------------------------------------------------------------------------


def test_transform_must_be_callable() -> None:
    err = _error(lambda: Pipeline("p").transform(42))  # type: ignore[arg-type]
    assert (err.field, err.message) == ("transform", "must be callable, got int")


def test_transform_without_parameters_is_refused() -> None:
    err = _error(lambda: Pipeline("p").transform(lambda: None))  # type: ignore[arg-type,return-value]
    assert (err.field, err.message) == ("transform", "must take (df, ctx) or (df)")


class _Recorder:
    """Transforms of each shape; each records its arguments and returns ``returns``."""

    def __init__(self, returns: Any) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.returns = returns

    def one(self, df: Any) -> Any:
        self.calls.append((df,))
        return self.returns

    def two(self, df: Any, ctx: Any) -> Any:
        self.calls.append((df, ctx))
        return self.returns

    def star(self, *args: Any) -> Any:
        self.calls.append(args)
        return self.returns

    def defaulted(self, df: Any, ctx: Any = None) -> Any:
        self.calls.append((df, ctx))
        return self.returns


@pytest.mark.parametrize(
    ("shape", "expected_args"),
    [
        ("one", ("DF",)),
        ("two", ("DF", "CTX")),
        ("star", ("DF", "CTX")),
        ("defaulted", ("DF", "CTX")),
    ],
)
def test_apply_calls_the_transform_with_its_arity_and_checks_the_result(
    shape: str, expected_args: tuple[str, ...]
) -> None:
    rec = _Recorder(returns=7)
    p = Pipeline("p").transform(getattr(rec, shape))
    err = _error(lambda: p.apply("DF", "CTX"))  # type: ignore[arg-type]
    assert rec.calls == [expected_args]
    assert (err.field, err.message) == ("transform", "must return a DataFrame, returned int")


def test_the_default_transform_is_the_identity() -> None:
    # The identity hands back what it got; a non-DataFrame input is then refused by apply.
    err = _error(lambda: Pipeline("p").apply(None, None))  # type: ignore[arg-type]
    assert err.message == "must return a DataFrame, returned NoneType"
