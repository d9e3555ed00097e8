"""How the Iceberg sink's commit grows with the snapshots a table keeps, with and without
``keep_snapshots`` (issue 43: the commit took 15 ms at the first epoch and 88 ms at the 25th).

One process, one ``local[2]`` session, two tables in one SQLite catalog: ``kept-all`` (no
expiry) and ``keep-N``. Each epoch the same 1,000-row frame is prepared for both, then both
commit, in an order that alternates every epoch; ``sink.commit`` is timed (the marker read,
the snapshot's manifests, the catalog's commit, the clean-up; for ``keep-N`` its expiry too
when it runs). Medians per block of epochs, and their ratio.

Run: ``python benchmarks/iceberg_commit_growth.py [--epochs 200] [--keep 20] [--block 25]``
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C
from _sink_bench import spark_session

from stoker.sinks import iceberg
from stoker.sinks.base import SinkOwner
from stoker.types import AttemptNo, Epoch, JobId


def main() -> int:
    ap = C.arg_parser(__doc__ or "")
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--keep", type=int, default=20)
    ap.add_argument("--block", type=int, default=25)
    ap.add_argument("--rows", type=int, default=1000)
    args = ap.parse_args()
    info = C.machine()
    C.print_machine(info)
    work = Path(tempfile.mkdtemp(prefix="iceberg-growth-"))
    url = f"sqlite:///{work / 'catalog.db'}"
    owner = SinkOwner(JobId("growth"), "uid-growth")
    sides: dict[str, Any] = {
        "kept-all": iceberg(url, "db.all"),
        f"keep-{args.keep}": iceberg(url, "db.kept", keep_snapshots=args.keep),
    }
    times: dict[str, list[float]] = {k: [] for k in sides}
    with spark_session("iceberg-commit-growth") as spark:
        for sink in sides.values():
            sink.validate(owner)
            sink.open(owner, work)
        for e in range(args.epochs):
            df = spark.range(e * args.rows, (e + 1) * args.rows, 1, 2)
            prepared = {k: s.prepare(df, Epoch(e), AttemptNo(1)) for k, s in sides.items()}
            order = list(sides) if e % 2 == 0 else list(reversed(sides))
            for k in order:
                t0 = time.perf_counter()
                sides[k].commit(Epoch(e), AttemptNo(1), prepared[k].detail)
                times[k].append((time.perf_counter() - t0) * 1000)
            if (e + 1) % args.block == 0:
                print(f"epoch {e + 1}: " + ", ".join(
                    f"{k} {C.median(v[-args.block:]):.1f} ms" for k, v in times.items()
                ), flush=True)  # fmt: skip
        snaps = {k: len(s._table().snapshots()) for k, s in sides.items()}
    keep = f"keep-{args.keep}"
    rows = []
    for b in range(0, args.epochs, args.block):
        a = C.median(times["kept-all"][b : b + args.block])
        k = C.median(times[keep][b : b + args.block])
        rows.append(
            [f"{b + 1}-{min(b + args.block, args.epochs)}", C.fmt(a), C.fmt(k), f"{k / a:.2f}"]
        )
    print()
    print(C.table(["epochs", "commit ms, kept-all", f"commit ms, {keep}", "ratio"], rows))
    print(f"\nsnapshots at the end: {snaps}")
    C.print_machine(C.machine())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
