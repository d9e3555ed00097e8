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
SECRET_WORDS = (
    "password",
    "passphrase",
    "secret",
    "token",
    "key",
    "credential",
    "bearer",
    "authorization",
)
_WORDS = "|".join(SECRET_WORDS)

# Every pattern here runs in time linear in the text (a message, a log line, an API answer
# may hold anything a client sent): no pattern can backtrack over a run of characters.
# Python's possessive quantifiers (*+, ++) never give back what they took, and each pattern
# that could start inside a run matches the whole run instead (the decision is made in
# Python on the match), so the scan resumes after it. The old patterns took 27 s on a 24 KB
# string of "a.a.a...".

# scheme://user:password@host -> scheme://user:***@host: found by a scan (_mask_urls), not a
# pattern, so that a password holding '@' is hidden whole (the host follows the last '@').
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_AUTHORITY_END = re.compile(r"[/?#\s'\"]")
# Where a URL written in text ends at the latest: a password may hold '/', '?' or '#' (not
# escaped, as users write them: postgresql://u:p/a?b#c@host/db), so when the authority that
# ends at the first of those has no '@', the last '@' before this end is looked for.
_TOKEN_END = re.compile(r"[\s'\"<>]")
# key=value or key: value where the key looks secret (libpq's password=..., -D pairs, log
# lines, YAML-ish text), the value quoted or not: a run of key characters, then (optionally)
# the separator and an opening quote. The value is taken in Python (_mask_pairs), only after a
# secret key, so that a value is scanned for a key of its own ("conf: a.password=x").
_PAIR = re.compile(r"(?P<key>[\w.-]++)(?:(?P<eq>\s*+[=:]\s*+)(?P<q>['\"]?+))?")
_PAIR_VALUE = re.compile(r"[^\s,;&'\"]++")
# 'key': 'value' where the key looks secret (a dict's repr inside a message): a quoted string
# (its key at most 256 long), then (optionally) ": " and the value's opening quote; the value
# runs to its closing quote, looked for at most _VALUE_MAX characters on.
_QUOTED = re.compile(
    r"(?P<q>['\"])(?P<key>[^'\"\n]{0,256}+)(?P=q)(?:(?P<sep>\s*+:\s*+)(?P<v>['\"]))?"
)
_VALUE_MAX = 4096


def is_secret_key(key: str) -> bool:
    """True when a conf key looks like it names a secret: one of :data:`SECRET_WORDS`
    anywhere in it, or a part of it (between dots, dashes, underscores) that is ``pass``,
    ``passwd``, ``pwd`` or ``pw`` (``spark.auth.pass``, ``db_pwd``, ``db.pw``)."""
    low = key.lower()
    if any(w in low for w in SECRET_WORDS):
        return True
    return any(part in _SECRET_PARTS for part in _PARTS.split(low))


_SECRET_PARTS = frozenset({"pass", "passwd", "pwd", "pw"})
_PARTS = re.compile(r"[._\-\s]")


def is_secret_entry(key: str, value: object) -> bool:
    """True when a conf entry must not be shown or put on a command line: a secret-looking
    key, or a value holding a URL password or a secret-looking ``key=value`` pair."""
    return is_secret_key(key) or (isinstance(value, str) and redact_text(value) != value)


def _splice(text: str, cuts: list[tuple[int, int, str]]) -> str:
    """``text`` with each ``(start, end, replacement)`` cut (in order, not overlapping)
    replaced; ``text`` itself when there is none."""
    if not cuts:
        return text
    out: list[str] = []
    done = 0
    for start, end, replacement in cuts:
        out.append(text[done:start])
        out.append(replacement)
        done = end
    out.append(text[done:])
    return "".join(out)


def _mask_urls(text: str) -> str:
    """Every ``scheme://user:password@host`` in ``text`` with its password masked; linear in
    the text: each scan of an authority stops at its first '/', and the next ``://`` lies
    after that."""
    cuts: list[tuple[int, int, str]] = []
    at = 0
    token_end = token_at = -1
    while (i := text.find("://", at)) >= 0:
        at = i + 3
        j = i
        while j > 0 and text[j - 1] in _SCHEME_CHARS:
            j -= 1
        if j == i or not text[j].isalpha():
            continue
        end_m = _AUTHORITY_END.search(text, at)
        end = len(text) if end_m is None else end_m.start()
        host_at = text.rfind("@", at, end)
        if host_at < at and end < len(text) and text[end] in "/?#":
            if token_end < at:  # found once per run of text: the scan stays linear
                tok = _TOKEN_END.search(text, at)
                token_end = len(text) if tok is None else tok.start()
                token_at = text.rfind("@", at, token_end)
            host_at = token_at if token_at > at else -1
            if host_at > at:
                end = token_end
        colon = text.find(":", at, host_at) if host_at > at else -1
        if colon < 0 or colon + 1 >= host_at:
            continue
        cuts.append((colon + 1, host_at, MASK))
        at = max(at, end)
    return _splice(text, cuts)


# Plurals of the secret words, bare: in prose ("declared keys: rate, window", "tokens: 2")
# they introduce a list of names, not a secret's value.
_PROSE_WORDS = frozenset(f"{w}s" for w in SECRET_WORDS)


def _is_prose(key: str, eq: str) -> bool:
    """Whether ``key`` before the separator ``eq`` is a word of prose, not a key: a plural
    secret word alone followed by ':' (``keys: a, b``), or an exception's class name before
    its message (``KeyError: 'OUT_DIR'`` names the missing key, which the user must see)."""
    if eq.strip() != ":":
        return False
    return key.lower() in _PROSE_WORDS or _is_exception_name(key)


def _is_exception_name(key: str) -> bool:
    """A Python exception's class name, dotted or not: KeyError, jwt.InvalidKeyError."""
    name = key.rpartition(".")[2]
    return name[:1].isupper() and name.isidentifier() and name.endswith(_EXCEPTION_ENDS)


_EXCEPTION_ENDS = ("Error", "Exception", "Warning")


def _mask_pairs(text: str) -> str:
    """Each secret-looking ``key=value`` or ``key: value`` with its value masked; linear: each
    key run is matched whole (possessive) and the scan goes on after it."""
    cuts: list[tuple[int, int, str]] = []
    at = 0
    while (m := _PAIR.search(text, at)) is not None:
        at = m.end()
        eq, key = m.group("eq"), m.group("key")
        if eq is None or not is_secret_key(key) or _is_prose(key, eq):
            continue
        value = _PAIR_VALUE.match(text, m.end())
        if value is None:
            continue
        cuts.append((m.end(), value.end(), MASK))
        at = value.end()
    return _splice(text, cuts)


def _mask_quoted(text: str) -> str:
    """Each secret-looking ``'key': 'value'`` with its value masked; a value (secret or not)
    is skipped whole, so that the scan stays aligned on the quotes of the dict's repr."""
    cuts: list[tuple[int, int, str]] = []
    at = 0
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
            cuts.append((m.end() - 1, close + 1, f"'{MASK}'"))
        at = close + 1
    return _splice(text, cuts)


# An HTTP credential after its scheme (``Authorization: Basic dXNlcjpw...``, ``Bearer eyJ...``),
# wherever it is written: a header in a log line, a curl command in a job's args.
_SCHEME = re.compile(r"(?i)\b(?P<s>bearer|basic|digest|negotiate)\s++(?P<v>[\w.~+/=-]++)")
_B64ISH = re.compile(r"[A-Za-z0-9+/_-]{8,}+={0,2}")


def _mask_schemes(text: str) -> str:
    """Each credential after ``Bearer`` (any value) or ``Basic``/``Digest``/``Negotiate`` (a
    value that looks encoded: base64-like, 8 characters or more, not a plain lower-case word,
    so that "basic information" stays) masked."""
    cuts: list[tuple[int, int, str]] = []
    for m in _SCHEME.finditer(text):
        v = m.group("v")
        word = v.isalpha() and (v.islower() or v[1:].islower())  # "information", "Setup"
        if m.group("s").lower() == "bearer" or (bool(_B64ISH.fullmatch(v)) and not word):
            cuts.append((m.start("v"), m.end("v"), MASK))
    return _splice(text, cuts)


def redact_url(url: str) -> str:
    """``url`` with its password (if any) replaced by :data:`MASK`."""
    return _mask_urls(url)


def redact_text(text: str) -> str:
    """A message or log line with URL passwords and secret-looking ``key=value`` hidden. Linear
    in the length of ``text``."""
    if not text:
        return text
    text = _mask_urls(text)
    text = _mask_schemes(text)
    text = _mask_pairs(text)
    return _mask_quoted(text)


def redact_conf(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``conf`` with the values of secret-looking keys replaced by :data:`MASK`."""
    return {
        k: MASK if is_secret_key(k) else redact_text(v) if isinstance(v, str) else v
        for k, v in conf.items()
    }


# Where an answer carries what a user sent or a program wrote (a submission's conf and
# config, a control event's body, its config changes and payload): secrets by key at any depth.
_USER_CONTENT = frozenset({"conf", "config", "set", "payload", "body", "result"})


def redact_answer(obj: Any) -> Any:
    """A copy of an API answer (dicts, lists, strings) with every secret hidden.

    Under a ``conf``, ``config``, ``set``, ``payload``, ``body`` or ``result`` key, a value
    whose key looks secret is masked at any depth; every string by :func:`redact_text`.
    """
    return _redact(obj, False)


def _redact(obj: Any, by_key: bool) -> Any:
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            if by_key and isinstance(k, str) and is_secret_key(k) and v is not None:
                out[k] = MASK
            else:
                out[k] = _redact(v, by_key or k in _USER_CONTENT)
        return out
    if isinstance(obj, list | tuple):
        return [_redact(v, by_key) for v in obj]
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
