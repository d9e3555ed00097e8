"""The job manager's REST API (the process that serves it with the supervisor and the
scaler is composed in :mod:`stoker.service`)."""

from __future__ import annotations

from stoker.server.app import create_app

__all__ = ["create_app"]
