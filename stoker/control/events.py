"""Control events as data: what each kind accepts, and how it changes a job's control state.

Pure functions, no Spark and no store: the job manager and the CLI validate with them before
anything is stored, and the store applies them inside the transaction that makes the new
control version (so two events racing each other see each other's result).

A job's control state at version v is two JSON values kept in ``control_versions``:

- ``config``: the user config the transform sees (``ctx.config``);
- ``state``: everything else control changes (a dict, every key optional):

  ``base``        the config the pipeline declared (defaults with the submitted values on top)
  ``overrides``   config keys set by control, kept on top of ``base`` when a new attempt
                  declares its defaults again (a REST change survives a restart)
  ``rate_limit``  ``{"rows_per_second": x, "max_rows_per_epoch": n, "max_files_per_epoch": n}``
                  a key present overrides the source's own setting; an event's ``null``
                  removes control's limit, so the source's own setting (or none) applies
  ``log_level``   ``{"root": "DEBUG", "loggers": {"name": "WARN"}}``
  ``trigger_s``   the trigger interval in seconds (absent: the job's own setting)
  ``paused``      True while paused
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stoker import durations
from stoker.errors import ALREADY_PAUSED, NOT_PAUSED, ControlConflict, InvalidInput
from stoker.scalespec import parse_scaling
from stoker.types import ControlKind

RATE_KEYS = ("rows_per_second", "max_rows_per_epoch", "max_files_per_epoch")
# The levels Spark's setLogLevel takes; WARNING and CRITICAL are accepted as Python spellings.
LOG_LEVELS = ("ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")
_LEVEL_ALIASES = {"WARNING": "WARN", "CRITICAL": "FATAL"}
PYTHON_LEVELS = {
    "ALL": 1,
    "TRACE": 5,
    "DEBUG": 10,
    "INFO": 20,
    "WARN": 30,
    "ERROR": 40,
    "FATAL": 50,
    "OFF": 60,
}
_LOGGER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.$-]{0,199}$")
_EVENT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,99}$")
MAX_PAYLOAD_BYTES = 64 * 1024
MAX_TRIGGER_S = 86_400.0

# Fields each kind takes besides "kind" (and "request_id", which is the caller's, not the event's).
FIELDS: dict[ControlKind, frozenset[str]] = {
    ControlKind.CONFIG: frozenset({"set", "unset"}),
    ControlKind.RATE_LIMIT: frozenset(RATE_KEYS),
    ControlKind.LOG_LEVEL: frozenset({"level", "logger"}),
    ControlKind.TRIGGER: frozenset({"interval"}),
    ControlKind.PAUSE: frozenset(),
    ControlKind.RESUME: frozenset(),
    ControlKind.CHECKPOINT: frozenset(),
    ControlKind.EVENT: frozenset({"name", "payload"}),
    ControlKind.SAVEPOINT: frozenset({"stop", "dir"}),
    ControlKind.SCALING: frozenset({"scaling"}),
}


def parse_duration(value: Any, field: str = "interval") -> float:
    """A trigger interval: a duration (stoker.durations) of 0 up to 1 day."""
    return durations.parse_duration(value, field, max_s=MAX_TRIGGER_S)


def normalize_level(value: Any, field: str = "level") -> str:
    if not isinstance(value, str):
        raise InvalidInput(field, f"expects one of {', '.join(LOG_LEVELS)}, got {value!r}")
    level = _LEVEL_ALIASES.get(value.strip().upper(), value.strip().upper())
    if level not in LOG_LEVELS:
        raise InvalidInput(field, f"expects one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return level


def source_kinds(spec: Mapping[str, Any]) -> set[str]:
    """The kinds of a job's sources as its spec describes them: generator, files, kafka,
    socket, spark."""
    out = set()
    for text in spec.get("sources") or []:
        out.add(str(text).split("(", 1)[0].strip())
    return out


def supported_rate_keys(spec: Mapping[str, Any]) -> set[str]:
    """Which rate limits the job's sources obey (stoker's own sources only)."""
    kinds = source_kinds(spec)
    keys: set[str] = set()
    if "generator" in kinds:
        keys |= {"rows_per_second", "max_rows_per_epoch"}
    if "files" in kinds:
        keys |= {"max_files_per_epoch"}
    if "kafka" in kinds:
        keys |= {"rows_per_second", "max_rows_per_epoch"}
    if "socket" in kinds:  # its lines: what the server sent cannot be paced, only capped
        keys |= {"max_rows_per_epoch"}
    return keys


def validate(
    body: Mapping[str, Any],
    spec: Mapping[str, Any],
    check_config: Any = None,
) -> tuple[ControlKind, dict[str, Any]]:
    """Check one control request against the job's spec; its kind and normalized body.

    ``spec`` is the job's recorded spec (declared ``config``, ``sources``, registered
    ``events``). ``check_config(values)`` may replace the declared-defaults check (a schema the
    pipeline gives). Raises :class:`InvalidInput` naming the field; nothing is changed.
    """
    if not isinstance(body, Mapping):
        raise InvalidInput("body", "expects a JSON object with a 'kind'")
    raw_kind = body.get("kind")
    try:
        kind = ControlKind(str(raw_kind))
    except ValueError:
        allowed = ", ".join(k.value for k in ControlKind if k != ControlKind.SAVEPOINT)
        raise InvalidInput(
            "kind", f"unknown control kind {raw_kind!r} (allowed: {allowed})"
        ) from None
    fields = {k: v for k, v in body.items() if k not in ("kind", "request_id")}
    extra = sorted(set(fields) - FIELDS[kind])
    if extra:
        allowed = ", ".join(sorted(FIELDS[kind])) or "none"
        raise InvalidInput(extra[0], f"is not a field of a {kind} event (its fields: {allowed})")
    return kind, _VALIDATORS[kind](fields, spec, check_config)


def _type_name(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string"}.get(
        type(value),
        "list"
        if isinstance(value, list)
        else "object"
        if isinstance(value, dict)
        else type(value).__name__,
    )


def merge_config(defaults: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """See :meth:`Pipeline.check_config`."""
    allowed = ", ".join(sorted(defaults)) or "none: the pipeline declares no config"
    out = dict(defaults)
    for key, value in values.items():
        if key not in defaults:
            raise InvalidInput(
                f"config.{key}", f"is not a declared config key (declared: {allowed})"
            )
        default = defaults[key]
        if default is not None:
            want = _type_name(default)
            ok = _type_name(value) == want or (want == "number" and _type_name(value) == "integer")
            if not ok:
                raise InvalidInput(
                    f"config.{key}",
                    f"expects {want} (like its default {default!r}), got {_type_name(value)} "
                    f"{value!r} (declared keys: {allowed})",
                )
            if want == "number":
                value = float(value)
        out[key] = value
    return out


def check_with_schema(
    schema: Mapping[str, Any], defaults: Mapping[str, Any], values: Mapping[str, Any]
) -> dict[str, Any]:
    """``defaults`` with ``values`` on top, each value checked against its property in the
    JSON ``schema``; an unknown key or a value the schema refuses is :class:`InvalidInput`
    naming ``config.<key>`` and what is allowed."""
    import jsonschema

    props = dict(schema.get("properties") or {})
    allowed = ", ".join(sorted(props)) or "none: the pipeline declares no config"
    out = dict(defaults)
    for key, value in values.items():
        if key not in props:
            raise InvalidInput(
                f"config.{key}", f"is not a declared config key (declared: {allowed})"
            )
        sub = {**props[key], "$defs": schema.get("$defs", {})}
        try:
            jsonschema.validate(value, sub)
        except jsonschema.ValidationError as e:
            raise InvalidInput(f"config.{key}", f"{e.message} (declared keys: {allowed})") from None
        out[key] = value
    return out


def _config(fields: dict[str, Any], spec: Mapping[str, Any], check: Any) -> dict[str, Any]:
    sets = fields.get("set") or {}
    unset = fields.get("unset") or []
    if not isinstance(sets, dict):
        raise InvalidInput("set", "expects an object of config keys and values")
    if not isinstance(unset, list) or not all(isinstance(k, str) for k in unset):
        raise InvalidInput("unset", "expects a list of config keys")
    if not sets and not unset:
        raise InvalidInput("set", "a config event needs 'set' or 'unset' with at least one key")
    both = sorted(set(sets) & set(unset))
    if both:
        raise InvalidInput(f"config.{both[0]}", "is both set and unset")
    declared = dict(spec.get("config") or {})
    if check is not None:
        sets = dict(check(sets))
    elif spec.get("config_schema"):
        check_with_schema(spec["config_schema"], {}, sets)
    else:
        merged = merge_config(declared, sets)  # raises naming the key and what is allowed
        sets = {k: merged[k] for k in sets}
    allowed = ", ".join(sorted(declared)) or "none: the pipeline declares no config"
    for key in unset:
        if key not in declared:
            raise InvalidInput(
                f"config.{key}", f"is not a declared config key (declared: {allowed})"
            )
    return {"set": sets, "unset": list(unset)}


def _rate_limit(fields: dict[str, Any], spec: Mapping[str, Any], _check: Any) -> dict[str, Any]:
    if not fields:
        raise InvalidInput(
            "rows_per_second", f"a rate_limit event needs one of {', '.join(RATE_KEYS)}"
        )
    supported = supported_rate_keys(spec)
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if key not in supported:
            have = ", ".join(sorted(supported)) or "none: the job reads no stoker source"
            raise InvalidInput(key, f"no source of this job obeys it (its sources take: {have})")
        if value is None:
            out[key] = None
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidInput(key, f"expects a positive number or null, got {value!r}")
        if key != "rows_per_second" and (not float(value).is_integer()):
            raise InvalidInput(key, f"expects a whole number >= 1 or null, got {value!r}")
        if not value > 0 or (key != "rows_per_second" and value < 1):
            raise InvalidInput(key, f"must be > 0 (null removes the limit), got {value!r}")
        out[key] = float(value) if key == "rows_per_second" else int(value)
    return out


def _log_level(fields: dict[str, Any], _spec: Mapping[str, Any], _check: Any) -> dict[str, Any]:
    if "level" not in fields:
        raise InvalidInput("level", f"a log_level event needs a level ({', '.join(LOG_LEVELS)})")
    out: dict[str, Any] = {"level": normalize_level(fields["level"])}
    logger = fields.get("logger")
    if logger is not None:
        if not isinstance(logger, str) or not _LOGGER.match(logger):
            raise InvalidInput("logger", f"expects a logger name like 'my.module', got {logger!r}")
        out["logger"] = logger
    return out


def _trigger(fields: dict[str, Any], _spec: Mapping[str, Any], _check: Any) -> dict[str, Any]:
    if "interval" not in fields:
        raise InvalidInput("interval", "a trigger event needs an interval, e.g. '2s'")
    return {"interval": fields["interval"], "seconds": parse_duration(fields["interval"])}


def _empty(fields: dict[str, Any], _spec: Mapping[str, Any], _check: Any) -> dict[str, Any]:
    return {}


def _event(fields: dict[str, Any], spec: Mapping[str, Any], _check: Any) -> dict[str, Any]:
    name = fields.get("name")
    if not isinstance(name, str) or not _EVENT_NAME.match(name):
        raise InvalidInput("name", f"expects an event name like 'reload_rules', got {name!r}")
    registered = sorted(spec.get("events") or [])
    if name not in registered:
        have = ", ".join(registered) or "none: the pipeline registers no @on_control handler"
        raise InvalidInput("name", f"no handler is registered for {name!r} (registered: {have})")
    payload = fields.get("payload", {})
    try:
        size = len(json.dumps(payload))
    except (TypeError, ValueError):
        raise InvalidInput("payload", "expects JSON") from None
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidInput("payload", f"is {size} bytes; at most {MAX_PAYLOAD_BYTES} are allowed")
    return {"name": name, "payload": payload}


def _savepoint(fields: dict[str, Any], _spec: Mapping[str, Any], _check: Any) -> dict[str, Any]:
    stop = fields.get("stop", False)
    if not isinstance(stop, bool):
        raise InvalidInput("stop", f"expects true or false, got {stop!r}")
    folder = fields.get("dir")
    if folder is not None and (not isinstance(folder, str) or not folder.strip()):
        raise InvalidInput("dir", f"expects a folder path, got {folder!r}")
    return {"stop": stop, "dir": folder}


def _scaling(fields: dict[str, Any], _spec: Mapping[str, Any], _check: Any) -> dict[str, Any]:
    # The whole spec, as parse_scaling reads it (text or object); stored in its to_dict() form.
    if fields.get("scaling") is None:
        raise InvalidInput(
            "scaling", "a scaling event needs a scaling spec, e.g. 'reactive' or 'auto:min=1,max=4'"
        )
    return {"scaling": parse_scaling(fields["scaling"], "scaling").to_dict()}


_VALIDATORS = {
    ControlKind.CONFIG: _config,
    ControlKind.RATE_LIMIT: _rate_limit,
    ControlKind.LOG_LEVEL: _log_level,
    ControlKind.TRIGGER: _trigger,
    ControlKind.PAUSE: _empty,
    ControlKind.RESUME: _empty,
    ControlKind.CHECKPOINT: _empty,
    ControlKind.EVENT: _event,
    ControlKind.SAVEPOINT: _savepoint,
    ControlKind.SCALING: _scaling,
}


def apply(
    job_id: str,
    config: dict[str, Any],
    state: dict[str, Any],
    kind: ControlKind,
    body: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The control state after a (validated) event: new ``(config, state)``.

    Raises :class:`ControlConflict` when the event cannot be taken in this state (pause of a
    paused job, resume or checkpoint of one that is not running).
    """
    config = dict(config)
    state = json.loads(json.dumps(state))  # a deep copy
    if kind == ControlKind.CONFIG:
        base = state.get("base", config)
        overrides = dict(state.get("overrides") or {})
        for key, value in body["set"].items():
            overrides[key] = value
            config[key] = value
        for key in body["unset"]:
            overrides.pop(key, None)
            if key in base:
                config[key] = base[key]
        state["base"] = base
        state["overrides"] = overrides
    elif kind == ControlKind.RATE_LIMIT:
        limits = dict(state.get("rate_limit") or {})
        for key, value in body.items():
            if value is None:
                limits.pop(key, None)  # control's limit goes: the source's own applies again
            else:
                limits[key] = value
        state["rate_limit"] = limits
    elif kind == ControlKind.LOG_LEVEL:
        levels = dict(state.get("log_level") or {})
        if "logger" in body:
            loggers = dict(levels.get("loggers") or {})
            loggers[body["logger"]] = body["level"]
            levels["loggers"] = loggers
        else:
            levels["root"] = body["level"]
        state["log_level"] = levels
    elif kind == ControlKind.TRIGGER:
        state["trigger_s"] = float(body["seconds"])
    elif kind == ControlKind.PAUSE:
        if state.get("paused"):
            raise ControlConflict(job_id, ALREADY_PAUSED)
        state["paused"] = True
    elif kind == ControlKind.RESUME:
        if not state.get("paused"):
            raise ControlConflict(job_id, NOT_PAUSED)
        state["paused"] = False
    elif kind == ControlKind.CHECKPOINT and state.get("paused"):
        raise ControlConflict(job_id, "is paused: no epoch runs until it is resumed")
    # EVENT, SAVEPOINT and SCALING change no control state: the event itself is what applies
    # (a scaling event: the job manager sets the owner's scaling when it stores the event).
    return config, state


def declare(
    config: dict[str, Any], state: dict[str, Any], defaults: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A new attempt declares its config: ``defaults`` with control's overrides on top.

    Overrides of keys the pipeline no longer declares are dropped.
    """
    state = json.loads(json.dumps(state))
    overrides = {k: v for k, v in (state.get("overrides") or {}).items() if k in defaults}
    state["base"] = dict(defaults)
    if overrides:
        state["overrides"] = overrides
    else:
        state.pop("overrides", None)
    return {**defaults, **overrides}, state


# The kinds whose event changes the control state (the others act through the event itself).
STATE_KINDS = frozenset(
    {
        ControlKind.CONFIG,
        ControlKind.RATE_LIMIT,
        ControlKind.LOG_LEVEL,
        ControlKind.TRIGGER,
        ControlKind.PAUSE,
        ControlKind.RESUME,
    }
)


@dataclass(frozen=True)
class Step:
    """What made one control version out of the one before it, as :func:`replay` redoes it:
    an event (``kind`` and ``body``; ``counts`` False once it was rejected), or a new
    attempt's declared ``defaults``; neither (an undo) is a step that changes nothing."""

    kind: ControlKind | None = None
    body: Mapping[str, Any] | None = None
    counts: bool = True
    defaults: Mapping[str, Any] | None = None


def replay(
    job_id: str, config: dict[str, Any], state: dict[str, Any], steps: Sequence[Step]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The control state from ``(config, state)`` through ``steps``, leaving out the events
    that do not count: the state as if a rejected event had never been sent.

    An event that conflicts once an earlier one is left out (a pause after a resume that was
    rejected) changes nothing, as it would have been refused then.
    """
    for step in steps:
        if step.kind is not None:
            if not step.counts:
                continue
            try:
                config, state = apply(job_id, config, state, step.kind, step.body or {})
            except ControlConflict:
                continue
        elif step.defaults is not None:
            config, state = declare(config, state, step.defaults)
    return config, state


def same_request(kind: ControlKind, body: Mapping[str, Any], other_kind: str, other: Any) -> bool:
    """Whether a retried request (same request_id) carries the same event."""
    return str(kind) == str(other_kind) and json.dumps(body, sort_keys=True) == json.dumps(
        other, sort_keys=True
    )
