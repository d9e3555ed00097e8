"""What a submission is, how it is validated, and how two submissions of one id compare."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stoker import lineage
from stoker.errors import InvalidInput
from stoker.manager.confcheck import check_conf
from stoker.manager.state import max_parallelism_of
from stoker.paths import check_app_path
from stoker.restart import DEFAULT_STRATEGY, FORMER_DEFAULT, parse_strategy
from stoker.scalespec import ScalingSpec, parse_scaling
from stoker.settings import Settings
from stoker.store import Store
from stoker.types import JobId, SpecKind


@dataclass(frozen=True)
class Submission:
    """A job to run: an application file under the manager's supervision."""

    entrypoint: Path
    args: list[str] = field(default_factory=list)
    conf: dict[str, str] = field(default_factory=dict)
    restart_strategy: dict[str, Any] | None = None
    config: dict[str, Any] = field(default_factory=dict)  # pipeline config, checked already
    from_savepoint: str | None = None  # a savepoint folder the job starts from (checked)
    # Output the savepoint's job wrote after it is written again rather than refused.
    rewrite_output_after_savepoint: bool = False
    # A fork of the savepoint (a uid and outputs of its own), and a start that skips a store
    # the lineage check cannot open: kept in the spec, where every driver of the job reads them.
    fork: bool = False
    ignore_unreachable_stores: bool = False
    scaling: ScalingSpec | None = None  # checked; None: fixed (the default)
    standby: bool = False  # a warm standby driver kept beside the running one

    def check_rewrite(self) -> None:
        """``rewrite_output_after_savepoint`` and ``fork`` only go with ``from_savepoint``
        (``ignore_unreachable_stores`` also serves a restored job's later starts)."""
        for name in (REWRITE_KEY, FORK_KEY):
            if getattr(self, name) and not self.from_savepoint:
                raise InvalidInput(
                    name,
                    "is given without from_savepoint: it says how a job starts from a savepoint",
                )

    def spec(self) -> dict[str, Any]:
        """The job's spec as stored; two submissions are the same job iff their specs match."""
        out: dict[str, Any] = {
            "kind": SpecKind.MANAGED,
            "entrypoint": str(self.entrypoint),
            "args": list(self.args),
            "conf": dict(sorted(self.conf.items())),
            "restart_strategy": parse_strategy(self.restart_strategy).to_dict(),
        }
        if self.config:  # absent when none was given: specs stored before it stay equal
            out["config"] = dict(sorted(self.config.items()))
        if self.from_savepoint:
            out["from_savepoint"] = self.from_savepoint
        for name in (REWRITE_KEY, FORK_KEY, IGNORE_KEY):
            if getattr(self, name):  # absent when not given: older specs stay equal
                out[name] = True
        if self.standby:  # absent when not asked for: older specs stay equal
            out["standby"] = True
        scaling = scaling_spec_entry(self.scaling)
        if scaling is not None:
            out["scaling"] = scaling
        # The job's state partitions, fixed now that it is created (a bad -D: 422 on it).
        out[MAX_PARALLELISM] = max_parallelism_of(self.conf)
        return out


def check_scaling(value: Any) -> ScalingSpec | None:
    """A submission's ``scaling`` (text or object; :func:`stoker.scalespec.parse_scaling`):
    None when not given. :class:`InvalidInput` on ``scaling`` naming the key at fault."""
    return None if value is None else parse_scaling(value, "scaling")


def scaling_spec_entry(scaling: ScalingSpec | None) -> dict[str, Any] | None:
    """What a spec keeps of a submission's scaling: its ``to_dict()``, or nothing for the
    default (mode fixed), so that a submission without ``scaling`` and one with ``fixed``
    are the same job, and specs stored before scaling existed stay equal."""
    if scaling is None or scaling == ScalingSpec():
        return None
    return scaling.to_dict()


SAVEPOINT_MANIFEST = "_savepoint.json"  # stoker.runtime.savepoint.MANIFEST (no Spark here)
# A submission's options of a start from a savepoint, as its spec keeps them: the driver reads
# FORK_KEY and IGNORE_KEY there (stoker.runtime.launch), REWRITE_KEY from its environment.
REWRITE_KEY = "rewrite_output_after_savepoint"
FORK_KEY = lineage.FORK_FIELD
IGNORE_KEY = lineage.IGNORE_FIELD


def check_allowed(path: Path, given: str, allowed_dirs: Sequence[Path], field: str) -> None:
    """:class:`InvalidInput` on ``field`` unless the resolved ``path`` (the user's ``given``)
    lies under one of the manager's allowed folders (resolved already)."""
    if not any(path.is_relative_to(d) for d in allowed_dirs):
        raise InvalidInput(
            field,
            f"{given!r} lies outside the allowed folders "
            f"({', '.join(str(d) for d in allowed_dirs) or 'none'})",
        )


def check_savepoint_source(folder: str, allowed_dirs: list[Path]) -> str:
    """A savepoint folder given with a submission: absolute, under an allowed folder, and a
    savepoint (its manifest reads). The driver checks the pipeline's shape against it."""
    import json

    field_ = "from_savepoint"
    if not isinstance(folder, str) or not folder.strip() or "\x00" in folder:
        raise InvalidInput(field_, f"expects a folder path, got {folder!r}")
    path = Path(folder)
    if not path.is_absolute():
        raise InvalidInput(field_, f"{folder!r} must be an absolute path on the manager's host")
    path = path.resolve()
    check_allowed(path, folder, allowed_dirs, field_)
    try:
        manifest = json.loads((path / SAVEPOINT_MANIFEST).read_text())
    except FileNotFoundError:
        raise InvalidInput(
            field_, f"{folder!r} is not a savepoint (no {SAVEPOINT_MANIFEST})"
        ) from None
    except (OSError, ValueError) as e:
        raise InvalidInput(field_, f"{folder!r}: its manifest cannot be read: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != 1:
        raise InvalidInput(field_, f"{folder!r}: not a savepoint of a format this stoker reads")
    return str(path)


def check_savepoint_lineage(store: Store, spec: dict[str, Any], jid: JobId) -> None:
    """What the lineage refuses of a job about to be made from a savepoint, that needs no
    pipeline (:mod:`stoker.lineage`): a savepoint at its job's final epoch, one restored
    before under its uid (without ``fork``), a fork whose savepoint's earlier restores have
    not ended resolved, a store that cannot be opened: :class:`InvalidInput` (HTTP 422),
    nothing written. The driver checks the rest (the sinks, the savepoint's job) and records
    the restore."""
    import json

    folder = Path(str(spec["from_savepoint"]))
    try:
        manifest = json.loads((folder / SAVEPOINT_MANIFEST).read_text())
    except (OSError, ValueError):
        return  # checked when submitted; the driver reports it if it went since
    fork = bool(spec.get(FORK_KEY))
    start = lineage.Start(
        manifest,
        folder,
        jid,
        str(spec.get(ASSIGNED_STATE_DIR) or ""),
        store.url,
        "" if fork else str(manifest.get("uid")),
        fork=fork,
        ignore_unreachable=bool(spec.get(IGNORE_KEY)),
    )
    stores = lineage.Stores(store.url, start.ignore_unreachable, own=store)
    try:
        lineage.check(start, stores)
    finally:
        stores.close()


def savepoint_uid(spec: dict[str, Any]) -> str | None:
    """The uid of the job whose savepoint ``spec`` starts from (None: not a restore, or a
    manifest without one). A restored job goes on with that job's outputs, which its sinks know
    by its uid: created under it, a second restore from the same savepoint finds the first
    one's epochs in the sinks and is refused (the runtime's restore checks)."""
    import json

    folder = spec.get("from_savepoint")
    if not folder or spec.get(FORK_KEY):
        return None  # a fork: a uid of its own
    try:
        manifest = json.loads((Path(folder) / SAVEPOINT_MANIFEST).read_text())
    except (OSError, ValueError):
        return None  # checked when submitted; the driver reports it if it went since
    uid = manifest.get("uid") if isinstance(manifest, dict) else None
    return uid if isinstance(uid, str) and uid else None


def validate_submission(
    entrypoint: str,
    args: list[str],
    conf: dict[str, str],
    restart_strategy: dict[str, Any] | None,
    allowed_dirs: list[Path],
    scaling: Any = None,
    allowed_conf: Sequence[str] = (),
) -> Submission:
    """Check every field; :class:`InvalidInput` names the first bad one. Nothing is written.

    ``allowed_dirs`` are resolved already (the caller does it once). ``allowed_conf``: the
    operator's ``--allow-conf`` entries, beyond the allow-list of
    :func:`stoker.manager.confcheck.check_conf`.
    """
    # Where it points is checked before whether it exists: a caller learns nothing of the
    # host's files outside the allowed folders.
    if not isinstance(entrypoint, str) or not entrypoint or "\x00" in entrypoint:
        raise InvalidInput("entrypoint", f"expects a file path, got {entrypoint!r}")
    try:
        where = Path(entrypoint).resolve()
    except (OSError, RuntimeError) as e:
        raise InvalidInput("entrypoint", f"{entrypoint[:200]!r} cannot be used: {e}") from None
    check_allowed(where, entrypoint, allowed_dirs, "entrypoint")
    path = check_app_path(entrypoint, "entrypoint")
    check_allowed(path, entrypoint, allowed_dirs, "entrypoint")
    for i, a in enumerate(args):
        if not isinstance(a, str) or "\x00" in a:
            raise InvalidInput(f"args[{i}]", "must be a string without NUL characters")
    for k, v in conf.items():
        if not isinstance(v, str):
            raise InvalidInput(f"conf.{k}", "values must be strings")
        if k in ("stoker.store", "stoker.state_dir"):
            raise InvalidInput(f"conf.{k}", "is set by the job manager, not by a submission")
    check_conf(conf, allowed_conf)
    try:
        Settings().with_overrides(dict(conf))
    except InvalidInput as e:  # an unknown or malformed key, named as the request's field
        raise InvalidInput(f"conf.{e.field}", e.message) from e
    parse_strategy(restart_strategy)
    return Submission(
        path, list(args), dict(conf), restart_strategy, scaling=check_scaling(scaling)
    )


# A spec key the job manager fills in when it creates the job, not the submitter.
ASSIGNED_STATE_DIR = "state_dir"


def job_folder(job: Any, state_dir: Path) -> Path:
    """The folder a job submitted alone runs in (its checkpoint, its repartition lock): the
    one it was assigned when it was created, else ``<state dir>/jobs/<id>`` (jobs stored
    without one). ``job``: its record (a :class:`~stoker.store.JobRecord`)."""
    return Path(job.spec.get(ASSIGNED_STATE_DIR) or state_dir / "jobs" / job.job_id)


# Fixed when the job is created and changed only by `stoker state repartition`: a later
# submission of the same job (whatever its -D) keeps the job's own.
MAX_PARALLELISM = "max_parallelism"
# Recorded by the job's driver (the trigger it runs with), never by a submission.
DRIVER_TRIGGER = "trigger_s"


def spec_difference(old: dict[str, Any], new: dict[str, Any], was: str = "live") -> str | None:
    """A sentence naming the fields in which two specs differ, or None if they are the same
    (``was`` says what ``old`` is: the live job's, or an ended one's).

    The job manager's own keys (the job's state folder) are no part of what was submitted,
    nor is the maximum parallelism, which the job keeps from its creation, nor the trigger its
    driver records.
    """
    keys = sorted((set(old) | set(new)) - {ASSIGNED_STATE_DIR, MAX_PARALLELISM, DRIVER_TRIGGER})
    diff = [k for k in keys if old.get(k) != new.get(k) and not _both_defaults(k, old, new)]
    if not diff:
        return None
    parts = [f"{k}: {_shown(old.get(k))} ({was}) vs {_shown(new.get(k))} (submitted)" for k in diff]
    return "; ".join(parts)


def _both_defaults(key: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
    """A job stored before the default restart strategy changed holds the former default
    (specs store the strategy resolved): a submission that gives none asks for the default as
    well, so a client retrying its submission after an upgrade of stoker gets the job, not a
    conflict. The job keeps the strategy it was created with."""
    return (
        key == "restart_strategy"
        and old.get(key) == FORMER_DEFAULT.to_dict()
        and new.get(key) == DEFAULT_STRATEGY.to_dict()
    )


def _shown(value: Any) -> str:
    """A spec value as a person reads it (``None`` and dict reprs were shown):
    absent is "not set", a mapping ``k=v`` pairs as ``-D``/``--config`` take them."""
    if value is None:
        return "not set"
    if isinstance(value, dict):
        if not value:
            return "none"
        return " ".join(f"{k}={_pair_value(v)}" for k, v in sorted(value.items()))
    return repr(value)


def _pair_value(v: Any) -> str:
    import json

    return v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)
