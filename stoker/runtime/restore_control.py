"""A job started from a savepoint takes the savepoint's control state over (config overrides,
rate limits, log levels, trigger; not a pause) as control events of its own, applied at its
first epoch (:mod:`stoker.runtime.restore` restores the rest).

Carried once. Every attempt of a restored job comes here (a crash may fall between the copy
and the events), and the request ids dedupe the events only while they are stored: retention
prunes ended control events, and the savepoint's old values sent again would undo whatever
the operator changed since. What retention never prunes is the job's latest epoch; the
events are stored before the job's first epoch is pinned (the sinks open, recovery runs and
the query starts after them), so a job with an epoch after the savepoint's got them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from stoker.control import events
from stoker.errors import ControlConflict, InvalidInput
from stoker.runtime.restore import Restored
from stoker.types import Epoch, JobId

if TYPE_CHECKING:
    from stoker.pipeline import Pipeline
    from stoker.store import Store

log = logging.getLogger("stoker.savepoint")


def carry_control(
    store: Store,
    jid: JobId,
    restored: Restored,
    pipeline: Pipeline,
    spec: Mapping[str, Any] | None = None,
) -> list[str]:
    """Give job ``jid`` the savepoint's control state: its config overrides, rate limits, log
    levels and trigger interval (a pause is not carried), as control events sent by
    ``savepoint`` that apply at the job's first epoch. Retry-safe (request ids); what the new
    pipeline no longer takes (a config key it does not declare, a rate limit no source obeys)
    is left out with a warning. ``spec``: the pipeline's, when the caller has it already.
    Returns the control ids; none once the job has an epoch after the savepoint's (carried
    by an earlier attempt, see the module's docstring)."""
    m = restored.plan.manifest
    if _ran_since(store, jid, restored.plan.epoch):
        log.info("job %s: the savepoint's control state was carried before its first epoch", jid)
        return []
    state = dict(m.get("state") or {})
    spec = dict(spec) if spec is not None else pipeline.spec()
    tag = str(m.get("control_id") or restored.plan.folder.name)
    wanted: list[tuple[str, dict[str, Any]]] = []
    overrides = {
        k: v
        for k, v in (state.get("overrides") or {}).items()
        if _takes(spec, {"kind": "config", "set": {k: v}}, f"config.{k}")
    }
    if overrides:
        wanted.append(("config", {"kind": "config", "set": overrides}))
    limits = {
        k: v
        for k, v in (state.get("rate_limit") or {}).items()
        if v is not None and _takes(spec, {"kind": "rate_limit", k: v}, k)
    }
    if limits:
        wanted.append(("rate_limit", {"kind": "rate_limit", **limits}))
    levels = state.get("log_level") or {}
    if levels.get("root"):
        wanted.append(("log_level", {"kind": "log_level", "level": levels["root"]}))
    for name, level in sorted((levels.get("loggers") or {}).items()):
        body = {"kind": "log_level", "level": level, "logger": name}
        wanted.append((f"log_level:{name}", body))
    if state.get("trigger_s") is not None:
        wanted.append(("trigger", {"kind": "trigger", "interval": float(state["trigger_s"])}))
    ids = []
    for what, body in wanted:
        kind, norm = events.validate(body, spec)
        try:
            ev, _new = store.add_control(
                jid,
                kind,
                norm,
                sender="savepoint",
                origin=str(restored.plan.folder),
                request_id=f"savepoint:{tag}:{what}",
            )
        except ControlConflict as e:  # an earlier run of this restore sent another body
            log.warning("job %s: savepoint control %s not carried again: %s", jid, what, e)
            continue
        ids.append(ev.control_id)
    return ids


def _ran_since(store: Store, jid: JobId, epoch: Epoch | None) -> bool:
    """Whether job ``jid`` has an epoch after ``epoch`` (the savepoint's) in the store."""
    newest = store.list_epochs(jid, limit=1)
    return bool(newest) and (epoch is None or newest[0].epoch > epoch)


def _takes(spec: dict[str, Any], body: dict[str, Any], what: str) -> bool:
    try:
        events.validate(body, spec)
    except InvalidInput as e:
        log.warning("savepoint's %s is not carried over: %s", what, e)
        return False
    return True
