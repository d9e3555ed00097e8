"""What fsyncing the files sink's data costs per epoch (durable parts before the decision).

Two measurements in one run, both against a baseline in the same run:

1. Paired, per epoch: every epoch of one query writes its rows through two files sinks, in
   alternating order: the sink as shipped (``prepare`` fsyncs every file and folder Spark
   wrote, ``commit`` the manifest and the folders) and the sink as it was before (only the
   manifest and the output folder fsynced). Same data, same moment: the machine's noise
   largely cancels in the per-epoch difference. The fsync calls of the shipped side are
   counted and timed one by one.
2. Whole jobs: ``stoker.run`` of the same pipeline, shipped vs before, alternated, with the
   time of every epoch (``EpochProcessor._run``).

"Before" is made from the outside, in this process only: ``FilesSink._make_durable`` does
nothing and the sink's ``fsync_tree`` fsyncs only the manifest (what ``commit`` did before).
stoker's code is not changed for the measurement.

    python benchmarks/files_fsync.py [--epochs 43] [--per-epoch 10000] [--partitions 2]
                                     [--rounds 4] [--job-epochs 20] [--json out.json]
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _common as C

import stoker
from stoker import sinks, sources
from stoker.sinks.base import SinkOwner
from stoker.sinks.files import FilesSink
from stoker.sources.generator import FORMAT
from stoker.types import AttemptNo, Epoch, JobId

SHIPPED, BEFORE = "fsync every file and folder (shipped)", "manifest and output folder (before)"
WARM_UP = 3
# The module (stoker.sinks.files is also the name of the sink's factory function).
files_sink = importlib.import_module("stoker.sinks.files")


class FsyncTimer:
    """Counts and times ``os.fsync`` calls while ``on`` (the real call still runs)."""

    def __init__(self) -> None:
        self.on = False
        self.calls = 0
        self.seconds = 0.0
        self._real = os.fsync

    def install(self) -> None:
        def fsync(fd: int) -> None:
            if not self.on:
                self._real(fd)
                return
            t0 = time.perf_counter()
            self._real(fd)
            self.seconds += time.perf_counter() - t0
            self.calls += 1

        os.fsync = fsync  # type: ignore[assignment]

    def take(self) -> tuple[int, float]:
        out = (self.calls, self.seconds * 1000)
        self.calls, self.seconds = 0, 0.0
        return out


@contextlib.contextmanager
def as_before() -> Iterator[None]:
    """The files sink as it was before its data was fsynced."""
    real_tree, real_durable = files_sink.fsync_tree, FilesSink._make_durable

    def manifest_only(folder: Path) -> None:
        fd = os.open(folder / "_manifest.json", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    files_sink.fsync_tree = manifest_only  # type: ignore[assignment]
    FilesSink._make_durable = lambda self, target: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        files_sink.fsync_tree = real_tree  # type: ignore[assignment]
        FilesSink._make_durable = real_durable  # type: ignore[method-assign]


def run_paired(
    spark: Any, work: Path, epochs: int, per_epoch: int, parts: int, timer: FsyncTimer
) -> dict[str, Any]:
    owner = SinkOwner(JobId("fsync-bench"), "bench")
    side: dict[str, FilesSink] = {}
    for name, folder in ((SHIPPED, "shipped"), (BEFORE, "before")):
        sink = FilesSink(path=str(work / folder))
        sink.open(owner, work)
        side[name] = sink
    times: dict[str, list[float]] = {SHIPPED: [], BEFORE: []}
    fsyncs: list[tuple[int, float]] = []

    def batch(df: Any, batch_id: int) -> None:
        order = [SHIPPED, BEFORE] if batch_id % 2 == 0 else [BEFORE, SHIPPED]
        for name in order:
            sink = side[name]
            with contextlib.ExitStack() as stack:
                if name == BEFORE:
                    stack.enter_context(as_before())
                timer.on = name == SHIPPED
                t0 = time.perf_counter()
                sink.prepare(df, Epoch(batch_id), AttemptNo(1))
                sink.commit(Epoch(batch_id), AttemptNo(1))
                times[name].append((time.perf_counter() - t0) * 1000)
                timer.on = False
            if name == SHIPPED:
                fsyncs.append(timer.take())

    stream = (
        spark.readStream.format(FORMAT)
        .options(
            sid="s0",
            total=str(epochs * per_epoch),
            max_rows_per_epoch=str(per_epoch),
            partitions=str(parts),
        )
        .load()
    )
    q = (
        stream.writeStream.foreachBatch(batch)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(processingTime="0 milliseconds")
        .start()
    )
    q.processAllAvailable()
    q.stop()
    shipped, before = times[SHIPPED][WARM_UP:], times[BEFORE][WARM_UP:]
    diffs = [a - b for a, b in zip(shipped, before, strict=True)]
    calls = [c for c, _ in fsyncs[WARM_UP:]]
    ms = [t for _, t in fsyncs[WARM_UP:]]
    return {
        "epochs": len(shipped),
        "shipped_ms": shipped,
        "before_ms": before,
        "median_shipped_ms": C.median(shipped),
        "median_before_ms": C.median(before),
        "median_paired_diff_ms": C.median(diffs),
        "fsync_calls_per_epoch": C.median(calls),
        "median_fsync_ms_per_epoch": C.median(ms),
        "fsync_ms_range": C.spread(ms),
    }


def run_job(spark: Any, work: Path, tag: str, epochs: int, per_epoch: int) -> list[float]:
    """One stoker job; the time of each of its epochs (ms), as ``EpochProcessor._run``."""
    rec = C.EpochRecorder().install()
    try:
        p = stoker.Pipeline(f"fsync-{tag}")
        p.source(sources.generator(total=epochs * per_epoch, max_rows_per_epoch=per_epoch))
        p.sink(sinks.files(str(work / f"out-{tag}"), "parquet"))
        res = stoker.run(p, spark=spark, trigger=0, state_dir=work / f"state-{tag}")
        if str(res.state) != "FINISHED":
            raise RuntimeError(f"job {tag} ended {res.state}")
        return [(r["p_end"] - r["p_start"]) * 1000 for r in rec.take()][WARM_UP:]
    finally:
        rec.uninstall()


def main() -> int:
    ap = C.arg_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=43, help="paired epochs (3 warm-up)")
    ap.add_argument("--per-epoch", type=int, default=10_000, help="rows per epoch")
    ap.add_argument("--partitions", type=int, default=2, help="files per epoch (paired)")
    ap.add_argument("--rounds", type=int, default=4, help="job pairs, 0 to skip")
    ap.add_argument("--job-epochs", type=int, default=20, help="epochs per job")
    args = ap.parse_args()

    info = C.machine()
    C.print_machine(info)
    C.quiet_stoker_logs()
    spark = C.session("stoker-bench-files-fsync")
    timer = FsyncTimer()
    timer.install()
    work = Path(tempfile.mkdtemp(prefix="stoker-fsync-"))
    try:
        paired = run_paired(
            spark, work / "paired", args.epochs, args.per_epoch, args.partitions, timer
        )
        jobs: dict[str, list[float]] = {SHIPPED: [], BEFORE: []}
        for r in range(args.rounds):
            order = [SHIPPED, BEFORE] if r % 2 == 0 else [BEFORE, SHIPPED]
            for name in order:
                tag = f"{'s' if name == SHIPPED else 'b'}{r}"
                with as_before() if name == BEFORE else contextlib.nullcontext():
                    jobs[name] += run_job(spark, work, tag, args.job_epochs, args.per_epoch)
        load_after = os.getloadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()

    print(
        f"\n1. paired: {paired['epochs']} epochs of {args.per_epoch:,} rows in "
        f"{args.partitions} parquet files, prepare + commit per side (ms)"
    )
    rows = [
        [SHIPPED, C.fmt(paired["median_shipped_ms"]), C.spread(paired["shipped_ms"])],
        [BEFORE, C.fmt(paired["median_before_ms"]), C.spread(paired["before_ms"])],
    ]
    print(C.table(["sink", "median", "range"], rows))
    ratio = paired["median_shipped_ms"] / paired["median_before_ms"]
    calls, fsync_ms = paired["fsync_calls_per_epoch"], paired["median_fsync_ms_per_epoch"]
    print(
        f"paired difference (shipped - before), median: {paired['median_paired_diff_ms']:.1f} ms"
        f"; ratio of medians {ratio:.2f}x; fsync calls per epoch {calls:.0f}, their time per "
        f"epoch median {fsync_ms:.1f} ms ({paired['fsync_ms_range']})"
    )
    result: dict[str, Any] = {"machine": info, "paired": paired, "load_after": load_after}
    if args.rounds:
        s, b = jobs[SHIPPED], jobs[BEFORE]
        print(
            f"\n2. whole jobs: {args.rounds} per side alternated, {args.job_epochs} epochs of "
            f"{args.per_epoch:,} rows each ({WARM_UP} warm-up dropped per job), epoch time (ms)"
        )
        rows = [
            [SHIPPED, len(s), C.fmt(C.median(s)), C.spread(s)],
            [BEFORE, len(b), C.fmt(C.median(b)), C.spread(b)],
        ]
        print(C.table(["sink", "epochs", "median", "range"], rows))
        print(f"ratio of medians {C.median(s) / C.median(b):.2f}x")
        result["jobs"] = {"shipped_ms": s, "before_ms": b}
    print("load average after: " + ", ".join(f"{x:.2f}" for x in load_after))
    C.write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
