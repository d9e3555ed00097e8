"""Running totals: a stateful pipeline. Clicks stream in; each epoch writes, for every page it
saw, the page's total since the job started (not that epoch's count), exactly once, across
restarts. Spark keeps the totals in the job's checkpoint.

Run it with ``stoker run examples/running_totals.py``; it finishes by itself and prints each
page's total. The state lives in ``Pipeline.stream``, the part that runs on the whole stream;
``Pipeline.transform`` sees one epoch's rows at a time (an aggregation there counts each epoch
on its own, and stoker warns about it).
"""

from __future__ import annotations

import os
from pathlib import Path

import stoker
from stoker import Pipeline, sinks, sources

WORK = Path(os.environ.get("STOKER_EXAMPLE_DIR", ".stoker-example")).resolve()
CLICKS = 2000
PAGES = 5


def clicks(df):  # the generator's ids as clicks on PAGES pages
    return df.selectExpr(f"concat('page-', cast(id % {PAGES} AS string)) AS page")


def totals(stream):  # the streaming part: state across epochs
    return stream.groupBy("page").count().withColumnRenamed("count", "clicks")


def build() -> Pipeline:
    # "complete": each epoch writes every page's total; the files sink keeps the newest in
    # <path>/current. (With PostgreSQL, "update" and sinks.postgres(dsn, table, key=["page"])
    # upsert only the pages whose total changed.)
    p = Pipeline("running_totals", output_mode="complete")
    p.source(sources.generator(total=CLICKS, max_rows_per_epoch=500), map=clicks)
    p.stream(totals)
    p.sink(sinks.files(str(WORK / "out/running_totals"), format="json"))
    return p


def main() -> None:
    result = stoker.run(build(), trigger="500ms", state_dir=WORK / "state")
    if result.state != stoker.JobState.FINISHED:
        return  # stopped by a signal (SUSPENDED): stoker says how to go on; nothing to sum up yet

    import pyarrow.dataset as ds

    current = WORK / "out/running_totals/current"
    rows = ds.dataset(str(current), format="json").to_table().to_pylist()
    latest = {r["page"]: r["clicks"] for r in rows}
    print()
    print(f"job {result.job_id}: {result.state} after {result.epochs} epochs")
    for page, total in sorted(latest.items()):
        print(f"{page}: {total} clicks since the start")
    print(f"{sum(latest.values())} clicks in all ({CLICKS} sent)")
    print(f"see the epochs with: {result.command('epochs')}")


if __name__ == "__main__":
    main()
