"""Apache Spark's own Structured Streaming examples, ported (examples/spark_ports/, issue 41):
each runs with the CLI on prepared input, is killed with SIGKILL (its whole process group: the
driver, its JVM, its Python workers) after some epochs committed, gets more input while it is
down, runs again with the same command, and ends with exactly the counts plain Python computes
from the input: nothing lost, nothing counted twice. Then SIGTERM stops it gracefully (exit
13, SUSPENDED).

The ports keep Spark's query code as it is; only the source, the sink and ``stoker.run``
differ (each file's header says what and why). Their output mode is ``complete``: every epoch
writes the whole table, so the newest snapshot (``<out>/current``) holds the answer, and its
total only grows. The test waits until that total reaches the input's, then compares exactly.
"""

from __future__ import annotations

import json
import os
import random
import signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO, kill_group, stoker_cmd
from tests.support.cli_runs import (
    LIGHT,
    RUN_TIMEOUT,
    SUSPENDED_EXIT,
    committed,
    driver,
    log_tail,
    wait_running,
)

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(1200)]

PORTS = REPO / "examples" / "spark_ports"

WORDS = ["spark", "stoker", "flink", "epoch", "state", "sink", "kafka"]
BASE = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)
STEP_MS = 3700  # lines 3.7 s apart: no two lines exactly 10 s (the session gap) apart
BEFORE, AFTER = 10, 4  # input files before the first run and while the job is down
LINES_PER_FILE = 6


@dataclass(frozen=True)
class Line:
    value: str
    at_ms: int  # since BASE

    @property
    def timestamp(self) -> datetime:
        return BASE + timedelta(milliseconds=self.at_ms)


def make_lines(count: int, seed: int) -> list[Line]:
    rnd = random.Random(seed)
    return [
        Line(" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 4))), i * STEP_MS)
        for i in range(count)
    ]


def text_file(lines: list[Line]) -> str:
    return "".join(f"{ln.value}\n" for ln in lines)


def json_file(lines: list[Line]) -> str:
    def stamp(ln: Line) -> str:
        return ln.timestamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ln.at_ms % 1000:03d}Z"

    return "".join(json.dumps({"value": ln.value, "timestamp": stamp(ln)}) + "\n" for ln in lines)


def epoch_ms(value: str) -> int:
    """A timestamp as the files sink writes it (ISO 8601 with an offset) in ms since 1970."""
    return round(datetime.fromisoformat(value).timestamp() * 1000)


# What each port must end with, computed in plain Python from the input lines ------------------
def wordcount_expected(lines: list[Line]) -> Counter[Any]:
    return Counter(w for ln in lines for w in ln.value.split(" "))


def wordcount_got(rows: list[dict[str, Any]]) -> Counter[Any]:
    return Counter({r["word"]: r["count"] for r in rows})


WINDOW_S, SLIDE_S = 10, 5


def windowed_expected(lines: list[Line]) -> Counter[Any]:
    """Spark's window(t, 10 s, 5 s): every [s, s + 10 s) with s a multiple of 5 s since 1970
    and s <= t < s + 10 s."""
    out: Counter[Any] = Counter()
    for ln in lines:
        t = round(ln.timestamp.timestamp() * 1000)
        first = t // (SLIDE_S * 1000) * SLIDE_S * 1000
        for k in range(WINDOW_S // SLIDE_S):
            start = first - k * SLIDE_S * 1000
            for w in ln.value.split(" "):
                out[(start, start + WINDOW_S * 1000, w)] += 1
    return out


def windowed_got(rows: list[dict[str, Any]]) -> Counter[Any]:
    return Counter(
        {
            (epoch_ms(r["window"]["start"]), epoch_ms(r["window"]["end"]), r["word"]): r["count"]
            for r in rows
        }
    )


GAP_MS = 10_000


def sessions_expected(lines: list[Line]) -> Counter[Any]:
    """Spark's session_window(t, "10 seconds") per word: an event opens [t, t + 10 s); one
    inside an open session extends it to its own t + 10 s. Rows: (word, start s, end s,
    events), the casts to LONG in seconds (floor)."""
    times: dict[str, list[int]] = {}
    for ln in lines:
        t = round(ln.timestamp.timestamp() * 1000)
        for w in ln.value.split(" "):
            times.setdefault(w, []).append(t)
    out: Counter[Any] = Counter()
    for word, ts in times.items():
        ts.sort()
        start, end, n = ts[0], ts[0] + GAP_MS, 1
        for t in ts[1:]:
            if t < end:
                end, n = max(end, t + GAP_MS), n + 1
                continue
            out[(word, start // 1000, end // 1000)] = n
            start, end, n = t, t + GAP_MS, 1
        out[(word, start // 1000, end // 1000)] = n
    return out


def sessions_got(rows: list[dict[str, Any]]) -> Counter[Any]:
    got: Counter[Any] = Counter()
    for r in rows:
        start, end = r["CAST(session.start AS BIGINT)"], r["CAST(session.end AS BIGINT)"]
        assert r["durationMs"] == end - start, r  # Spark's column, as the example computes it
        got[(r["sessionId"], start, end)] = r["numEvents"]
    return got


@dataclass(frozen=True)
class Port:
    file: str
    job: str  # the pipeline's name: Spark's appName
    args: tuple[str, ...]  # after <input dir> <output dir>
    write: Callable[[list[Line]], str]
    suffix: str
    expected: Callable[[list[Line]], Counter[Any]]
    got: Callable[[list[dict[str, Any]]], Counter[Any]]


PORT_LIST = [
    Port(
        "structured_network_wordcount.py",
        "StructuredNetworkWordCount",
        (),
        text_file,
        ".txt",
        wordcount_expected,
        wordcount_got,
    ),
    Port(
        "structured_network_wordcount_windowed.py",
        "StructuredNetworkWordCountWindowed",
        (str(WINDOW_S), str(SLIDE_S)),
        json_file,
        ".json",
        windowed_expected,
        windowed_got,
    ),
    Port(
        "structured_sessionization.py",
        "StructuredSessionization",
        (),
        json_file,
        ".json",
        sessions_expected,
        sessions_got,
    ),
]


# The run -------------------------------------------------------------------------------------
def put_files(folder: Path, lines: list[Line], first: int, count: int, port: Port) -> None:
    """Input files ``first``.. of ``LINES_PER_FILE`` lines each, each moved in whole (a name
    starting with '.' is skipped until renamed)."""
    for i in range(first, first + count):
        chunk = lines[i * LINES_PER_FILE : (i + 1) * LINES_PER_FILE]
        hidden = folder / f".part-{i:03d}{port.suffix}"
        hidden.write_text(port.write(chunk))
        hidden.rename(folder / f"part-{i:03d}{port.suffix}")


def snapshot(out: Path) -> list[dict[str, Any]] | None:
    """The rows of the newest committed snapshot (``<out>/current``); None while there is
    none, or when it was swapped (and the older pruned) while being read."""
    try:
        current = (out / "current").resolve(strict=True)
        return [
            json.loads(row)
            for part in sorted(current.glob("part-*.json"))
            for row in part.read_text().splitlines()
            if row.strip()
        ]
    except FileNotFoundError:
        return None


@pytest.mark.parametrize("port", PORT_LIST, ids=lambda p: p.file.removesuffix(".py"))
def test_a_port_of_sparks_example_killed_mid_run_ends_with_exact_counts(
    port: Port, tmp_path: Path
) -> None:
    inp, out, log = tmp_path / "in", tmp_path / "out", tmp_path / "driver.log"
    inp.mkdir()
    lines = make_lines((BEFORE + AFTER) * LINES_PER_FILE, seed=len(port.file))
    expected = port.expected(lines)
    put_files(inp, lines, 0, BEFORE, port)
    argv = stoker_cmd("run", str(PORTS / port.file), *LIGHT, str(inp), str(out), *port.args)
    state = tmp_path / ".stoker" / port.job  # the default state folder, under the cwd

    # Run 1: killed with SIGKILL once two epochs have committed (two files at most an epoch:
    # the prepared input takes five).
    with driver(argv, tmp_path, log) as proc:
        wait_running(proc, "two committed epochs", lambda: committed(state, port.job) >= 2, log)
        kill_group(proc)
        assert proc.returncode == -signal.SIGKILL
    before_kill = snapshot(out)
    assert before_kill is not None

    # More input while the job is down, then the same command again: it goes on from the
    # checkpoint, with the epoch the kill cut off replayed.
    put_files(inp, lines, BEFORE, AFTER, port)
    total = sum(expected.values())
    with driver(argv, tmp_path, log) as proc:

        def caught_up() -> list[dict[str, Any]] | None:
            rows = snapshot(out)
            return rows if rows and sum(port.got(rows).values()) >= total else None

        rows = wait_running(
            proc,
            lambda: f"{total} counted in {out / 'current'} (now {port.got(snapshot(out) or [])})",
            caught_up,
            log,
        )
        got = port.got(rows)
        missing, extra = expected - got, got - expected
        assert got == expected, f"missing {dict(missing)}, extra {dict(extra)}\n{log_tail(log)}"

        proc.send_signal(signal.SIGTERM)  # the driver only: a graceful stop
        assert proc.wait(RUN_TIMEOUT) == SUSPENDED_EXIT, log_tail(log)
    assert "committed" in log.read_text()
    assert os.path.isdir(state / "checkpoint")
