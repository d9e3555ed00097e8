"""Starting a job manager process: store, manager, supervisor, HTTP server."""

from __future__ import annotations

import gc
import logging
import sys
from pathlib import Path

from stoker.manager import JobManager, Supervisor, SupervisorConfig
from stoker.server.app import create_app
from stoker.store import open_store


def serve(
    *,
    store: str | None,
    host: str,
    port: int,
    state_dir: Path,
    token: str | None,
    allow_dirs: list[Path],
    leader_ttl: float = 3.0,
    lease_ttl: float = 10.0,
    cancel_timeout: float = 60.0,
    supervise: bool = True,
) -> None:
    """Serve until SIGINT/SIGTERM. Drivers started here keep running after the manager stops."""
    import uvicorn

    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s"
    )
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    url = store or f"sqlite:///{state_dir / 'store.db'}"
    api_store = open_store(url)
    # The supervisor has its own connection: a slow HTTP request never delays a lease renewal.
    sup_store = open_store(url)
    cfg = SupervisorConfig(
        state_dir=state_dir,
        store_url=url,
        address=f"http://{host}:{port}",
        leader_ttl=leader_ttl,
        lease_ttl=lease_ttl,
        cancel_timeout=cancel_timeout,
    )
    supervisor = Supervisor(sup_store, cfg) if supervise else None
    manager = JobManager(api_store, state_dir, allow_dirs)
    app = create_app(manager, supervisor, token)
    if supervisor is not None:
        supervisor.start()
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    config.load()  # imports the event loop and HTTP parser before the heap is frozen
    # Everything loaded so far lives as long as the process: keep it out of the collector's
    # full passes, which otherwise scan it all and stall every request in flight (measured
    # 30-50 ms at 64 concurrent submissions; see docs/benchmarks.md).
    gc.collect()
    gc.freeze()
    try:
        server.run()
    finally:
        if supervisor is not None:
            supervisor.stop(resign=True)
        manager.close()
        api_store.close()
        sup_store.close()
