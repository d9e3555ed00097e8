"""Helpers shared by the benchmark scripts: the Spark session, statistics, tables, JSON output.

Not a benchmark itself. The scripts run as ``python benchmarks/<name>.py``, which puts this
folder on ``sys.path``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parent.parent
# The throwaway PostgreSQL helper lives with the tests (tests/pg.py), not in the package.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def session(app_name: str, master: str = "local[2]") -> SparkSession:
    """A local session with stoker's default driver conf and stoker's data sources registered.

    Both sides of every comparison share it, so the conf is the same for both.
    """
    from pyspark.sql import SparkSession

    from stoker.runtime.session import DEFAULT_CONF, register_sources

    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in DEFAULT_CONF.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_sources(spark)
    return spark


def median(xs: Iterable[float]) -> float:
    data = list(xs)
    return statistics.median(data) if data else float("nan")


def spread(xs: Iterable[float], digits: int = 1) -> str:
    """``min..max`` of a sample, for the tables."""
    data = list(xs)
    if not data:
        return "-"
    return f"{fmt(min(data), digits)}..{fmt(max(data), digits)}"


def fmt(x: float | int | None, digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, int):
        return f"{x:,}"
    if x != x:  # nan
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table, first column left-aligned and the others right-aligned."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)
        )

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)


def machine() -> dict[str, Any]:
    """What the figures were measured on, including how busy the machine was."""
    import pyspark

    cpu = platform.processor() or "?"
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        java = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, timeout=30
        ).stderr.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        java = "?"
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "java": java,
        "loadavg_at_start": os.getloadavg(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def print_machine(info: dict[str, Any]) -> None:
    load = ", ".join(f"{x:.2f}" for x in info["loadavg_at_start"])
    print(
        f"machine: {info['cpus']} cpus ({info['cpu']}), Python {info['python']}, "
        f"PySpark {info['pyspark']}, {info['java']}; load average at start {load}"
    )


def arg_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--json", metavar="OUT", help="also write the figures to this JSON file")
    return p


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    if path:
        Path(path).write_text(json.dumps(payload, indent=2, default=str) + "\n")
        print(f"\nwrote {path}")


def quiet_stoker_logs() -> None:
    """stoker logs one line per epoch at INFO; a benchmark prints its own table instead."""
    import logging

    logging.getLogger("stoker").setLevel(logging.WARNING)


def flush() -> None:
    sys.stdout.flush()


class EpochRecorder:
    """Records when stoker's ``foreachBatch`` body starts and ends for every epoch.

    Installed from outside (it wraps ``EpochProcessor._run``; stoker's code is unchanged).
    Each record: epoch, wall-clock start and end (``time.time()``, comparable across
    processes and with the store's timestamps), ``perf_counter`` start and end, and whether it
    was the job's final epoch.
    """

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self._orig: Any = None

    def install(self) -> EpochRecorder:
        from stoker.runtime import epoch as _epoch

        orig = _epoch.EpochProcessor._run
        self._orig = orig
        rec = self

        def run(proc: Any, df: Any, epoch: int) -> None:
            wall, t0 = time.time(), time.perf_counter()
            try:
                orig(proc, df, epoch)
            finally:
                rec.records.append(
                    {
                        "epoch": int(epoch),
                        "start": wall,
                        "end": time.time(),
                        "p_start": t0,
                        "p_end": time.perf_counter(),
                        "final": proc.final_epoch == epoch,
                        "replayed": bool(
                            proc.timings
                            and proc.timings[-1].epoch == epoch
                            and proc.timings[-1].replayed
                        ),
                    }
                )

        _epoch.EpochProcessor._run = run  # type: ignore[method-assign]
        return self

    def uninstall(self) -> None:
        from stoker.runtime import epoch as _epoch

        if self._orig is not None:
            _epoch.EpochProcessor._run = self._orig  # type: ignore[method-assign]
            self._orig = None

    def take(self) -> list[dict[str, Any]]:
        out, self.records = self.records, []
        return out


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_manager(
    store: str,
    state: Path,
    allow: Path,
    *extra: str,
    log: Path | None = None,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """A ``stoker server`` in its own process group; returns it and its URL once it answers.

    ``log``: the server's stdout and stderr go there (else nowhere); ``env``: its environment
    (else this one)."""
    import httpx

    port = free_port()
    out: Any = subprocess.DEVNULL if log is None else open(log, "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stoker.cli",
            "server",
            "--port",
            str(port),
            "--store",
            store,
            "--state-dir",
            str(state),
            "--allow-dir",
            str(allow),
            *([] if "--token" in extra else ["--insecure-no-token"]),  # a benchmark's own
            *extra,
        ],
        stdout=out,
        stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
        start_new_session=True,
        cwd=str(REPO),
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text()[-2000:] if log is not None else "(no log kept)"
            raise RuntimeError(f"stoker server on {url} exited: {tail}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"stoker server on {url} did not start")


class Timeout(RuntimeError):
    """What a benchmark waited for did not come in time."""


def wait_until(
    what: str | Callable[[], str], check: Callable[[], Any], timeout: float, every: float = 0.1
) -> Any:
    """Poll ``check`` until it returns something truthy and return that; :class:`Timeout`
    naming ``what`` (a callable is asked only then) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            text = what() if callable(what) else what
            raise Timeout(f"no {text} within {timeout:.0f} s")
        time.sleep(every)


def proc_kib(path: str, key: str) -> int:
    """The number after ``key`` in a /proc file (``VmRSS:`` in ``status``, ``Pss:`` in
    ``smaps_rollup``), in KiB; 0 when the process or the line is gone."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0
