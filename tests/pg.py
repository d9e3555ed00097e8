"""A throwaway PostgreSQL server for tests and benchmarks.

:class:`ThrowawayPostgres` runs ``initdb`` into a fresh temporary folder, starts the server on
a free port of 127.0.0.1 (its unix socket inside that folder too), and removes everything again
on :meth:`~ThrowawayPostgres.stop`. PostgreSQL refuses to run as root, so when this process is
root the server runs as an unprivileged system user (``postgres`` if it exists,
otherwise one created on the spot).

The server is this process's own child (``postgres`` started directly, stopped with
``pg_ctl stop -m immediate``) so that :meth:`~ThrowawayPostgres.stop` reaps it.

Every command is an argv list; nothing goes through a shell. Settings go into the data folder's
``postgresql.conf`` (``pg_ctl -o`` would hand them to ``/bin/sh``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, LiteralString

from stoker.errors import StokerError
from tests.support import free_port

__all__ = ["PostgresUnavailable", "ThrowawayPostgres", "find_postgres_bin"]

_BINARIES = ("initdb", "pg_ctl", "postgres")
_SEARCHED = (
    "/usr/lib/postgresql/*/bin",  # Debian, Ubuntu
    "/usr/pgsql-*/bin",  # RHEL (PGDG)
    "/usr/local/pgsql/bin",  # built from source
    "/opt/homebrew/opt/postgresql*/bin",
    "/usr/local/opt/postgresql*/bin",
)
# A created user gets this name; an existing ``postgres`` user is preferred.
_FALLBACK_USER = "stoker-pg"
_DB_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class PostgresUnavailable(StokerError):
    """No usable PostgreSQL server binaries, or the throwaway server did not come up."""


def _version_key(path: str) -> tuple[int, ...]:
    # Newest installed major version first: /usr/lib/postgresql/16/bin before .../15/bin.
    return tuple(int(n) for n in re.findall(r"\d+", path))


def find_postgres_bin() -> Path:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres`` together.

    Looked for in ``$STOKER_PG_BIN``, then next to ``pg_ctl`` on ``PATH``, then in the usual
    install folders. Raises :class:`PostgresUnavailable` naming every place tried.
    """
    candidates: list[Path] = []
    if os.environ.get("STOKER_PG_BIN"):
        candidates.append(Path(os.environ["STOKER_PG_BIN"]))
    on_path = shutil.which("pg_ctl")
    if on_path:
        # /usr/local/bin/pg_ctl is often a symlink; pg_ctl finds postgres beside its real self.
        candidates.append(Path(on_path).resolve().parent)
        candidates.append(Path(on_path).parent)
    for pattern in _SEARCHED:
        candidates.extend(Path(p) for p in sorted(glob.glob(pattern), key=_version_key)[::-1])
    for folder in candidates:
        if all(os.access(folder / name, os.X_OK) for name in _BINARIES):
            return folder
    tried = ", ".join(str(c) for c in candidates) or "(nothing on PATH)"
    raise PostgresUnavailable(
        f"PostgreSQL server binaries ({', '.join(_BINARIES)}) not found; tried $STOKER_PG_BIN, "
        f"PATH and {', '.join(_SEARCHED)} -> {tried}. Install them (Debian: apt-get install "
        "postgresql) or set STOKER_PG_BIN to the folder that holds them."
    )


@dataclass(frozen=True)
class _RunAs:
    """The OS user the server runs as (``None`` fields: this process's own user)."""

    name: str
    uid: int | None
    gid: int | None

    def popen_kwargs(self) -> dict[str, Any]:
        if self.uid is None:
            return {}
        # What setpriv/runuser do, without depending on either: drop to the user in the child.
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def _run_as() -> _RunAs:
    if os.geteuid() != 0:
        return _RunAs(pwd.getpwuid(os.geteuid()).pw_name, None, None)
    for name in ("postgres", _FALLBACK_USER):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return _RunAs(name, entry.pw_uid, entry.pw_gid)
    useradd = shutil.which("useradd")
    if useradd is None:
        raise PostgresUnavailable(
            "running as root, no 'postgres' user and no useradd to create an unprivileged "
            f"user {_FALLBACK_USER!r}; PostgreSQL refuses to run as root"
        )
    subprocess.run(
        [useradd, "--system", "--user-group", "--no-create-home", _FALLBACK_USER],
        check=True,
        capture_output=True,
    )
    entry = pwd.getpwnam(_FALLBACK_USER)
    return _RunAs(_FALLBACK_USER, entry.pw_uid, entry.pw_gid)


def _default_base_dir() -> str:
    """/dev/shm when it is a roomy tmpfs, else the usual temporary folder.

    On a disk, copying the template for each CREATE DATABASE costs ~0.4 s; in memory ~0.04 s,
    and tests make a database each.
    """
    shm = "/dev/shm"
    with contextlib.suppress(OSError):
        st = os.statvfs(shm)
        if st.f_bavail * st.f_frsize >= 1 << 30 and os.access(shm, os.W_OK | os.X_OK):
            return shm
    return tempfile.gettempdir()


class ThrowawayPostgres:
    """A PostgreSQL server of its own in a temporary folder, gone after :meth:`stop`.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. :attr:`dsn` names the
    database created at start; :meth:`create_database` makes more.
    """

    def __init__(
        self,
        database: str = "stoker",
        *,
        base_dir: str | Path | None = None,
        start_timeout: float = 60.0,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.database = _check_db_name(database)
        self._base_dir = base_dir
        self._start_timeout = start_timeout
        self.settings: dict[str, str] = {
            "listen_addresses": "'127.0.0.1'",
            "max_connections": "200",
            "max_prepared_transactions": "64",
            "shared_buffers": "'128MB'",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            **(settings or {}),
        }
        self.port: int | None = None
        self.user: str | None = None
        self._dir: Path | None = None
        self._bin: Path | None = None
        self._run_as: _RunAs | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._version: int | None = None

    # lifecycle -----------------------------------------------------------------------------
    def start(self) -> ThrowawayPostgres:
        """initdb, start the server, wait until it accepts connections, create the database."""
        if self._dir is not None:
            raise PostgresUnavailable("this ThrowawayPostgres is started already")
        self._bin = find_postgres_bin()
        self._run_as = _run_as()
        self.user = self._run_as.name
        base = str(self._base_dir) if self._base_dir is not None else _default_base_dir()
        self._dir = Path(tempfile.mkdtemp(prefix="stoker-pg-", dir=base))
        try:
            self._own_dir()
            self._initdb()
            self._start_server()
            self.create_database(self.database)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server at once (no checkpoint: the data is thrown away) and remove it all."""
        folder, self._dir = self._dir, None
        if folder is None:
            return
        proc, self._proc = self._proc, None
        try:
            if proc is not None and proc.poll() is None:
                self._run(
                    [
                        self._exe("pg_ctl"),
                        "stop",
                        "-D",
                        str(folder / "data"),
                        "-m",
                        "immediate",
                        "-w",
                        "-t",
                        "30",
                    ],
                    cwd=folder,
                    check=False,
                )
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            self.port = None

    def __enter__(self) -> ThrowawayPostgres:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # connection strings and databases ------------------------------------------------------
    @property
    def dsn(self) -> str:
        """``postgresql://`` URL of the database created at start."""
        return self.dsn_for(self.database)

    def dsn_for(self, dbname: str) -> str:
        """``postgresql://`` URL of database ``dbname`` on this server."""
        if self.port is None:
            raise PostgresUnavailable("the throwaway PostgreSQL server is not running")
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{_check_db_name(dbname)}"

    def create_database(self, name: str) -> str:
        """Create database ``name`` (lower-case letters, digits, ``_``) and return its URL."""
        # FILE_COPY (PostgreSQL 15+; older servers always copy files) copies the small template
        # faster than the default WAL_LOG strategy, which writes all of it to the WAL.
        if self._server_version() >= 150000:
            self._admin("CREATE DATABASE {} STRATEGY = FILE_COPY", name)
        else:
            self._admin("CREATE DATABASE {}", name)
        return self.dsn_for(name)

    def drop_database(self, name: str) -> None:
        """Drop database ``name``: its prepared transactions rolled back, its sessions closed."""
        import psycopg
        from psycopg import sql

        # DROP DATABASE refuses a database that holds prepared transactions (a two-phase sink
        # killed between PREPARE and COMMIT leaves some), and only a session in that database
        # may roll them back.
        with (
            contextlib.suppress(psycopg.OperationalError),  # no such database: nothing held
            psycopg.connect(self.dsn_for(name), autocommit=True) as conn,
        ):
            gids = conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
            ).fetchall()
            for (gid,) in gids:
                conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
        self._admin("DROP DATABASE IF EXISTS {} WITH (FORCE)", name)

    # internals -----------------------------------------------------------------------------
    def _server_version(self) -> int:
        import psycopg

        if self._version is None:
            with psycopg.connect(self.dsn_for("postgres"), autocommit=True) as conn:
                self._version = int(conn.info.server_version)
        return self._version

    def _admin(self, template: LiteralString, dbname: str) -> None:
        import psycopg
        from psycopg import sql

        statement = sql.SQL(template).format(sql.Identifier(_check_db_name(dbname)))
        # CREATE/DROP DATABASE cannot run inside a transaction block.
        with psycopg.connect(self.dsn_for("postgres"), autocommit=True) as conn:
            conn.execute(statement)

    def _exe(self, name: str) -> str:
        assert self._bin is not None
        return str(self._bin / name)

    def _run(
        self, argv: list[str], *, cwd: Path, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        assert self._run_as is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        done = subprocess.run(
            argv,
            cwd=cwd,  # the server's user may not enter our working folder (root's home)
            env=env,
            capture_output=True,
            text=True,
            timeout=self._start_timeout,
            **self._run_as.popen_kwargs(),
        )
        if check and done.returncode != 0:
            raise PostgresUnavailable(
                f"{Path(argv[0]).name} failed with exit code {done.returncode}:\n"
                f"{done.stdout}{done.stderr}{self._log_tail()}"
            )
        return done

    def _own_dir(self) -> None:
        assert self._dir is not None and self._run_as is not None
        if self._run_as.uid is None:
            return
        os.chown(self._dir, self._run_as.uid, self._run_as.gid or -1)
        # The server's user must be able to walk down to its folder.
        for parent in self._dir.parents:
            mode = parent.stat().st_mode
            if not mode & 0o001:
                raise PostgresUnavailable(
                    f"user {self._run_as.name!r} cannot enter {parent} (mode {mode & 0o777:o}); "
                    "pass base_dir= a folder under a world-searchable path such as /tmp"
                )

    def _initdb(self) -> None:
        assert self._dir is not None
        data = self._dir / "data"
        self._run(
            [
                self._exe("initdb"),
                "-D",
                str(data),
                "-U",
                str(self.user),
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ],
            cwd=self._dir,
        )

    def _write_settings(self, port: int) -> None:
        assert self._dir is not None
        lines = [f"{k} = {v}" for k, v in self.settings.items()]
        lines += [f"port = {port}", f"unix_socket_directories = '{self._dir}'"]
        with (self._dir / "data" / "postgresql.conf").open("a") as f:
            f.write("\n# stoker ThrowawayPostgres\n" + "\n".join(lines) + "\n")

    def _spawn(self) -> None:
        """Start ``postgres`` on the folder's settings, as our own child rather than pg_ctl's
        daemon, so that stop() can reap it."""
        assert self._dir is not None and self._run_as is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        with (self._dir / "server.log").open("ab") as log:
            self._proc = subprocess.Popen(
                [self._exe("postgres"), "-D", str(self._dir / "data")],
                cwd=self._dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C meant for pytest is not meant for it
                **self._run_as.popen_kwargs(),
            )

    def _start_server(self) -> None:
        assert self._dir is not None
        # A free port can be taken by someone else before the server binds it: try a few.
        for _ in range(5):
            port = free_port()
            self._write_settings(port)  # later lines win in postgresql.conf
            self._spawn()
            self.port = port
            if self._wait_ready():
                return
            self.port = None
            if "already in use" not in self._log_tail():
                break
        raise PostgresUnavailable(f"PostgreSQL did not start:{self._log_tail()}")

    def _wait_ready(self) -> bool:
        """True once the server accepts connections; False if it exited first."""
        import psycopg

        assert self._proc is not None
        deadline = time.monotonic() + self._start_timeout
        while True:
            try:
                with psycopg.connect(self.dsn_for("postgres"), connect_timeout=5):
                    return True
            except psycopg.OperationalError as e:
                if self._proc.poll() is not None:
                    return False
                if time.monotonic() > deadline:
                    raise PostgresUnavailable(
                        f"PostgreSQL did not accept connections within {self._start_timeout}s: "
                        f"{e}{self._log_tail()}"
                    ) from e
                time.sleep(0.05)

    def _log_tail(self) -> str:
        if self._dir is None:
            return ""
        try:
            text = (self._dir / "server.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n--- server.log (end) ---\n" + "\n".join(text.splitlines()[-20:])


def _check_db_name(name: str) -> str:
    if not isinstance(name, str) or not _DB_NAME.match(name):
        raise ValueError(
            f"database name {name!r}: use 1-63 lower-case letters, digits or '_', "
            "starting with a letter or '_'"
        )
    return name
