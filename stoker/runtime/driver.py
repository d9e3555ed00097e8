"""A driver process of one attempt, as a job manager starts it.

``python -m stoker.runtime.driver --job J --attempt N --store URL --state-dir D
[-D k=v ...] -- app.py [args ...]``

The manager made attempt N in the store (STARTING); this process claims it, runs the
application's main under that attempt, and exits: 0 when the job finished or was canceled,
6 when the attempt was fenced off by a newer one, 8 when the job failed, 2 for bad input.
SIGTERM stops it gracefully (the epoch in flight completes and commits).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from types import FrameType

from stoker.errors import StokerError, exit_code
from stoker.runtime import launch
from stoker.settings import parse_pairs


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # the runner's graceful stop path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stoker-driver")
    parser.add_argument("--job", required=True)
    parser.add_argument("--attempt", required=True, type=int)
    parser.add_argument("--store", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--lease-ttl", type=float, default=None)
    parser.add_argument("-D", dest="defines", action="append", default=[])
    parser.add_argument("entrypoint")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)

    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s"
    )
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        from stoker.runtime.appfile import check_app_path, run_app

        overrides = parse_pairs(ns.defines)
        overrides["stoker.store"] = ns.store
        overrides["stoker.state_dir"] = ns.state_dir
        if ns.lease_ttl is not None:
            overrides["stoker.lease_ttl"] = f"{ns.lease_ttl}s"
        launch.set_launch(overrides, ns.job, restart=False, attempt=ns.attempt)
        args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
        results = run_app(check_app_path(ns.entrypoint, "entrypoint"), args)
    except StokerError as e:
        print(f"stoker driver: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return exit_code(e)
    except KeyboardInterrupt:
        return 0
    for r in results:
        print(f"stoker driver: job {r.job_id} ended {r.state}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
