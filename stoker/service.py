"""The job manager process, composed: the store connections, the :class:`JobManager` (the
facade the API serves), the :class:`Supervisor` (leadership and the jobs' lifecycle), the
:class:`Scaler` (acting while the supervisor leads) and the HTTP server over
:func:`stoker.server.create_app`, run until SIGINT/SIGTERM. It sits above ``server``,
``manager`` and ``scaling`` (so the API imports no scaler); only the command line
(``stoker server``) starts it."""

from __future__ import annotations

import gc
import logging
import os
import signal
from pathlib import Path
from typing import Any

from stoker import logformat, tokens
from stoker.manager import JobManager, Supervisor, SupervisorConfig
from stoker.manager.clusters.budget import HostBudget
from stoker.redact import redact_logs, redact_url
from stoker.scaling.policy import DefaultPolicy
from stoker.scaling.scaler import Scaler
from stoker.server import create_app
from stoker.server.guard import allowed_hosts, is_loopback
from stoker.store import RetentionPolicy, open_store


def serve(
    *,
    store: str | None,
    host: str,
    port: int,
    state_dir: Path,
    token: str | None,
    read_token: str | None = None,
    insecure_no_token: bool = False,
    allow_hosts: tuple[str, ...] = (),
    allow_dirs: list[Path],
    leader_ttl: float = 3.0,
    lease_ttl: float = 10.0,
    startup_ttl: float = 120.0,
    max_starting: int = 4,
    cancel_timeout: float = 60.0,
    supervise: bool = True,
    retention: RetentionPolicy | None = None,
    retention_jobs: float | None = None,
    control_rate: float = 20.0,
    scaler_tick: float = 1.0,
    scaler_window: float = 60.0,
    log_format: str | None = None,
    budget: HostBudget | None = None,
    allowed_conf: tuple[str, ...] = (),
) -> None:
    """Serve until SIGINT/SIGTERM. Drivers started here keep running after the manager stops.

    ``token`` guards every call but ``/healthz``; ``read_token`` (optional) allows reads only.
    No ``token``: the one in ``<state_dir>/token`` (made on the first start, 0600), unless
    ``insecure_no_token``. ``allow_hosts``: names the API answers to besides loopback names
    and ``host`` (:mod:`stoker.server.guard`).
    ``retention``: what the leader keeps of ended jobs' epoch records (default: all);
    ``retention_jobs``: seconds after which the ended records it ran are deleted (None: kept).
    ``control_rate``: control events per second per job (bursts of twice that; 0: no limit).
    ``startup_ttl``: how long a started driver may take to hold its attempt;
    ``max_starting``: drivers starting at once (0: no bound). ``scaler_tick``: seconds
    between the scaler's passes while this manager leads;
    ``scaler_window``: the seconds of epochs its default policy looks at (at least 10 epochs).
    ``log_format``: text or json (None: ``STOKER_LOG_FORMAT``, else text); the drivers it
    starts inherit it. ``budget``: what the Spark clusters it starts may take in all (the
    defaults of :class:`HostBudget` when None). ``allowed_conf``: submitted conf key
    prefixes allowed to run or load code (refused otherwise).
    """
    import uvicorn

    from stoker.server.headlimit import BoundedHeadProtocol

    logformat.configure(log_format)
    redact_logs()  # a store URL's password or a secret conf value never reaches the log
    # What the manager and the drivers it starts (they inherit it) write is theirs alone: the
    # store (secret conf in it), the driver logs, the checkpoints (issue 22, item 7).
    os.umask(0o077)
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    for line in tokens.private_state_dir(state_dir):  # an older install's modes (issue 39)
        say(f"stoker server: {line}")
    if token is None and not insecure_no_token:
        token, path, made = tokens.server_token(state_dir)
        say(
            f"stoker server: every call but /healthz needs the token in {path} "
            f"({'made now' if made else 'as before'}): 'Authorization: Bearer <token>'; the "
            "CLI reads it from STOKER_TOKEN_FILE=PATH, and by itself from "
            f"./{path.parent.name}/{path.name} against a loopback URL"
        )
    elif token is None:
        say(
            "stoker server: WARNING: no token (--insecure-no-token): any local user or program "
            "may submit, cancel and read jobs"
        )
    if not is_loopback(host):
        say(
            f"stoker server: WARNING: listening on {host} in plain HTTP: tokens and answers "
            "cross the network unencrypted; keep --host 127.0.0.1 behind a TLS proxy (and "
            "--allow-host its name)"
        )
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
        startup_ttl=startup_ttl,
        max_starting=max_starting,
        cancel_timeout=cancel_timeout,
        retention=retention or RetentionPolicy(),
        retention_jobs=retention_jobs,
        budget=budget or HostBudget(),
    )
    supervisor = Supervisor(sup_store, cfg) if supervise else None
    # The scaler acts only while the supervisor leads, on a connection of its own (a worker
    # start it waits for never delays a lease renewal or a request).
    scaler_store = open_store(url) if supervisor is not None else None
    scaler = (
        Scaler(
            scaler_store,
            state_dir,
            DefaultPolicy(window_s=scaler_window),
            tick_s=scaler_tick,
            is_leader=lambda: supervisor.is_leader,
            background=True,
            budget=cfg.budget,
        )
        if supervisor is not None and scaler_store is not None
        else None
    )
    manager = JobManager(
        api_store,
        state_dir,
        allow_dirs,
        leader_ttl=leader_ttl,
        budget=budget,
        allowed_conf=allowed_conf,
    )
    app = create_app(
        manager,
        supervisor,
        token,
        read_token,
        control_rate=control_rate,
        hosts=allowed_hosts(host, allow_hosts),
    )
    if supervisor is not None:
        supervisor.start()
    if scaler is not None:
        scaler.start()
    # proxy_headers off: uvicorn would take X-Forwarded-For from any client on loopback as the
    # client address, and the control audit records it (issue 22, item 8); no proxy is
    # configured to trust.
    # The head of a request (its line and headers) is bounded in the parser, before the app:
    # 431 past 64 KiB (server/headlimit.py; issue 39 item 9).
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        proxy_headers=False,
        http=BoundedHeadProtocol,
    )
    role = "API only, never leads" if supervisor is None else "leader candidate"

    class Server(uvicorn.Server):
        listening: str | None = None

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.should_exit or not self.servers:
                return  # could not bind: uvicorn has said why
            bound = self.servers[0].sockets[0].getsockname()  # the real port, also for 0
            self.listening = f"http://{_url_host(host)}:{bound[1]}"
            say(f"stoker server: listening on {self.listening} ({role}); store {redact_url(url)}")
            say(f"stoker server: API docs at {self.listening}/docs")

    server = Server(config)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        redact_logs(logging.getLogger(name).handlers)
    config.load()  # imports the event loop and HTTP parser before the heap is frozen
    # Everything loaded so far lives as long as the process: keep it out of the collector's
    # full passes, which otherwise scan it all and stall every request in flight (measured
    # 30-50 ms at 64 concurrent submissions; see docs/benchmarks.md).
    gc.collect()
    gc.freeze()
    # uvicorn stops gracefully on SIGINT/SIGTERM, then raises the signal again with the handler
    # it found: this one, so that the clean-up below runs (the default SIGTERM action would
    # kill the process before the supervisor resigns its lease).
    stopped_by: list[str] = []

    def _stop(signum: int, frame: Any) -> None:
        if not stopped_by:
            stopped_by.append(signal.Signals(signum).name)
        server.should_exit = True  # also when it comes before uvicorn listens for it

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stop)
    try:
        server.run()
    finally:
        if scaler is not None:
            scaler.stop()  # before the lease goes: no pass runs once another may lead
        if supervisor is not None:
            supervisor.stop(resign=True)
        manager.close()
        api_store.close()
        sup_store.close()
        if scaler_store is not None:
            scaler_store.close()
        if server.listening is not None:
            why = f" ({stopped_by[0]})" if stopped_by else ""
            say(
                f"stoker server: stopped{why}, no longer listening on {server.listening}; "
                "the drivers it started keep running"
            )


def say(line: str) -> None:
    """A line for the person who started the server (stdout, at once)."""
    print(line, flush=True)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host  # an IPv6 address in a URL
