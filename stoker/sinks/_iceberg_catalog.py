"""Where an Iceberg sink's table lives: the SQL catalog's URL, the table's name, the warehouse
its data files go to, and the table as the catalog holds it now.

The catalog is pyiceberg's ``SqlCatalog`` over SQLAlchemy: ``sqlite:///<file>`` on one host,
``postgresql://...`` where several hosts (or other engines) reach it. A ``postgresql://`` URL
is opened through psycopg 3 (``postgresql+psycopg://``), which stoker depends on already. The
URL may hold a password: it is only ever shown through :func:`stoker.redact.redact_url`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from stoker.errors import InvalidSink, SinkError
from stoker.redact import redact_url

log = logging.getLogger("stoker.sinks.iceberg")
T = TypeVar("T")

FIELD = "iceberg"
CATALOG_NAME = "default"
_PG_SCHEMES = ("postgresql", "postgresql+psycopg", "postgres")


def require_pyiceberg() -> None:
    """The ``pyiceberg`` package with its SQL catalog, or InvalidSink saying how to get it."""
    try:
        import pyiceberg.catalog.sql
        import pyiceberg.io.pyarrow  # noqa: F401
    except ImportError as e:
        raise InvalidSink(
            "iceberg",
            "the Iceberg sink needs pyiceberg with its SQL catalog and pyarrow "
            f"({e}): pip install 'stoker[iceberg]'",
        ) from e


@dataclass(frozen=True)
class Where:
    """The parsed arguments: the URL SQLAlchemy opens, the table's identifier, the warehouse
    (a ``file://`` URI of an absolute folder)."""

    url: str
    namespace: str
    name: str
    warehouse: str

    @property
    def identifier(self) -> str:
        return f"{self.namespace}.{self.name}"

    @property
    def sqlite_file(self) -> Path | None:
        """The SQLite catalog's file (None for PostgreSQL)."""
        return Path(self.url.removeprefix("sqlite:///")) if self.url.startswith("sqlite:") else None

    def shown(self) -> str:
        """The catalog as logs and answers show it: no password."""
        return redact_url(self.url)


def parse(catalog: str, table: str, warehouse: str | None) -> Where:
    """Check the sink's arguments and fill in the default warehouse; InvalidSink naming the
    argument on anything wrong. Relative paths are made absolute here, once, so that a job
    manager's cleanup elsewhere finds the same files."""
    if not isinstance(catalog, str) or "://" not in catalog:
        raise InvalidSink(
            "iceberg.catalog",
            f"must be the catalog database's URL, sqlite:///<file> or postgresql://..., got "
            f"{redact_url(str(catalog))!r}",
        )
    scheme = catalog.split("://", 1)[0].lower()
    if scheme == "sqlite":
        file = catalog.split("://", 1)[1]
        file = file[1:] if file.startswith("/") else file  # sqlite:///rel, sqlite:////abs
        if not file or file == ":memory:" or file.startswith("file:"):
            raise InvalidSink(
                "iceberg.catalog",
                "an SQLite catalog must be a file (sqlite:///path/to/catalog.db): one in "
                "memory is gone with the process, and the table with it",
            )
        db = Path(file).expanduser().resolve()
        url = f"sqlite:///{db}"
        default_wh: Path | None = db.parent / "warehouse"
    elif scheme in _PG_SCHEMES:
        url = "postgresql+psycopg://" + catalog.split("://", 1)[1]
        default_wh = None
    else:
        raise InvalidSink(
            "iceberg.catalog",
            f"scheme {scheme!r} is not a SQL catalog stoker opens: sqlite:///<file> (one host) "
            f"or postgresql://user:password@host/db (several hosts), got "
            f"{redact_url(catalog)!r}",
        )
    if not isinstance(table, str) or "." not in table.strip(".") or ".." in table:
        raise InvalidSink(
            "iceberg.table", f"must be 'namespace.name' (e.g. 'events.clicks'), got {table!r}"
        )
    namespace, _, name = table.rpartition(".")
    if warehouse is None:
        if default_wh is None:
            raise InvalidSink(
                "iceberg.warehouse",
                "is required with a PostgreSQL catalog: the folder (shared by every host that "
                "runs the job) where the table's data files go, "
                "sinks.iceberg(catalog, table, warehouse='/shared/warehouse')",
            )
        wh = default_wh
    else:
        wh = local_folder(warehouse, "iceberg.warehouse")
    return Where(url=url, namespace=namespace, name=name, warehouse=wh.as_uri())


def local_folder(location: str, field: str) -> Path:
    """The absolute local path of a plain path or ``file://`` URI; InvalidSink otherwise (the
    sink's tasks write data files with the local file system's calls)."""
    if not isinstance(location, str) or not location:
        raise InvalidSink(field, f"must be a folder (a path or file:// URI), got {location!r}")
    parts = urlsplit(location)
    if parts.scheme == "file":
        return Path(unquote(parts.path)).resolve()
    if parts.scheme and len(parts.scheme) > 1:  # not a Windows drive letter
        raise InvalidSink(
            field,
            f"{location!r} is not on a local or shared (NFS) file system: the sink's Spark "
            "tasks write the data files with the file system's own calls; give a path or "
            "file:// URI",
        )
    return Path(location).expanduser().resolve()


def check_writable(where: Where) -> None:
    """Refuse an SQLite catalog whose file cannot be made (its nearest existing folder is not
    writable), without making anything."""
    file = where.sqlite_file
    if file is None or file.exists():
        return
    probe = file.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise InvalidSink(
            "iceberg.catalog",
            f"the SQLite catalog {str(file)!r} cannot be made: no folder "
            f"to write it in ({str(probe)!r} is not writable)",
        )


def open_catalog(where: Where) -> Any:
    """pyiceberg's SqlCatalog for ``where`` (its tables, and an SQLite catalog's folder, are
    made on first use)."""
    from pyiceberg.catalog.sql import SqlCatalog

    if where.sqlite_file is not None:
        where.sqlite_file.parent.mkdir(parents=True, exist_ok=True)

    try:
        return SqlCatalog(CATALOG_NAME, uri=where.url, warehouse=where.warehouse)
    except Exception as e:
        raise SinkError(
            FIELD, f"the Iceberg catalog {where.shown()} cannot be opened: {redacted(e)}"
        ) from e


def load(catalog: Any, where: Where) -> Any:
    """The table as the catalog holds it now, or None when there is none."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(where.identifier)
    except NoSuchTableError:
        return None
    except Exception as e:
        raise SinkError(
            FIELD,
            f"the Iceberg table {where.identifier} in {where.shown()} cannot be read: "
            f"{redacted(e)}",
        ) from e


# How long a decided epoch's commit waits out a catalog it cannot reach (its database down or
# restarting) before the attempt fails; the Kafka sink waits as long for its broker.
OUTAGE_S = 600.0


def through_outages(
    what: str, commit: Callable[[], T], reset: Callable[[], None], seconds: float
) -> T:
    """``commit()``, again while the catalog's database cannot be reached (down, restarting,
    a connection it dropped), after ``reset()`` (a fresh catalog) each time, for up to
    ``seconds``. The sink's commit starts by reading the marker: a try whose catalog commit
    went through before its answer was lost finds the epoch committed and adds nothing."""
    deadline = time.monotonic() + seconds
    pause = 0.2
    while True:
        try:
            return commit()
        except Exception as e:
            if not unreachable(e) or time.monotonic() + pause > deadline:
                raise
            log.warning(
                "%s: the Iceberg catalog cannot be reached (%s); trying again in %.1fs",
                what,
                redacted(e).splitlines()[0] if str(e) else type(e).__name__,
                pause,
            )
            reset()
            time.sleep(pause)
            pause = min(pause * 2, 5.0)


def unreachable(e: BaseException) -> bool:
    """Whether ``e`` (or what it was raised from) says the catalog's database could not be
    reached or dropped the connection: worth another try once it is back. SQLAlchemy's
    ``OperationalError`` and ``InterfaceError`` (a refused or lost connection, a server
    restarting, SQLite's lock timeout) and the drivers' own; never a conflict or bad input."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        kind = type(cur)
        names = {f"{k.__module__}.{k.__qualname__}" for k in kind.__mro__}
        if names & _UNREACHABLE:
            return True
        cur = cur.__cause__ or cur.__context__
    return False


_UNREACHABLE = {
    "sqlalchemy.exc.OperationalError",
    "sqlalchemy.exc.InterfaceError",
    "sqlalchemy.exc.DisconnectionError",
    "psycopg.OperationalError",
    "psycopg.InterfaceError",
    "sqlite3.OperationalError",
}


def redacted(e: BaseException) -> str:
    from stoker.redact import redact_text

    return redact_text(str(e))


def table_root(table: Any) -> Path:
    """The local folder of ``table``'s location; InvalidSink when it is elsewhere."""
    return local_folder(str(table.location()), "iceberg.table")


def check_table(table: Any, where: Where) -> None:
    """Refuse a table the sink cannot write: partitioned (the tasks write unpartitioned data
    files), or located off the local file system."""
    table_root(table)
    spec = table.spec()
    if not spec.is_unpartitioned():
        raise InvalidSink(
            "iceberg.table",
            f"the Iceberg table {where.identifier} is partitioned ({spec}); the sink writes "
            "unpartitioned tables only: write to a new table, or one without a partition spec",
        )


def without_retries(table: Any) -> Any:
    """``table`` with pyiceberg's commit retries off (``commit.retry.num-retries=0`` in this
    copy's metadata only: the catalog's commit applies the updates to its own current
    metadata, so the property is never written)."""
    from pyiceberg.table import Table

    props = {**table.metadata.properties, "commit.retry.num-retries": "0"}
    return Table(
        table.name(),
        metadata=table.metadata.model_copy(update={"properties": props}),
        metadata_location=table.metadata_location,
        io=table.io,
        catalog=table.catalog,
    )
