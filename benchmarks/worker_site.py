"""What Spark's Python processes cost a driver, with and without stoker's worker site
(stoker/runtime/workersite: they import the installed PySpark instead of compiling its zip
copy), in one run; with ``--compare zygote``, with and without the zygote that forks them
warm (stoker/runtime/zygote.py: the worker daemons and the source runner).

    python benchmarks/worker_site.py [--compare site|zygote] [--runs 5] [--json out.json]

Each run is a whole ``stoker run`` of a two-epoch bounded job (a generator of 2,000 rows into
a files sink, local[2], a fresh state folder). The process tree's CPU time is read from
/proc every 50 ms while it runs (each process's last reading counts): the driver's JVM, the
driver's Python, and Spark's Python processes (data source planners, the streaming source
runner, the UDF daemon and their forked workers) apart. Also the wall time of the run and
the first epoch's time as the driver logs it. The two kinds alternate, so drift hits both.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import arg_parser, machine, median, print_machine, spread, write_json

APP = """\
from stoker import Pipeline, sinks, sources

pipeline = Pipeline("site-bench")
pipeline.source(sources.generator(total=2000, max_rows_per_epoch=1000))
pipeline.sink(sinks.files({out!r}))
"""
TICK = os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                st = fh.read()
        except OSError:
            continue
        ppid = int(st[st.rindex(")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def _cpu(pid: int) -> tuple[float, str] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            st = fh.read()
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    f = st[st.rindex(")") + 2 :].split()
    return (int(f[11]) + int(f[12])) / TICK, cmd


def _kind(cmd: str) -> str:
    if "java" in cmd.split(" ")[0]:
        return "jvm"
    # The zygote and what it forks (their command line is the zygote's): Spark's Python.
    if "pyspark" in cmd or "-m stoker.runtime.zygote" in cmd or "zygote_client.py" in cmd:
        return "spark_python"
    return "driver_python"


SWITCH = {"site": "STOKER_WORKER_SITE", "zygote": "STOKER_SOURCE_ZYGOTE"}


def one(work: Path, n: int, on: bool, compare: str) -> dict[str, float]:
    root = work / f"run-{n}-{compare if on else 'plain'}"
    root.mkdir()
    app = root / "app.py"
    app.write_text(APP.format(out=str(root / "out")))
    env = {**os.environ, SWITCH[compare]: "1" if on else "0"}
    argv = [sys.executable, "-m", "stoker.cli", "run", str(app), "-D", "stoker.master=local[2]"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen: dict[int, tuple[float, str]] = {}
    while proc.poll() is None:
        kids, todo = _children(), [proc.pid]
        while todo:
            pid = todo.pop()
            todo.extend(kids.get(pid, []))
            got = _cpu(pid)
            if got is not None and (got[1] or pid not in seen):
                seen[pid] = got
        time.sleep(0.05)
    took = time.perf_counter() - t0
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"stoker run failed ({proc.returncode}):\n{out[-2000:]}")
    cpu = {"jvm": 0.0, "spark_python": 0.0, "driver_python": 0.0}
    for seconds, cmd in seen.values():
        cpu[_kind(cmd)] += seconds
    first = re.search(r"epoch 0 committed: \d+ rows, (\d+) ms", out)
    return {
        **cpu,
        "total": sum(cpu.values()),
        "wall": took,
        "first_epoch_ms": float(first.group(1)) if first else float("nan"),
    }


def main() -> None:
    ap = arg_parser(__doc__ or "")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--compare", choices=sorted(SWITCH), default="site")
    args = ap.parse_args()
    on = args.compare
    info = machine()
    print_machine(info)
    runs: dict[str, list[dict[str, float]]] = {"plain": [], on: []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        one(work, -1, True, on)  # warm the page cache and the JVM class archive, not counted
        for n in range(args.runs):
            for kind in ("plain", on):
                runs[kind].append(one(work, n, kind == on, on))
            p, s = runs["plain"][-1], runs[on][-1]
            print(
                f"run {n}: CPU plain {p['total']:.1f} s, {on} {s['total']:.1f} s; "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    print(f"\nstoker run of a two-epoch bounded job, medians of {args.runs} (CPU seconds):")
    ratios = {}
    for key in ("spark_python", "jvm", "driver_python", "total", "wall", "first_epoch_ms"):
        p = [r[key] for r in runs["plain"]]
        s = [r[key] for r in runs[on]]
        ratios[key] = median(s) / median(p)
        print(
            f"  {key:14} plain {median(p):8.2f} ({spread(p, 2)})  {on} {median(s):8.2f} "
            f"({spread(s, 2)})  ratio {ratios[key]:.2f}x"
        )
    print(f"  load at the end {os.getloadavg()[0]:.1f}")
    write_json(args.json, {"machine": info, "runs": runs, "ratios": ratios})


if __name__ == "__main__":
    main()
