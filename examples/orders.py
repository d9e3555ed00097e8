"""The orders example: a bounded backfill plus a stream of live orders, filtered by a config value,
committed exactly once to a files sink (and to PostgreSQL when STOKER_EXAMPLE_PG_DSN is set).

Run it with ``stoker run examples/orders.py`` (or ``python examples/orders.py``); set the
filter from outside with ``--config min_amount=50``. It makes its
own data under ./.stoker-example (once: delete that folder to start over), finishes by itself
and prints what it committed.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import stoker
from stoker import Pipeline, sinks, sources

WORK = Path(os.environ.get("STOKER_EXAMPLE_DIR", ".stoker-example")).resolve()
SCHEMA = "order_id long, customer string, amount double"


def make_backfill(folder: Path, files: int = 5, per_file: int = 200) -> int:
    """Yesterday's orders as JSON-lines files: the bounded input. Made only when missing, so
    running this again (a job manager learning the job's name runs main up to stoker.run)
    changes nothing; returns how many orders it holds."""
    if folder.is_dir():
        return sum(len(p.read_text().splitlines()) for p in folder.glob("orders-*.json"))
    rng = random.Random(7)
    making = folder.with_name(folder.name + ".making")
    making.mkdir(parents=True, exist_ok=True)
    n = 0
    for f in range(files):
        with open(making / f"orders-{f:03d}.json", "w", encoding="utf-8") as fh:
            for _ in range(per_file):
                fh.write(
                    json.dumps(
                        {
                            "order_id": n,
                            "customer": f"c{rng.randrange(50)}",
                            "amount": round(rng.uniform(1, 100), 2),
                        }
                    )
                    + "\n"
                )
                n += 1
    making.rename(folder)  # whole or not at all
    return n


def live_orders(df):  # the generator's ids, shaped like orders (deterministic per id)
    return df.selectExpr(
        "id + 1000000 AS order_id",
        "concat('c', cast(id % 50 AS string)) AS customer",
        "round(cast((id * 37) % 10000 AS double) / 100, 2) AS amount",
    )


def build(live_total: int = 3000) -> Pipeline:
    p = Pipeline("orders", config={"min_amount": 10.0})
    p.source(sources.files(str(WORK / "data/backfill"), format="json", schema=SCHEMA, bounded=True))
    p.source(
        sources.generator(total=live_total, rows_per_second=1500, max_rows_per_epoch=1000),
        map=live_orders,
    )
    p.transform(lambda df, ctx: df.where(df.amount >= ctx.config["min_amount"]))
    p.sink(sinks.files(str(WORK / "out/orders"), format="parquet"))
    if os.environ.get("STOKER_EXAMPLE_PG_DSN"):
        p.sink(sinks.postgres(os.environ["STOKER_EXAMPLE_PG_DSN"], table="orders"))
    return p


def main() -> None:
    pipeline = build()
    # Set-up that is harmless to repeat: the input is made once, nothing is ever deleted. (A
    # job manager learning the job's name runs this main up to stoker.run.) The job state
    # lives beside the data.
    backfill = make_backfill(WORK / "data/backfill")
    result = stoker.run(pipeline, trigger="500ms", state_dir=WORK / "state")
    if result.state != stoker.JobState.FINISHED:
        return  # stopped by a signal (SUSPENDED): stoker says how to go on; nothing to sum up yet

    import pyarrow.dataset as ds

    table = ds.dataset(str(WORK / "out/orders"), format="parquet", partitioning="hive").to_table()
    ids = table.column("order_id").to_pylist()
    print()
    print(f"job {result.job_id}: {result.state} after {result.epochs} epochs")
    print(f"input: {backfill} backfill orders + 3000 live orders; kept amount >= min_amount")
    print(
        f"committed {len(ids)} orders to {WORK / 'out/orders'} "
        f"({len(set(ids))} distinct, {len(ids) - len(set(ids))} duplicates)"
    )
    epochs = sorted(set(table.column("epoch").to_pylist()))
    print(f"epochs on disk: {epochs[0]}..{epochs[-1]}" if epochs else "no epochs on disk")
    print(f"see them with: {result.command('epochs')}")


if __name__ == "__main__":
    main()
