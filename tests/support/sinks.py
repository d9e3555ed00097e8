"""What the sinks hold, read as a user reads it, and the exactly-once check."""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def file_sink_ids(path: Path, column: str = "id") -> Counter[int]:
    """Every value of ``column`` in the committed epochs of a files sink (parquet)."""
    import pyarrow.parquet as pq

    ids: Counter[int] = Counter()
    if not path.exists():
        return ids
    for epoch_dir in sorted(path.glob("epoch=*")):
        for f in sorted(epoch_dir.glob("*.parquet")):
            ids.update(pq.read_table(f, columns=[column]).column(column).to_pylist())
    return ids


def pg_ids(dsn: str, table: str, column: str = "id") -> Counter[int]:
    """Every value of ``column`` in a PostgreSQL table (committed rows only)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn) as conn:
        try:
            rows = conn.execute(
                sql.SQL("SELECT {} FROM {}").format(sql.Identifier(column), sql.Identifier(table))
            ).fetchall()
        except psycopg.errors.UndefinedTable:
            return Counter()
    return Counter(r[0] for r in rows)


def pg_prepared(dsn: str) -> list[str]:
    """gids of prepared transactions left in the database of ``dsn``."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchall()
    return [r[0] for r in rows]


def exactly_once(ids: Counter[int], total: int) -> None:
    """Assert ``ids`` holds 0..total-1, each once, naming the first offenders."""
    dupes = sorted(k for k, v in ids.items() if v > 1)
    missing = sorted(set(range(total)) - set(ids))
    extra = sorted(set(ids) - set(range(total)))
    assert not dupes and not missing and not extra, (
        f"duplicates {dupes[:10]} ({len(dupes)}), missing {missing[:10]} ({len(missing)}), "
        f"unexpected {extra[:10]} ({len(extra)})"
    )


def delta_ids(path: Path, column: str = "id") -> Counter[int]:
    """Every value of ``column`` a Delta reader (deltalake) sees in the table at ``path``."""
    import deltalake

    if not (path / "_delta_log").is_dir():
        return Counter()
    table = deltalake.DeltaTable(str(path)).to_pyarrow_table(columns=[column])
    return Counter(int(x) for x in table.column(column).to_pylist())


def delta_txn_versions(path: Path) -> list[int]:
    """The ``txn`` versions (stoker's epochs) of every commit in the Delta log at ``path``, in
    commit order: an epoch committed twice shows twice (a MERGE on a key would hide it in the
    rows)."""
    import json

    versions: list[int] = []
    for entry in sorted((path / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            action = json.loads(line) if line.strip() else {}
            if "txn" in action:
                versions.append(int(action["txn"]["version"]))
    return versions
