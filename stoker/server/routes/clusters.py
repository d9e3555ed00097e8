"""``/v1/clusters``: session clusters (Spark standalone on this host) and their workers."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from stoker.manager.cluster_records import CLUSTER_NAME_PATTERN, CLUSTER_PATH_PATTERN
from stoker.redact import redact_answer
from stoker.server.deps import Manager
from stoker.server.docs import MEMORY_PATTERN, errors
from stoker.server.routes._common import GUARDED, READS, WRITES
from stoker.server.routes.operations import ACCEPTED, accepted, idempotency_key

router = APIRouter()


class ClusterBody(BaseModel):
    """``POST /v1/clusters``: a session cluster (Spark standalone) that outlives applications."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(
        None,
        pattern=CLUSTER_NAME_PATTERN,
        description="Default: cluster-<6 hex>. Applications run on it with cluster=<name>.",
    )
    workers: int = Field(2, ge=1, le=64)
    cores: int = Field(1, ge=1, le=1024, description="Cores of each worker.")
    memory: str = Field("1g", pattern=MEMORY_PATTERN, description="Memory of each worker.")


class WorkerBody(BaseModel):
    """``POST /v1/clusters/{name}/workers``: one more worker (default: the cluster's sizes)."""

    model_config = ConfigDict(extra="forbid")

    cores: int | None = Field(None, ge=1, le=1024)
    memory: str | None = Field(None, pattern=MEMORY_PATTERN)


cluster_path: Any = Path(
    ...,
    pattern=CLUSTER_PATH_PATTERN,
    description="A cluster's name (app-<id>: an application's own).",
)
CLUSTER_WRITES = errors(*WRITES, 404, 409, 422, 500, 503)
CLUSTER_OPERATIONS = errors(*WRITES, 404, 409, 422, 429, 503)


@router.post(
    "/v1/clusters",
    status_code=202,
    responses={**ACCEPTED, **errors(*WRITES, 409, 422, 429, 503)},
)
def start_cluster(
    manager: Manager, body: ClusterBody | None = None, key: str | None = idempotency_key()
) -> JSONResponse:
    """Start a session cluster (a Spark standalone master and its workers on this host), as
    an operation: 202 once it is recorded STARTING, the JVMs start in the background (tens of
    seconds); poll the operation, whose ``result`` is the RUNNING cluster. 409: the name is
    in use, or the host's budget has no room; 429: too many operations run; the operation
    FAILED with status 500: it could not start (what was started is stopped again)."""
    b = body or ClusterBody.model_validate({})
    return accepted(
        manager.start_cluster_operation(b.name, b.workers, b.cores, b.memory, idem_key=key)
    )


@router.get("/v1/clusters", responses=errors(*GUARDED, 422, 503))
def list_clusters(
    manager: Manager,
    include_stopped: bool = Query(False, description="Also the STOPPED ones."),
) -> list[dict[str, Any]]:
    """Every cluster stoker started: session clusters and applications' own."""
    return [redact_answer(c) for c in manager.clusters(include_stopped)]


@router.get("/v1/clusters/{name}", responses=READS)
def get_cluster(manager: Manager, name: str = cluster_path) -> dict[str, Any]:
    """One cluster: its record, what its master says now (``status``) and the live
    applications on it (``used_by``)."""
    return dict(redact_answer(manager.cluster(name)))


@router.post(
    "/v1/clusters/{name}/workers",
    status_code=202,
    responses={**ACCEPTED, **CLUSTER_OPERATIONS},
)
def add_worker(
    manager: Manager,
    name: str = cluster_path,
    body: WorkerBody | None = None,
    key: str | None = idempotency_key(),
) -> JSONResponse:
    """Start one more worker (default: the cluster's cores and memory per worker), as an
    operation: 202 at once (409: the cluster is not RUNNING, or the host's budget has no
    room);
    its ``result`` is ``{"worker", "cluster"}`` once the master lists it ALIVE."""
    b = body or WorkerBody.model_validate({})
    return accepted(manager.add_worker_operation(name, b.cores, b.memory, idem_key=key))


@router.delete(
    "/v1/clusters/{name}/workers/{worker}",
    status_code=202,
    responses={**ACCEPTED, **CLUSTER_OPERATIONS},
)
def remove_worker(
    manager: Manager,
    name: str = cluster_path,
    worker: str = Path(
        ..., pattern=r"^[A-Za-z0-9._:-]{1,128}$", description="A worker's id or address."
    ),
    graceful: bool = Query(
        False, description="Decommission it first: running work moves, no task fails."
    ),
    key: str | None = idempotency_key(),
) -> JSONResponse:
    """Stop one worker of a RUNNING cluster, as an operation (a graceful removal waits up to
    two minutes for its executors to move): 202 at once (409: the cluster is not RUNNING;
    422: no such worker); its ``result`` is the cluster without it."""
    return accepted(manager.remove_worker_operation(name, worker, graceful, idem_key=key))


@router.post("/v1/clusters/{name}/stop", responses=CLUSTER_WRITES)
def stop_cluster(
    manager: Manager,
    name: str = cluster_path,
    force: bool = Query(
        False, description="Stop it even though live applications use it (they lose executors)."
    ),
) -> dict[str, Any]:
    """Stop a session cluster and every process of it. One that live applications use: 409
    naming them, unless ``force`` (then they are named in ``used_by``, not stopped). An
    application's own cluster: 409 (it goes when the application ends)."""
    return dict(redact_answer(manager.stop_cluster(name, force)))
