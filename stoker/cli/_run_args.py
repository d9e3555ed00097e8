"""``stoker run``'s options as one object, and the ``--config`` pairs' parser it shares with
``stoker upgrade``."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from stoker.errors import InvalidInput
from stoker.settings import parse_pairs


@dataclass(frozen=True)
class RunArgs:
    """``stoker run``'s options, as click parsed them (one field per option)."""

    app: str
    positional_args: tuple[str, ...]
    driver: bool
    app_id: str | None
    cluster: str | None
    scaling: str | None
    driver_memory: str | None
    driver_cores: int | None
    restart_strategy: str | None
    job_id: str | None
    restart: bool
    reset_checkpoint: bool
    from_savepoint: str | None
    rewrite_output: bool
    fork: bool
    ignore_unreachable_stores: bool
    defines: tuple[str, ...]
    config_pairs: tuple[str, ...]
    pipeline_name: str | None
    standby: bool
    quiet: bool
    log_format: str | None
    as_json: bool
    detached: bool
    app_args: tuple[str, ...]
    server: str | None
    token: str | None

    @property
    def args(self) -> list[str]:
        """The program's arguments: ``--arg`` ones, then those after APP."""
        return [*self.app_args, *self.positional_args]

    @functools.cached_property
    def overrides(self) -> dict[str, str]:
        return parse_pairs(list(self.defines))

    @functools.cached_property
    def config(self) -> dict[str, Any]:
        return parse_config_pairs(list(self.config_pairs))

    def flags_given(self, strategy: dict[str, Any] | None) -> dict[str, bool]:
        """Which of the options that only some modes take were given (see check_mode)."""
        return {
            "--app-id": self.app_id is not None,
            "--cluster": self.cluster is not None,
            "--driver-memory": self.driver_memory is not None,
            "--driver-cores": self.driver_cores is not None,
            "--job-id": self.job_id is not None,
            "--pipeline": self.pipeline_name is not None,
            "--config": bool(self.config),
            "--from-savepoint": self.from_savepoint is not None,
            "--rewrite-output-after-savepoint": self.rewrite_output,
            "--fork": self.fork,
            "--ignore-unreachable-stores": self.ignore_unreachable_stores,
            "--reset-checkpoint": self.reset_checkpoint,
            "--restart-strategy": strategy is not None,
            "--scaling": self.scaling is not None,
            "--standby": self.standby,
        }


def parse_config_pairs(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` pairs (``--config``): a value is JSON when it parses as JSON, else a string."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidInput("config", f"expected key=value, got {pair!r}")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        out[key.strip()] = value
    return out
