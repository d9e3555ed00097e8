"""Hiding secrets in what stoker shows: API answers, log lines, command lines.

A ``conf`` key looks secret when it contains one of :data:`SECRET_WORDS` (case-insensitive,
anywhere in the key: ``spark.hadoop.fs.s3a.secret.key``, ``spark.jdbc.password``). A URL's
password (``scheme://user:PASSWORD@host``) and libpq's ``password=...`` are secret too.
Redacting only changes what is shown: the real values still reach the driver.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

MASK = "***"
SECRET_WORDS = ("password", "secret", "token", "key", "credential")
_WORDS = "|".join(SECRET_WORDS)

# scheme://user:password@host -> scheme://user:***@host
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][\w+.-]*://[^\s:/@'\"]*:)[^\s@'\"]+(?=@)")
# key=value where the key looks secret (libpq's password=..., -D pairs, log lines)
_PAIR = re.compile(rf"(?P<head>\b[\w.-]*(?:{_WORDS})[\w.-]*\s*=\s*)(?P<value>[^\s,;&'\"]+)", re.I)
# 'key': 'value' where the key looks secret (a dict's repr inside a message)
_QUOTED = re.compile(
    rf"(?P<head>(?P<q>['\"])[^'\"]*(?:{_WORDS})[^'\"]*(?P=q)\s*:\s*)(?P<v>['\"])(?:(?!(?P=v)).)*(?P=v)",
    re.I,
)


def is_secret_key(key: str) -> bool:
    """True when a conf key looks like it names a secret."""
    low = key.lower()
    return any(w in low for w in SECRET_WORDS)


def redact_url(url: str) -> str:
    """``url`` with its password (if any) replaced by :data:`MASK`."""
    return _URL_PASSWORD.sub(rf"\g<head>{MASK}", url)


def redact_text(text: str) -> str:
    """A message or log line with URL passwords and secret-looking ``key=value`` hidden."""
    if not text:
        return text
    text = _URL_PASSWORD.sub(rf"\g<head>{MASK}", text)
    text = _PAIR.sub(rf"\g<head>{MASK}", text)
    return _QUOTED.sub(rf"\g<head>'{MASK}'", text)


def redact_conf(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``conf`` with the values of secret-looking keys replaced by :data:`MASK`."""
    return {
        k: MASK if is_secret_key(k) else redact_text(v) if isinstance(v, str) else v
        for k, v in conf.items()
    }


def redact_answer(obj: Any) -> Any:
    """A copy of an API answer (dicts, lists, strings) with every secret hidden.

    Dicts under a ``conf`` or ``config`` key are redacted by key; every string by
    :func:`redact_text`.
    """
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            if k in ("conf", "config") and isinstance(v, Mapping):
                out[k] = redact_conf(v)
            else:
                out[k] = redact_answer(v)
        return out
    if isinstance(obj, list | tuple):
        return [redact_answer(v) for v in obj]
    return obj


class RedactingFilter(logging.Filter):
    """A handler filter that hides secrets in every record's message before it is written."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact_text(message)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if clean != message or record.args:
            record.msg, record.args = clean, None
        return True


def redact_logs(handlers: list[logging.Handler] | None = None) -> None:
    """Add a :class:`RedactingFilter` to ``handlers`` (default: the root logger's)."""
    for h in handlers if handlers is not None else logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in h.filters):
            h.addFilter(RedactingFilter())


__all__ = [
    "MASK",
    "SECRET_WORDS",
    "RedactingFilter",
    "is_secret_key",
    "redact_answer",
    "redact_conf",
    "redact_logs",
    "redact_text",
    "redact_url",
]
