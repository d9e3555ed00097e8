"""The UI's routes: open shell pages, guarded fragments, vendored assets."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
from collections.abc import Callable
from pathlib import Path as FsPath
from typing import Any

import jinja2
from fastapi import FastAPI, Path, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from stoker.errors import StokerError
from stoker.manager import JobManager, Supervisor
from stoker.redact import redact_answer
from stoker.server.errors import status_of  # the one map of errors to statuses
from stoker.server.ui import dashboard, views
from stoker.types import JobState

_HERE = FsPath(__file__).resolve().parent
STATIC_PREFIX = "/ui/static"
# The shell pages and the assets: open (no data in them). Fragments, /ui/f/..., are not.
OPEN_PATHS = frozenset({"/", "/ui", "/ui/jobs", "/ui/applications", "/ui/clusters", "/ui/manager"})
OPEN_PREFIXES = (STATIC_PREFIX + "/",)
_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"  # as loose as any id the API takes; checked there
# A job's or an application's page (one path segment after the kind), open like the lists: a
# route added later under /ui/jobs/<id>/... is guarded, not open by prefix.
OPEN_PAGES = re.compile(r"/ui/(?:jobs|applications)/[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_CLUSTER = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
# Every page: scripts from this server only (no inline script, no eval), nothing framed.
# uPlot and htmx set style attributes from script, hence 'unsafe-inline' for styles only.
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
# htmx swaps these too (its default drops every 4xx): a job that is gone says so in place.
_SHOWN_ERRORS = (404, 409, 422)
# A live fragment the page already shows comes back as 204 with no body: the page sends the
# digest of what its target holds (ui.js), and the browser neither downloads nor swaps it.
SEEN_HEADER = "X-Stoker-Seen"
DIGEST_HEADER = "X-Stoker-Digest"
_DASH = "\u2013"  # an en dash: "no value" in a cell
_STATES = ["PAUSED", *(str(s) for s in JobState)]


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_HERE / "templates")),
        autoescape=True,  # every template, whatever its name: all data is escaped
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = _num
    env.filters["when"] = _when
    env.filters["bytes"] = _bytes
    return env


def _num(value: Any, digits: int = 1) -> str:
    """A number for a table cell; a dash for none."""
    if value is None:
        return _DASH
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _bytes(value: Any) -> str:
    """A size in bytes as B, KiB, MiB or GiB; a dash for none."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return _DASH
    size = float(value)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} GiB"


def _when(ts: Any) -> str:
    """A time as UTC ``HH:MM:SS`` with the date (the title attribute holds the full value)."""
    if not isinstance(ts, int | float):
        return _DASH
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def mount(
    app: FastAPI,
    manager: JobManager,
    supervisor: Supervisor | None,
    token: str | None,
    read_token: str | None,
) -> None:
    """Serve the UI on ``app``: ``/`` and ``/ui/...`` (see the module's docstring)."""
    env = _environment()
    jobs_table = views.Recent(ttl=1.0)
    # The same for the clusters: each page's poll would otherwise ask every master again.
    clusters_view = views.Recent(ttl=1.0)
    app.mount(STATIC_PREFIX, StaticFiles(directory=str(_HERE / "static")), name="ui-static")

    def can_act(request: Request) -> bool:
        """Whether the request came with the full token (or none is needed): the middleware
        has refused any other token already, so a guarded request without it is read-only."""
        if token is None:
            return True
        auth = request.headers.get("authorization", "")
        given = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        given = given or request.headers.get("x-stoker-token", "")
        return hmac.compare_digest(given.encode(), token.encode())

    def page(name: str, title: str, **ctx: Any) -> HTMLResponse:
        html = env.get_template(name).render(
            title=title, auth=token is not None, static=STATIC_PREFIX, **ctx
        )
        return HTMLResponse(html, headers=_HEADERS)

    def fragment(name: str, request: Request, code: int = 200, **ctx: Any) -> Response:
        html = env.get_template(name).render(can_act=can_act(request), **ctx)
        digest = hashlib.blake2b(html.encode(), digest_size=12).hexdigest()
        headers = {**_HEADERS, DIGEST_HEADER: digest}
        if code == 200 and request.headers.get(SEEN_HEADER) == digest:
            return Response(status_code=204, headers=headers)  # nothing new to show
        return HTMLResponse(html, status_code=code, headers=headers)

    def failed(request: Request, err: StokerError) -> Response:
        status = status_of(err)
        shown = status if status in _SHOWN_ERRORS else 200
        return fragment("f_error.html", request, shown, error=str(err), status=status)

    job_id = Path(..., pattern=_ID)

    # shell pages: open, no data -------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui/jobs", status_code=303)

    @app.get("/ui", include_in_schema=False)
    def ui_root() -> RedirectResponse:
        return RedirectResponse("/ui/jobs", status_code=303)

    @app.get("/ui/jobs", include_in_schema=False)
    def jobs_page() -> HTMLResponse:
        return page("jobs.html", "Jobs", states=_STATES, nav="jobs")

    @app.get("/ui/jobs/{job_id}", include_in_schema=False)
    def job_page(job_id: str = job_id) -> HTMLResponse:
        return page("job.html", f"Job {job_id}", job_id=job_id, nav="jobs")

    @app.get("/ui/applications", include_in_schema=False)
    def apps_page() -> HTMLResponse:
        return page("applications.html", "Applications", nav="applications")

    @app.get("/ui/applications/{app_id}", include_in_schema=False)
    def app_page(app_id: str = Path(..., pattern=_ID)) -> HTMLResponse:
        return page("application.html", f"Application {app_id}", app_id=app_id, nav="applications")

    @app.get("/ui/clusters", include_in_schema=False)
    def clusters_page() -> HTMLResponse:
        return page("clusters.html", "Clusters", nav="clusters")

    @app.get("/ui/manager", include_in_schema=False)
    def manager_page() -> HTMLResponse:
        return page("manager.html", "Job manager", nav="manager")

    # fragments: guarded by the API's middleware ---------------------------------------------
    @app.get("/ui/f/jobs", include_in_schema=False)
    def f_jobs(request: Request, state: str | None = Query(None)) -> Response:
        if state == "":
            state = None
        if state is not None and state not in _STATES:
            return fragment(
                "f_error.html",
                request,
                422,
                error=f"state: one of {', '.join(_STATES)}, got {state!r}",
                status=422,
            )
        rows = jobs_table.get(state, lambda: views.job_rows(manager, state))
        return fragment("f_jobs.html", request, rows=rows, state=state)

    # The job page's sections: one fragment each, from one view function each.
    def job_section(
        section: str, view: Callable[[Any, str], dict[str, Any]]
    ) -> Callable[..., Response]:
        def render(request: Request, job_id: str = job_id) -> Response:
            try:
                data = view(manager, job_id)
            except StokerError as e:
                return failed(request, e)
            return fragment(f"f_{section}.html", request, **{**data, "job_id": job_id})

        render.__name__ = f"f_{section}"
        return render

    for section, view in (
        ("summary", views.job_summary),
        ("epochs", views.job_epochs),
        ("timeline", views.job_timeline),
        ("controls", views.job_controls),
        ("rescales", views.job_rescales),
        ("operators", dashboard.job_operators),
        ("exceptions", dashboard.job_exceptions),
    ):
        app.get(f"/ui/f/jobs/{{job_id}}/{section}", include_in_schema=False)(
            job_section(section, view)
        )

    @app.get("/ui/f/jobs/{job_id}/attempts/{attempt}/log", include_in_schema=False)
    def f_log(
        request: Request, job_id: str = job_id, attempt: int = Path(..., ge=1, le=2**63 - 1)
    ) -> Any:
        try:
            text = views.attempt_log(manager, job_id, attempt)
        except StokerError as e:
            return failed(request, e)
        return PlainTextResponse(text, headers=_HEADERS)

    @app.get("/ui/f/applications", include_in_schema=False)
    def f_apps(request: Request) -> Response:
        apps = [redact_answer(a) for a in manager.applications()]
        return fragment("f_applications.html", request, apps=apps)

    @app.get("/ui/f/applications/{app_id}", include_in_schema=False)
    def f_app(request: Request, app_id: str = Path(..., pattern=_ID)) -> Response:
        try:
            data = redact_answer(manager.application(app_id))
        except StokerError as e:
            return failed(request, e)
        return fragment("f_application.html", request, app=data)

    @app.get("/ui/f/clusters", include_in_schema=False)
    def f_clusters(request: Request) -> Response:
        data = clusters_view.get(None, lambda: views.clusters(manager))
        return fragment("f_clusters.html", request, clusters=data)

    @app.get("/ui/f/manager", include_in_schema=False)
    def f_manager(request: Request) -> Response:
        return fragment("f_manager.html", request, m=views.manager_panel(manager, supervisor))
