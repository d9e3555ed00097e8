"""The job manager's web UI: server-rendered pages (Jinja2), live through htmx, charts by uPlot.

Auth is the API's: a page at ``/ui/...`` is a shell that carries no data, so it and the
vendored assets are open (a browser cannot send a bearer token with the page it opens). Every
piece of data comes in a fragment (``/ui/f/...``) that htmx fetches with ``Authorization:
Bearer <token>`` (typed once, kept in the tab's ``sessionStorage``), and every action is a
``fetch`` of the same REST call the CLI makes. The fragments know which token came (full or
read-only) and leave the action forms out for a read-only one.

The UI reads through :class:`~stoker.manager.JobManager` as the REST routes do; it imports
no Spark and never opens the store itself.
"""

from __future__ import annotations

from stoker.server.ui.routes import OPEN_PAGES, OPEN_PATHS, OPEN_PREFIXES, STATIC_PREFIX, mount

__all__ = ["OPEN_PAGES", "OPEN_PATHS", "OPEN_PREFIXES", "STATIC_PREFIX", "mount"]
