"""An upgrade's state check: the state schema the new code's stateful operators
would keep, against the schema Spark recorded in the checkpoint for each (Spark refuses an
incompatible one when the query starts; an upgrade should be refused before the swap).

The new code's schemas come from its stream's analyzed plan, walked from the top as Spark
numbers its stateful operators: a streaming aggregation keeps its grouping columns as key and
its aggregate functions' buffers as value; a deduplication keeps its columns as key. Where the
plan holds a stateful operator this does not model (``flatMapGroupsWithState``, a stream-stream
join, ``transformWithState``) nothing is concluded here: Spark checks it at the first epoch,
and an upgrade that fails there is rolled back. Types are compared as Spark does, names and
nullability aside.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker import checkpoint_layout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("stoker.upgrade")

_UNMODELED = {
    "FlatMapGroupsWithState",
    "FlatMapGroupsInPandasWithState",
    "TransformWithState",
    "TransformWithStateInPandas",
    "TransformWithStateInPySpark",
}


def state_schema_difference(checkpoint: Path, stream: DataFrame) -> str | None:
    """A sentence naming how the new code's state differs from the checkpoint's, or None
    when it matches or cannot be told."""
    recorded = checkpoint_layout.state_schemas(checkpoint)
    try:
        found = plan_state_schemas(stream)
    except Exception as e:  # a plan this cannot walk: Spark checks at the first epoch
        log.info("upgrade: the new code's state schema cannot be read from its plan: %s", e)
        return None
    if found is None:
        log.info("upgrade: the new code has a stateful operator this check does not model")
        return None
    if not recorded:
        return None  # no state yet (or a stateless query): nothing to keep
    if len(found) != len(recorded):
        return (
            f"the checkpoint keeps the state of {len(recorded)} stateful operator(s), the new "
            f"code has {len(found)}: its state cannot be restored"
        )
    for op, (kind, key, value) in enumerate(found):
        old = recorded.get(op)
        if old is None:
            continue  # its schema file cannot be read: Spark checks at the first epoch
        if _norm(key) != _norm(old.key):
            return (
                f"stateful operator {op} ({kind}): the key is {_shown(key)} in the new code, "
                f"{_shown(old.key)} in the checkpoint"
            )
        if kind == "aggregation" and _norm(value) != _norm(old.value):
            return (
                f"stateful operator {op} ({kind}): the aggregation state is {_shown(value)} in "
                f"the new code, {_shown(old.value)} in the checkpoint"
            )
    return None


def plan_state_schemas(stream: DataFrame) -> list[tuple[str, list[Any], list[Any]]] | None:
    """(kind, key types, value types) of each stateful operator of ``stream``'s analyzed plan,
    top first; None when it holds one this does not model."""
    plan = stream._jdf.queryExecution().analyzed()
    out: list[tuple[str, list[Any], list[Any]]] = []
    unmodeled = False

    def walk(node: Any) -> None:
        nonlocal unmodeled
        name = node.nodeName()
        if name == "Aggregate" and node.isStreaming():
            key = [_type(e) for e in _seq(node.groupingExpressions())]
            value: list[Any] = []
            for e in _seq(node.aggregateExpressions()):
                _buffers(e, value)
            out.append(("aggregation", key, value))
        elif name in ("Deduplicate", "DeduplicateWithinWatermark") and node.isStreaming():
            out.append(("deduplication", [_type(e) for e in _seq(node.keys())], []))
        elif name in _UNMODELED or (
            name == "Join" and all(c.isStreaming() for c in _seq(node.children()))
        ):
            unmodeled = True
        for child in _seq(node.children()):
            walk(child)

    walk(plan)
    return None if unmodeled else out


def _seq(s: Any) -> list[Any]:
    return [s.apply(i) for i in range(s.size())]


def _type(expr: Any) -> Any:
    return json.loads(expr.dataType().json())


def _buffers(expr: Any, out: list[Any]) -> None:
    if expr.nodeName() == "AggregateExpression":
        out.extend(_type(a) for a in _seq(expr.aggregateFunction().aggBufferAttributes()))
        return
    for child in _seq(expr.children()):
        _buffers(child, out)


def _norm(t: Any) -> Any:
    """A Spark type as JSON, without field names and nullability."""
    if isinstance(t, list):
        return [_norm(x) for x in t]
    if isinstance(t, dict):
        kind = t.get("type")
        if kind == "struct":
            return ["struct", [_norm(f.get("type")) for f in t.get("fields") or []]]
        if kind == "array":
            return ["array", _norm(t.get("elementType"))]
        if kind == "map":
            return ["map", _norm(t.get("keyType")), _norm(t.get("valueType"))]
        if kind == "udt":
            return ["udt", t.get("class") or t.get("pyClass")]
        return kind
    return t


def _shown(types: list[Any]) -> str:
    def one(t: Any) -> str:
        n = _norm(t)
        return n if isinstance(n, str) else json.dumps(n)

    return "(" + ", ".join(one(t) for t in types) + ")"
