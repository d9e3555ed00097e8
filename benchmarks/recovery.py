"""Recovery: ``kill -9`` of a driver, restarted at once, to the next committed epoch.

Two real drivers, each its own process group (so the kill takes the Spark JVM with it), both
``local[2]``, the same endless ``stoker_generator`` source (1000 rows per epoch, 100 ms trigger),
the same filter and parquet output:

* **stoker**: ``stoker run benchmarks/apps/recovery_stoker.py`` (started with
  ``tests/support``'s ``start_driver``); the first epoch committed by the new attempt is
  read from the job's SQLite store (``committed_at`` of the first epoch it decided);
* **plain**: ``python benchmarks/apps/recovery_plain.py``, a Structured Streaming query with
  ``foreachBatch`` restarted from its checkpoint; its first batch written by the new process.

One turn of a side: (re)start it, let it commit ``--warm-epochs`` epochs, wait ``--kill-delay``
so the kill lands inside an epoch, ``kill -9`` the process group (the time of the kill is
taken just before it), restart at once, wait for the first committed epoch, then kill it and
hand the machine to the other side (so the two never run at once). Turns alternate
stoker / plain. Each restart is broken down with timestamps that the drivers write
(``benchmarks/apps/_marks.py``): Python and imports, SparkSession, stoker's attempt and
recovery, query start, first ``foreachBatch``, first commit. The restarts at the start of a
turn (from a checkpoint left by an earlier kill, but not right after it) are reported too, as
"process start -> first commit".

Run: ``python benchmarks/recovery.py [--runs 3] [--json out.json]``.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C

sys.path.insert(0, str(C.REPO))
from stoker.store import open_store
from tests.support import kill_group, start_driver

APPS = Path(__file__).resolve().parent / "apps"
JOB = "recovery-bench"


class Side:
    """One driver kind: how to start it and how to see its progress."""

    def __init__(self, name: str, root: Path, per_epoch: int, trigger_ms: int) -> None:
        self.name = name
        self.dir = root / name
        self.dir.mkdir(parents=True)
        self.marks = self.dir / "marks.jsonl"
        self.log = self.dir / "driver.log"
        self.env = {
            "BENCH_OUT": str(self.dir / "out"),
            "BENCH_MARKS": str(self.marks),
            "BENCH_PER_EPOCH": str(per_epoch),
            "BENCH_TRIGGER": f"{trigger_ms}ms",
            "BENCH_TRIGGER_MS": str(trigger_ms),
            "BENCH_CHECKPOINT": str(self.dir / "checkpoint"),
            "BENCH_JOB": JOB,
            "PYTHONUNBUFFERED": "1",
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Start the driver; the wall-clock time just before the process was spawned."""
        t = time.time()
        if self.name == "stoker":
            self.proc = start_driver(
                APPS / "recovery_stoker.py",
                "--quiet",
                "-D",
                f"stoker.state_dir={self.dir / 'state'}",
                "-D",
                "stoker.master=local[2]",
                env=self.env,
                log=self.log,
            )
        else:
            out = open(self.log, "ab")  # noqa: SIM115 - handed to the child
            self.proc = subprocess.Popen(
                [sys.executable, str(APPS / "recovery_plain.py")],
                env={**os.environ, **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=str(C.REPO),
            )
        return t

    def kill(self) -> None:
        if self.proc is not None:
            kill_group(self.proc)
            self.proc = None

    def events(self, pid: int) -> list[dict[str, Any]]:
        if not self.marks.exists():
            return []
        out = []
        for line in self.marks.read_text().splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # a line being written
            if ev["pid"] == pid:
                out.append(ev)
        return out

    def epochs(self, pid: int) -> list[dict[str, Any]]:
        return [e for e in self.events(pid) if e["event"] == "epoch"]

    def wait_epochs(self, n: int, timeout: float) -> list[dict[str, Any]]:
        """Wait until the running driver has finished ``n`` epochs; its epoch events."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            eps = self.epochs(self.proc.pid)
            if len(eps) >= n:
                return eps
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
        raise RuntimeError(f"{self.name} driver: no {n} epochs within {timeout}s\n{tail}")

    def first_commit(self, timeout: float) -> dict[str, Any]:
        """Timestamps of the running driver's way to its first committed epoch."""
        assert self.proc is not None
        pid = self.proc.pid
        if self.name == "plain":
            ep = self.wait_epochs(1, timeout)[0]
            marks = {e["event"]: e["t"] for e in self.events(pid) if e["event"] != "epoch"}
            return {
                **marks,
                "first_batch_start": ep["start"],
                "first_batch_end": ep["t"],
                "first_commit": ep["t"],
                "epoch": ep["epoch"],
            }
        deadline = time.monotonic() + timeout
        store = None
        try:
            while time.monotonic() < deadline:
                marks = {e["event"]: e for e in self.events(pid)}
                att = marks.get("attempt_started", {}).get("attempt")
                if att is not None:
                    if store is None:
                        store = open_store(self.dir / "state" / "store.db")
                    done = [
                        e
                        for e in store.list_epochs(JOB, limit=50)
                        if e.decided_by == att and e.committed_at is not None
                    ]
                    if done:
                        first = min(done, key=lambda e: e.epoch)
                        eps = self.epochs(pid)
                        return {
                            **{k: v["t"] for k, v in marks.items() if k != "epoch"},
                            "attempt": att,
                            "first_batch_start": eps[0]["start"] if eps else None,
                            "first_batch_end": eps[0]["t"] if eps else None,
                            "first_batch_replayed_decided": bool(eps and eps[0]["replayed"]),
                            "first_commit": first.committed_at,
                            "epoch": first.epoch,
                        }
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        finally:
            if store is not None:
                store.close()
        tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
        raise RuntimeError(f"stoker driver: no committed epoch within {timeout}s\n{tail}")


# The timestamps of a restart, by the name of the step that ends there. Each step is timed from
# the mark before it, in the order the marks happened (stoker's runner may reorder them).
MARKS = {
    "kill": "kill -9 of the process group",
    "spawn": "group gone, new process spawned",
    "app_start": "python, pyspark (and stoker) imported",
    "session_ready": "SparkSession created",
    "sources_opened": "sources opened (readStream.load)",
    "attempt_started": "stoker: job + attempt in the store",
    "recovered": "stoker: recovery of sinks and store",
    "query_started": "query started (writeStream.start)",
    "first_batch_start": "first foreachBatch entered",
    "first_commit": "first epoch committed",
}


def phases(m: dict[str, Any]) -> dict[str, float]:
    """Seconds of each step of one restart, and the totals."""
    seq = sorted((m[k], k) for k in MARKS if m.get(k) is not None)
    out = {MARKS[b]: tb - ta for (ta, _), (tb, b) in itertools.pairwise(seq)}
    out["spawn -> SparkSession ready"] = m["session_ready"] - m["spawn"]
    out["SparkSession ready -> first commit"] = m["first_commit"] - m["session_ready"]
    out["spawn -> first commit"] = m["first_commit"] - m["spawn"]
    if m.get("kill") is not None:
        out["kill -> first commit"] = m["first_commit"] - m["kill"]
    return out


TOTALS = (
    "spawn -> SparkSession ready",
    "SparkSession ready -> first commit",
    "spawn -> first commit",
    "kill -> first commit",
)


def turn(side: Side, args: Any, fresh: bool) -> dict[str, Any]:
    """One turn of ``side``; returns the resume sample and the kill-restart sample."""
    resume: dict[str, Any] = {"spawn": side.start(), "fresh": fresh}
    resume.update(side.first_commit(args.timeout))
    side.wait_epochs(args.warm_epochs, args.timeout)
    time.sleep(args.kill_delay)
    assert side.proc is not None
    t_kill = time.time()
    side.kill()
    sample: dict[str, Any] = {"kill": t_kill, "spawn": side.start()}
    sample.update(side.first_commit(args.timeout))
    side.kill()
    return {"resume": resume, "restart": sample}


def main() -> int:
    ap = C.arg_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="kill-restart samples per side (3)")
    ap.add_argument("--per-epoch", type=int, default=1000, help="rows per epoch (1000)")
    ap.add_argument("--trigger-ms", type=int, default=100, help="trigger interval (100 ms)")
    ap.add_argument(
        "--warm-epochs", type=int, default=3, help="epochs a driver commits before it is killed (3)"
    )
    ap.add_argument(
        "--kill-delay",
        type=float,
        default=0.15,
        help="seconds after that epoch before the kill (0.15)",
    )
    ap.add_argument("--timeout", type=float, default=180.0, help="per wait (180 s)")
    args = ap.parse_args()

    info = C.machine()
    C.print_machine(info)
    print(
        f"drivers: endless generator ({args.per_epoch} rows/epoch, trigger {args.trigger_ms} ms)"
        f" -> filter -> parquet, local[2]; {args.runs} kill -9 + immediate restarts per side, "
        f"turns alternating stoker / plain"
    )
    root = Path(tempfile.mkdtemp(prefix="stoker-bench-recovery-"))
    sides = {n: Side(n, root, args.per_epoch, args.trigger_ms) for n in ("stoker", "plain")}
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {
        n: {"restart": [], "resume": []} for n in sides
    }
    try:
        for i in range(args.runs):
            for name in ("stoker", "plain") if i % 2 == 0 else ("plain", "stoker"):
                for attempt in range(2):
                    try:
                        r = turn(sides[name], args, fresh=(i == 0 and attempt == 0))
                        break
                    except RuntimeError as e:
                        sides[name].kill()
                        print(f"  run {i + 1} {name}: failed ({str(e).splitlines()[0]}); again")
                        if attempt == 1:
                            raise
                restart = phases(r["restart"])
                samples[name]["restart"].append({"marks": r["restart"], "phases": restart})
                if not r["resume"]["fresh"]:
                    samples[name]["resume"].append(
                        {"marks": r["resume"], "phases": phases(r["resume"])}
                    )
                print(
                    f"  run {i + 1} {name:<6}: kill -> first commit "
                    f"{restart['kill -> first commit']:6.2f} s (SparkSession ready after "
                    f"{restart['spawn -> SparkSession ready']:5.2f} s, epoch "
                    f"{r['restart']['epoch']})"
                )
                C.flush()
    finally:
        for s in sides.values():
            s.kill()
        keep = os.environ.get("BENCH_KEEP")
        if keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    summary = _summary(samples)
    _print(summary, args)
    C.write_json(
        args.json,
        {
            "benchmark": "recovery",
            "machine": info,
            "params": vars(args),
            "summary": summary,
            "samples": samples,
        },
    )
    return 0


def _summary(samples: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, kinds in samples.items():
        out[name] = {}
        for kind, rs in kinds.items():
            labels = [lbl for r in rs for lbl in r["phases"]]
            labels = list(dict.fromkeys(labels))
            out[name][kind] = {
                "n": len(rs),
                **{
                    lbl: C.median(r["phases"][lbl] for r in rs if lbl in r["phases"])
                    for lbl in labels
                },
                "ranges": {
                    lbl: [min(v), max(v)]
                    for lbl in labels
                    if (v := [r["phases"][lbl] for r in rs if lbl in r["phases"]])
                },
            }
    st, pl = out["stoker"]["restart"], out["plain"]["restart"]
    out["ratio_kill_to_commit"] = st["kill -> first commit"] / pl["kill -> first commit"]
    out["added_s_kill_to_commit"] = st["kill -> first commit"] - pl["kill -> first commit"]
    return out


def _print(s: dict[str, Any], args: Any) -> None:
    st, pl = s["stoker"]["restart"], s["plain"]["restart"]
    print()
    print(f"Recovery after kill -9, restart at once: medians over {st['n']} / {pl['n']} runs")
    for name in ("stoker", "plain"):
        d = s[name]["restart"]
        steps = [lbl for lbl in d["ranges"] if lbl not in TOTALS]
        rows = [[lbl, C.fmt(d[lbl], 3), C.spread(d["ranges"][lbl], 3)] for lbl in steps]
        print()
        print(f"{name}: each step, from the end of the one above it (s)")
        print(C.table(["step ends when", "median", "min..max"], rows))
    print()
    rows = [
        [
            lbl,
            f"{C.fmt(st[lbl], 2)}",
            f"{C.fmt(pl[lbl], 2)}",
            f"{st[lbl] / pl[lbl]:.2f}",
            f"{C.spread(st['ranges'][lbl])} / {C.spread(pl['ranges'][lbl])}",
        ]
        for lbl in TOTALS
    ]
    print(C.table(["total (s)", "stoker", "plain", "stoker/plain", "min..max s / p"], rows))
    print()
    print(
        f"kill -> first commit, stoker/plain: {s['ratio_kill_to_commit']:.2f} "
        f"({s['added_s_kill_to_commit']:+.2f} s)"
    )
    rs, rp = s["stoker"]["resume"], s["plain"]["resume"]
    if rs["n"] and rp["n"]:
        print(
            f"restart from a checkpoint at the start of a turn (not right after a kill), "
            f"spawn -> first commit: stoker {rs['spawn -> first commit']:.2f} s "
            f"(n={rs['n']}), plain {rp['spawn -> first commit']:.2f} s (n={rp['n']})"
        )


if __name__ == "__main__":
    sys.exit(main())
