"""The REST API of a job manager (FastAPI), composed: the token middleware, the error
handlers, one router per resource, the events feed, the web UI and the docs (``/docs``)."""

from __future__ import annotations

from fastapi import FastAPI

from stoker.errors import InvalidInput
from stoker.manager import ControlRateLimiter, JobManager, Supervisor
from stoker.manager.rescales import RescaleTally
from stoker.server.auth import OPEN_PATHS, TokenGuard
from stoker.server.deps import ServerState, install_state
from stoker.server.docs import OPENAPI_URL, install_docs, install_openapi
from stoker.server.errors import install_error_handlers
from stoker.server.events import EventFeed
from stoker.server.guard import RequestGuard
from stoker.server.limits import BodyLimit
from stoker.server.metrics import Histogram, registry_for
from stoker.server.routes import ROUTERS
from stoker.server.ui import mount as mount_ui


def create_app(
    manager: JobManager,
    supervisor: Supervisor | None = None,
    token: str | None = None,
    read_token: str | None = None,
    control_rate: float = 20.0,
    hosts: frozenset[str] | None = None,
) -> FastAPI:
    """The API over ``manager``.

    With ``token`` every call but ``/healthz`` needs a token: ``token`` for anything,
    ``read_token`` (optional) for reads only. Answers show secrets redacted
    (:mod:`stoker.redact`). ``control_rate``: control events per second per job (bursts of
    twice that); 0 turns the limit off. ``hosts``: the names the API answers to (the
    ``Host`` allow-list, :mod:`stoker.server.guard`; None: any, for an app made in a test);
    cross-origin writes and non-JSON bodies are refused either way.
    """
    if read_token is not None and token is None:
        raise InvalidInput("--read-token", "needs a token for mutating calls too (--token)")
    if token is not None and token == read_token:
        raise InvalidInput("--read-token", "must differ from --token")
    app = FastAPI(
        title="stoker job manager",
        version="1",
        docs_url=None,  # served by install_docs, from the package
        redoc_url=None,
        openapi_url=OPENAPI_URL,
    )
    install_docs(app)
    install_openapi(
        app,
        token=token is not None,
        read_token=read_token is not None,
        open_paths=OPEN_PATHS,
        host_check=hosts is not None,
    )
    submit_latency = Histogram()
    rescale_tally = RescaleTally()
    feed = EventFeed(manager)
    app.router.on_shutdown.append(feed.close)
    install_state(
        app,
        ServerState(
            manager=manager,
            supervisor=supervisor,
            token=token,
            read_token=read_token,
            limiter=ControlRateLimiter(control_rate),
            submit_latency=submit_latency,
            rescale_tally=rescale_tally,
            registry=registry_for(manager, supervisor, submit_latency, rescale_tally),
            feed=feed,
        ),
    )
    app.middleware("http")(TokenGuard(token, read_token))
    app.middleware("http")(RequestGuard(hosts))  # Host, Origin, Content-Type: before the token
    app.add_middleware(BodyLimit)  # outermost: before the token check reads anything
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    mount_ui(app, manager, supervisor, token, read_token)
    return app
