"""What a submission is, how it is validated, and how two submissions of one id compare."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stoker.errors import InvalidInput
from stoker.manager.restart import parse_strategy
from stoker.paths import check_app_path
from stoker.settings import Settings


@dataclass(frozen=True)
class Submission:
    """A job to run: an application file under the manager's supervision."""

    entrypoint: Path
    args: list[str] = field(default_factory=list)
    conf: dict[str, str] = field(default_factory=dict)
    restart_strategy: dict[str, Any] | None = None
    config: dict[str, Any] = field(default_factory=dict)  # pipeline config, checked already

    def spec(self) -> dict[str, Any]:
        """The job's spec as stored; two submissions are the same job iff their specs match."""
        out: dict[str, Any] = {
            "kind": "app",
            "entrypoint": str(self.entrypoint),
            "args": list(self.args),
            "conf": dict(sorted(self.conf.items())),
            "restart_strategy": parse_strategy(self.restart_strategy).to_dict(),
        }
        if self.config:  # absent when none was given: specs stored before it stay equal
            out["config"] = dict(sorted(self.config.items()))
        return out


def validate_submission(
    entrypoint: str,
    args: list[str],
    conf: dict[str, str],
    restart_strategy: dict[str, Any] | None,
    allowed_dirs: list[Path],
) -> Submission:
    """Check every field; :class:`InvalidInput` names the first bad one. Nothing is written.

    ``allowed_dirs`` are resolved already (the caller does it once).
    """
    path = check_app_path(entrypoint, "entrypoint")
    if not any(path.is_relative_to(d) for d in allowed_dirs):
        raise InvalidInput(
            "entrypoint",
            f"{entrypoint!r} lies outside the allowed folders "
            f"({', '.join(str(d) for d in allowed_dirs)})",
        )
    for i, a in enumerate(args):
        if not isinstance(a, str) or "\x00" in a:
            raise InvalidInput(f"args[{i}]", "must be a string without NUL characters")
    for k, v in conf.items():
        if not isinstance(v, str):
            raise InvalidInput(f"conf.{k}", "values must be strings")
        if k in ("stoker.store", "stoker.state_dir"):
            raise InvalidInput(f"conf.{k}", "is set by the job manager, not by a submission")
    try:
        Settings().with_overrides(dict(conf))
    except InvalidInput as e:  # an unknown or malformed key, named as the request's field
        raise InvalidInput(f"conf.{e.field}", e.message) from e
    parse_strategy(restart_strategy)
    return Submission(path, list(args), dict(conf), restart_strategy)


# A spec key the job manager fills in when it creates the job, not the submitter.
ASSIGNED_STATE_DIR = "state_dir"


def spec_difference(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """A sentence naming the fields in which two specs differ, or None if they are the same.

    The job manager's own keys (the job's state folder) are no part of what was submitted.
    """
    keys = sorted((set(old) | set(new)) - {ASSIGNED_STATE_DIR})
    diff = [k for k in keys if old.get(k) != new.get(k)]
    if not diff:
        return None
    parts = [f"{k}: {old.get(k)!r} (live) vs {new.get(k)!r} (submitted)" for k in diff]
    return "; ".join(parts)
