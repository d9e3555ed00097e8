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

# Every pattern here runs in time linear in the text (a message, a log line, an API answer
# may hold anything a client sent): no pattern can backtrack over a run of characters.
# Python's possessive quantifiers (*+, ++) never give back what they took, and each pattern
# that could start inside a run matches the whole run instead (the decision is made in
# Python on the match), so the scan resumes after it. The old patterns took 27 s on a 24 KB
# string of "a.a.a..." (issue 22, item 4).

# scheme://user:password@host -> scheme://user:***@host: a run of scheme characters, then
# (optionally) the rest of a URL's userinfo up to the '@' (a user of at most 256 characters,
# a password of at most 1024: each "://" costs at most that much).
_URL_PASSWORD = re.compile(
    r"(?P<run>[\w+.-]++)(?:(?P<head>://[^\s:/@'\"]{0,256}+:)(?P<pw>[^\s@'\"]{1,1024}+)(?=@))?"
)
# key=value where the key looks secret (libpq's password=..., -D pairs, log lines): a run of
# key characters, then (optionally) "= value".
_PAIR = re.compile(r"(?P<key>[\w.-]++)(?:(?P<eq>\s*+=\s*+)(?P<value>[^\s,;&'\"]++))?")
# 'key': 'value' where the key looks secret (a dict's repr inside a message): a quoted string
# (its key at most 256 long), then (optionally) ": " and the value's opening quote; the value
# runs to its closing quote, looked for at most _VALUE_MAX characters on.
_QUOTED = re.compile(
    r"(?P<q>['\"])(?P<key>[^'\"\n]{0,256}+)(?P=q)(?:(?P<sep>\s*+:\s*+)(?P<v>['\"]))?"
)
_VALUE_MAX = 4096


def is_secret_key(key: str) -> bool:
    """True when a conf key looks like it names a secret."""
    low = key.lower()
    return any(w in low for w in SECRET_WORDS)


def is_secret_entry(key: str, value: object) -> bool:
    """True when a conf entry must not be shown or put on a command line: a secret-looking
    key, or a value holding a URL password or a secret-looking ``key=value`` pair."""
    return is_secret_key(key) or (isinstance(value, str) and redact_text(value) != value)


def _url(m: re.Match[str]) -> str:
    if m.group("pw") is None or not m.group("run")[:1].isalpha():
        return m.group(0)
    return f"{m.group('run')}{m.group('head')}{MASK}"


def _pair(m: re.Match[str]) -> str:
    if m.group("value") is None or not is_secret_key(m.group("key")):
        return m.group(0)
    return f"{m.group('key')}{m.group('eq')}{MASK}"


def _mask_quoted(text: str) -> str:
    """Each secret-looking ``'key': 'value'`` with its value masked; a value (secret or not)
    is skipped whole, so that the scan stays aligned on the quotes of the dict's repr."""
    out: list[str] = []
    done = at = 0
    while (m := _QUOTED.search(text, at)) is not None:
        v = m.group("v")
        if v is None:
            at = m.end()
            continue
        close = text.find(v, m.end(), m.end() + _VALUE_MAX)
        if close < 0:
            at = m.end()
            continue
        if is_secret_key(m.group("key")):
            out.append(text[done : m.end() - 1])
            out.append(f"'{MASK}'")
            done = close + 1
        at = close + 1
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def redact_url(url: str) -> str:
    """``url`` with its password (if any) replaced by :data:`MASK`."""
    return _URL_PASSWORD.sub(_url, url)


def redact_text(text: str) -> str:
    """A message or log line with URL passwords and secret-looking ``key=value`` hidden. Linear
    in the length of ``text``."""
    if not text:
        return text
    text = _URL_PASSWORD.sub(_url, text)
    text = _PAIR.sub(_pair, text)
    return _mask_quoted(text)


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
    "is_secret_entry",
    "is_secret_key",
    "redact_answer",
    "redact_conf",
    "redact_logs",
    "redact_text",
    "redact_url",
]
