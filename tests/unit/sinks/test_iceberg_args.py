"""The Iceberg sink's arguments (issue 43 item 2): each mistake refused naming its argument and
what is allowed, before anything is written; the default warehouse; the catalog's password
never in what the sink shows. No Spark, no server (the sink on real tables:
tests/integration/test_iceberg_sink.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from stoker import sinks
from stoker.errors import InvalidSink
from stoker.redact import redact_answer
from stoker.sinks import descriptor_of, from_descriptor
from stoker.sinks.base import SinkOwner
from stoker.types import JobId

pytest.importorskip("pyiceberg.catalog.sql")

OWNER = SinkOwner(JobId("ijob"), "uid1")
PG = "postgresql://writer:s3cr3t@db.example:5432/catalog"  # never connected to here


def refused(field: str, match: str, **kw: object) -> None:
    args = {"catalog": "sqlite:////tmp/c.db", "table": "db.t", **kw}
    with pytest.raises(InvalidSink, match=match) as e:
        sinks.iceberg(**args)  # type: ignore[arg-type]
    assert e.value.field == field


def test_the_catalog_must_be_a_sql_catalog_url() -> None:
    refused("iceberg.catalog", "must be the catalog database's URL", catalog="/tmp/c.db")
    refused("iceberg.catalog", "one in memory is gone", catalog="sqlite://")
    refused("iceberg.catalog", "one in memory is gone", catalog="sqlite:///:memory:")
    refused(
        "iceberg.catalog",
        r"scheme 'mysql' is not a SQL catalog stoker opens: sqlite:///<file> .*postgresql://",
        catalog="mysql://u:pw@h/db",
    )
    with pytest.raises(InvalidSink) as e:
        sinks.iceberg("mysql://u:hidden@h/db", "db.t")
    assert "hidden" not in str(e.value)


def test_the_table_is_namespace_dot_name() -> None:
    for bad in ("t", ".t", "db.", "db..t", ""):
        refused("iceberg.table", "must be 'namespace.name'", table=bad)
    sink = sinks.iceberg("sqlite:////tmp/c.db", "a.b.t")
    assert sink.name == "iceberg:a.b.t"


def test_the_warehouse_defaults_beside_sqlite_and_is_required_with_postgresql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    sink = sinks.iceberg("sqlite:///rel/catalog.db", "db.t")
    d = sink.descriptor()
    assert d["warehouse"] == (tmp_path / "rel" / "warehouse").as_uri()
    refused("iceberg.warehouse", "is required with a PostgreSQL catalog", catalog=PG)
    refused(
        "iceberg.warehouse",
        "not on a local or shared .* file system",
        catalog=PG,
        warehouse="s3://bucket/wh",
    )
    shared = sinks.iceberg(PG, "db.t", warehouse="shared/wh")
    assert shared.descriptor()["warehouse"] == (tmp_path / "shared" / "wh").as_uri()


def test_modes_and_schema_mode_are_checked() -> None:
    sink = sinks.iceberg("sqlite:////tmp/c.db", "db.t")
    with pytest.raises(InvalidSink, match="upserts them into the table on a key") as e:
        sink.accept_output_mode("update")
    assert e.value.field == "iceberg.key"
    with pytest.raises(InvalidSink, match="must be append, update or complete") as e:
        sink.accept_output_mode("replace")
    assert e.value.field == "iceberg.output_mode"
    keyed = sinks.iceberg("sqlite:////tmp/c.db", "db.t", key=["k"])
    keyed.accept_output_mode("update")


def test_a_bad_schema_mode_is_refused_at_validate(tmp_path: Path) -> None:
    sink = sinks.iceberg(f"sqlite:///{tmp_path / 'c.db'}", "db.t", schema_mode="overwrite")
    with pytest.raises(InvalidSink, match="must be None or 'merge'") as e:
        sink.validate(OWNER)
    assert e.value.field == "iceberg.schema_mode"


def test_an_sqlite_catalog_not_made_yet(tmp_path: Path) -> None:
    """validate makes nothing and refuses a catalog file that cannot be made, naming it;
    open makes its folder and the catalog; a sink asks a catalog not made yet for nothing."""
    url = f"sqlite:///{tmp_path / 'new' / 'deeper' / 'catalog.db'}"
    sink = sinks.iceberg(url, "db.t")
    sink.validate(OWNER)
    assert not (tmp_path / "new").exists()
    assert sink.committed_epochs(OWNER) == []
    assert not (tmp_path / "new").exists()
    sink.open(OWNER, tmp_path)
    assert (tmp_path / "new" / "deeper" / "catalog.db").is_file()
    (tmp_path / "file").write_text("x")
    blocked = sinks.iceberg(f"sqlite:///{tmp_path / 'file' / 'catalog.db'}", "db.t")
    with pytest.raises(InvalidSink, match="cannot be made") as e:
        blocked.validate(OWNER)
    assert e.value.field == "iceberg.catalog"


def test_types_a_table_takes(tmp_path: Path) -> None:
    """A table made from an output with Spark's byte, short and float columns holds Iceberg
    int and float: the same output is taken again (cast by the tasks), and a wider one; a
    narrower or another type is refused naming the column."""
    import pyarrow as pa

    from stoker.sinks._iceberg_catalog import open_catalog, parse
    from stoker.sinks._iceberg_schema import check_output, ready_table

    where = parse(f"sqlite:///{tmp_path / 'c.db'}", "db.t", None)
    out = pa.schema([("b", pa.int8()), ("s", pa.int16()), ("f", pa.float32()), ("t", pa.string())])
    table = ready_table(open_catalog(where), where, out, None)
    check_output(out, table, where, None, None)
    check_output(pa.schema([("s", pa.int32()), ("t", pa.large_string())]), table, where, None, None)
    with pytest.raises(InvalidSink, match=r"s \(int32 in the table, int64 in the output\)") as e:
        check_output(pa.schema([("s", pa.int64())]), table, where, None, None)
    assert e.value.field == "iceberg.schema"
    with pytest.raises(InvalidSink, match=r"f \(float in the table, double in the output\)"):
        check_output(pa.schema([("f", pa.float64())]), table, where, None, None)


def test_the_password_is_never_shown_and_the_descriptor_rebuilds_the_sink() -> None:
    sink = sinks.iceberg(PG, "db.t", warehouse="/shared/wh", key="k")
    sink.accept_output_mode("update")
    shown = sink.describe() + sink.target() + sink.name + repr(sink)
    assert "s3cr3t" not in shown and "writer:***@db.example" in sink.describe()
    answer = json.dumps(redact_answer(descriptor_of(sink)))
    assert "s3cr3t" not in answer
    rebuilt = from_descriptor(descriptor_of(sink))
    assert descriptor_of(rebuilt) == descriptor_of(sink)


def test_without_pyiceberg_the_error_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyiceberg.catalog.sql", None)
    with pytest.raises(InvalidSink, match=r"pip install 'stoker\[iceberg\]'"):
        sinks.iceberg("sqlite:////tmp/c.db", "db.t")
