"""How long a driver takes to start, with and without stoker's JVM class archive
(stoker.runtime.jvmcache), in one run.

    python benchmarks/driver_start.py [--runs 5] [--json out.json]

Each run is a whole ``stoker run`` of a small bounded job (a generator of 200 rows into a
files sink, local[1], a fresh state folder): from the command's start to its exit, the time a
restart costs before the job can recover. The two kinds alternate, so drift hits both; the
archive is made first (``python -m stoker.runtime.jvmcache build``), outside the timing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, arg_parser, machine, median, print_machine, spread, write_json

APP = """\
from stoker import Pipeline, sinks, sources

pipeline = Pipeline("start-bench")
pipeline.source(sources.generator(total=200, max_rows_per_epoch=100))
pipeline.sink(sinks.files({out!r}))
"""


def one(work: Path, n: int, archive: bool) -> float:
    root = work / f"run-{n}-{'cds' if archive else 'plain'}"
    root.mkdir()
    app = root / "app.py"
    app.write_text(APP.format(out=str(root / "out")))
    env = {**os.environ, "STOKER_JVM_CDS": "1" if archive else "0"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stoker.cli",
            "run",
            str(app),
            "--quiet",
            "-D",
            "stoker.master=local[1]",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"stoker run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return took


def main() -> None:
    ap = arg_parser(__doc__ or "")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    info = machine()
    print_machine(info)
    subprocess.run(
        [sys.executable, "-m", "stoker.runtime.jvmcache", "build"],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    times: dict[str, list[float]] = {"plain": [], "archive": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        one(work, -1, True)  # warm the page cache for both, not counted
        for n in range(args.runs):
            times["plain"].append(one(work, n, False))
            times["archive"].append(one(work, n, True))
            print(
                f"run {n}: plain {times['plain'][-1]:.2f} s, "
                f"archive {times['archive'][-1]:.2f} s; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    plain, cds = median(times["plain"]), median(times["archive"])
    print(f"\nstoker run of a 200-row bounded job, medians of {args.runs}:")
    print(f"  without the archive {plain:.2f} s ({spread(times['plain'], 2)})")
    print(f"  with the archive    {cds:.2f} s ({spread(times['archive'], 2)})")
    print(f"  ratio {cds / plain:.2f}x; load at the end {os.getloadavg()[0]:.1f}")
    write_json(args.json, {"machine": info, "times": times, "ratio": cds / plain})


if __name__ == "__main__":
    main()
