"""The clusters stoker starts, as records: their names (a session cluster's, an application's
own), what a record keeps of the spec a cluster was started from, and how one is shown. Shared
by the session clusters, the applications' views, the supervisor and the scaler."""

from __future__ import annotations

import re
from typing import Any

from stoker.errors import InvalidInput
from stoker.manager import clusters
from stoker.store.fleet_records import ClusterRecord

# A session cluster's name (what a cluster spec takes as a bare name): it becomes a folder
# name and a URL path segment.
CLUSTER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$"
_CLUSTER_NAME = re.compile(CLUSTER_NAME_PATTERN)
# Any cluster's name in a URL: a session cluster's, or an application's own (``app-<id>``).
CLUSTER_PATH_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
# An application's own cluster is named after it; session clusters may not take such a name.
APP_CLUSTER_PREFIX = "app-"


def app_cluster_name(app: str) -> str:
    """The name of the cluster stoker starts for application ``app`` alone."""
    return f"{APP_CLUSTER_PREFIX}{app}"


def check_cluster_name(name: str, field_: str = "name") -> str:
    """A session cluster's name: plain (a folder and a URL segment), not a cluster spec
    keyword, and not ``app-...`` (the names of applications' own clusters)."""
    if not isinstance(name, str) or not _CLUSTER_NAME.fullmatch(name):
        raise InvalidInput(
            field_,
            f"{name!r} is not a valid cluster name: use 1-63 letters, digits, '_' or '-', "
            "starting with a letter or digit",
        )
    if name.startswith(APP_CLUSTER_PREFIX):
        raise InvalidInput(
            field_, f"{name!r}: names starting with {APP_CLUSTER_PREFIX!r} are applications' own"
        )
    try:
        kind = clusters.parse_cluster(name).kind
    except InvalidInput:
        kind = ""
    if kind != "session":
        raise InvalidInput(field_, f"{name!r} is a cluster spec keyword, not a name")
    return name


def cluster_spec_dict(spec: clusters.ClusterSpec) -> dict[str, Any]:
    """What a cluster record keeps of the spec it was started from."""
    return {
        "cluster": spec.text(),
        "workers": spec.workers,
        "cores": spec.cores,
        "memory": spec.memory,
    }


def cluster_view(rec: ClusterRecord) -> dict[str, Any]:
    """A cluster record as the API shows it."""
    return {
        "name": rec.name,
        "kind": rec.kind,
        "owner_app": rec.owner_app,
        "spec": dict(rec.spec),
        "state": str(rec.state),
        "master_url": rec.master_url,
        "web_url": rec.web_url,
        "workers": sum(1 for p in rec.processes if p.role == "worker"),
        "processes": [p.to_json() for p in rec.processes],
        "error": rec.error,
        "created_at": rec.created_at,
        "updated_at": rec.updated_at,
    }
