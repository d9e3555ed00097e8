"""Reading the state schema Spark records in a checkpoint (``checkpoint_layout.state_schemas``)
and comparing types as an upgrade's check does (``runtime/job/upgrade_check.py``), without
Spark: the file below is the layout Spark 4 wrote for a streaming aggregation here (a version
line, then the key's and the value's struct as JSON)."""

from __future__ import annotations

import json
from pathlib import Path

from stoker import checkpoint_layout
from stoker.runtime.job.upgrade_check import _norm, _shown

KEY = {"type": "struct", "fields": [{"name": "_groupingexpression", "type": "long",
                                     "nullable": True, "metadata": {}}]}  # fmt: skip
VALUE = {"type": "struct", "fields": [
    {"name": "count", "type": "long", "nullable": True, "metadata": {}},
    {"name": "sum", "type": "long", "nullable": True, "metadata": {}},
]}  # fmt: skip


def _write(checkpoint: Path, op: int) -> None:
    meta = checkpoint / "state" / str(op) / "0" / "_metadata"
    meta.mkdir(parents=True)
    key, value = json.dumps(KEY).replace(" ", ""), json.dumps(VALUE).replace(" ", "")
    (meta / "schema").write_bytes(
        b"v2\n\x00\x00\x00g" + key.encode() + b"\x00\x00" + value.encode()
    )


def test_the_schema_of_each_operator_is_read(tmp_path: Path) -> None:
    _write(tmp_path, 0)
    _write(tmp_path, 1)
    (tmp_path / "state" / "2" / "0").mkdir(parents=True)  # an operator without a schema file
    found = checkpoint_layout.state_schemas(tmp_path)
    assert set(found) == {0, 1, 2} and found[2] is None
    s = found[0]
    assert s is not None and s.key == ["long"] and s.value == ["long", "long"]


def test_no_state_no_schemas(tmp_path: Path) -> None:
    assert checkpoint_layout.state_schemas(tmp_path) == {}


def test_types_compare_without_names_and_nullability() -> None:
    a = {"type": "struct", "fields": [{"name": "x", "type": "long", "nullable": True}]}
    b = {"type": "struct", "fields": [{"name": "y", "type": "long", "nullable": False}]}
    assert _norm([a]) == _norm([b])
    assert _norm(["long"]) != _norm(["string"])
    arr = {"type": "array", "elementType": "long", "containsNull": True}
    assert _norm([arr]) == [["array", "long"]]
    assert _shown(["long", arr]) == '(long, ["array", "long"])'
