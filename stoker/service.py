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
from dataclasses import dataclass
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
from stoker.store import RetentionPolicy, Store, open_store


@dataclass(frozen=True, kw_only=True)
class ServerOptions:
    """What ``stoker server`` runs with (its options, parsed). Drivers started under it keep
    running after the manager stops.

    ``token`` guards every call but ``/healthz``; ``read_token`` (optional) allows reads only.
    No ``token``: the one in ``<state_dir>/token`` (made on the first start, 0600), unless
    ``insecure_no_token``. ``allow_hosts``: names the API answers to besides loopback names
    and ``host`` (:mod:`stoker.server.guard`). ``supervise`` False: API only, never leads.
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

    store: str | None
    host: str
    port: int
    state_dir: Path
    token: str | None
    read_token: str | None = None
    insecure_no_token: bool = False
    allow_hosts: tuple[str, ...] = ()
    allow_dirs: list[Path]
    leader_ttl: float = 3.0
    lease_ttl: float = 10.0
    startup_ttl: float = 120.0
    max_starting: int = 4
    cancel_timeout: float = 60.0
    supervise: bool = True
    retention: RetentionPolicy | None = None
    retention_jobs: float | None = None
    control_rate: float = 20.0
    scaler_tick: float = 1.0
    scaler_window: float = 60.0
    log_format: str | None = None
    budget: HostBudget | None = None
    allowed_conf: tuple[str, ...] = ()


@dataclass
class _Parts:
    """The manager process's pieces, each with the store connection it alone uses: a slow
    HTTP request never delays a lease renewal, nor a worker start the scaler waits for."""

    url: str
    api_store: Store
    sup_store: Store
    scaler_store: Store | None
    supervisor: Supervisor | None
    scaler: Scaler | None
    manager: JobManager

    def close(self) -> None:
        if self.scaler is not None:
            self.scaler.stop()  # before the lease goes: no pass runs once another may lead
        if self.supervisor is not None:
            self.supervisor.stop(resign=True)
        self.manager.close()
        self.api_store.close()
        self.sup_store.close()
        if self.scaler_store is not None:
            self.scaler_store.close()


def serve(opts: ServerOptions) -> None:
    """Serve until SIGINT/SIGTERM: the state folder made private and the token settled, the
    pieces composed over the store, then the HTTP API until a signal stops it."""
    logformat.configure(opts.log_format)
    redact_logs()  # a store URL's password or a secret conf value never reaches the log
    state_dir, token = _prepare(opts)
    parts = _compose(opts, state_dir)
    _run_http(opts, parts, token)


def _prepare(opts: ServerOptions) -> tuple[Path, str | None]:
    """The state folder, private, and the token every call but ``/healthz`` needs; the
    operator is told where it is, and warned of what is not secure."""
    # What the manager and the drivers it starts (they inherit it) write is theirs alone: the
    # store (secret conf in it), the driver logs, the checkpoints.
    os.umask(0o077)
    state_dir = opts.state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    for line in tokens.private_state_dir(state_dir):  # an older install's modes
        say(f"stoker server: {line}")
    token = opts.token
    if token is None and not opts.insecure_no_token:
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
    if not is_loopback(opts.host):
        say(
            f"stoker server: WARNING: listening on {opts.host} in plain HTTP: tokens and "
            "answers cross the network unencrypted; keep --host 127.0.0.1 behind a TLS proxy "
            "(and --allow-host its name)"
        )
    return state_dir, token


def _compose(opts: ServerOptions, state_dir: Path) -> _Parts:
    """The supervisor (unless API only), the scaler acting while it leads, and the
    :class:`JobManager` the API serves, each on a store connection of its own."""
    url = opts.store or f"sqlite:///{state_dir / 'store.db'}"
    api_store = open_store(url)
    sup_store = open_store(url)
    cfg = SupervisorConfig(
        state_dir=state_dir,
        store_url=url,
        address=f"http://{opts.host}:{opts.port}",
        leader_ttl=opts.leader_ttl,
        lease_ttl=opts.lease_ttl,
        startup_ttl=opts.startup_ttl,
        max_starting=opts.max_starting,
        cancel_timeout=opts.cancel_timeout,
        retention=opts.retention or RetentionPolicy(),
        retention_jobs=opts.retention_jobs,
        budget=opts.budget or HostBudget(),
    )
    supervisor = Supervisor(sup_store, cfg) if opts.supervise else None
    scaler_store = scaler = None
    if supervisor is not None:
        scaler_store = open_store(url)
        scaler = Scaler(
            scaler_store,
            state_dir,
            DefaultPolicy(window_s=opts.scaler_window),
            tick_s=opts.scaler_tick,
            is_leader=lambda: supervisor.is_leader,
            background=True,
            budget=cfg.budget,
        )
    manager = JobManager(
        api_store,
        state_dir,
        opts.allow_dirs,
        leader_ttl=opts.leader_ttl,
        budget=opts.budget,
        allowed_conf=opts.allowed_conf,
    )
    return _Parts(url, api_store, sup_store, scaler_store, supervisor, scaler, manager)


def _run_http(opts: ServerOptions, parts: _Parts, token: str | None) -> None:
    """The HTTP API over ``parts`` until SIGINT/SIGTERM, then everything closed in order."""
    import uvicorn

    from stoker.server.headlimit import BoundedHeadProtocol

    app = create_app(
        parts.manager,
        parts.supervisor,
        token,
        opts.read_token,
        control_rate=opts.control_rate,
        hosts=allowed_hosts(opts.host, opts.allow_hosts),
    )
    if parts.supervisor is not None:
        parts.supervisor.start()
    if parts.scaler is not None:
        parts.scaler.start()
    # proxy_headers off: uvicorn would take X-Forwarded-For from any client on loopback as the
    # client address, and the control audit records it; no proxy is configured to trust.
    # The head of a request (its line and headers) is bounded in the parser, before the app:
    # 431 past 64 KiB (server/headlimit.py).
    config = uvicorn.Config(
        app,
        host=opts.host,
        port=opts.port,
        log_level="warning",
        access_log=False,
        proxy_headers=False,
        http=BoundedHeadProtocol,
    )
    role = "API only, never leads" if parts.supervisor is None else "leader candidate"

    class Server(uvicorn.Server):
        listening: str | None = None

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.should_exit or not self.servers:
                return  # could not bind: uvicorn has said why
            bound = self.servers[0].sockets[0].getsockname()  # the real port, also for 0
            self.listening = f"http://{_url_host(opts.host)}:{bound[1]}"
            store = redact_url(parts.url)
            say(f"stoker server: listening on {self.listening} ({role}); store {store}")
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
        parts.close()
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
