"""``stoker server``: the job manager's REST API and its supervisor."""

from __future__ import annotations

from stoker.server.app import create_app

__all__ = ["create_app"]
