"""Redaction misses an outside review found (issue 39 item 9): ``passphrase``, ``pw``,
``bearer``, HTTP credentials after ``Basic``/``Bearer``, base64 values under secret keys, and
URL passwords holding '/', '?' or '#' (seen on another local user's ``ps`` and by the
read-only token)."""

from __future__ import annotations

import pytest

from stoker.redact import (
    MASK,
    is_secret_entry,
    is_secret_key,
    redact_answer,
    redact_conf,
    redact_text,
)

B64 = "dXNlcjpwYXNzd29yZA=="  # base64 of user:password
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"


@pytest.mark.parametrize(
    "key",
    [
        "passphrase",
        "spark.ssl.keyStorePassphrase",
        "db.pw",
        "pw",
        "PW",
        "smtp-pw",
        "api.bearer",
        "http.authorization",
    ],
)
def test_the_reviews_keys_look_secret(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["spark.sql.shuffle.partitions", "pwm.rate", "newsfeed.view"])
def test_ordinary_keys_stay_shown(key: str) -> None:
    assert not is_secret_key(key)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("passphrase=hunter2 next", "hunter2"),
        ("connect pw=hunter2", "hunter2"),
        ("db.pw: 'hunter2'", "hunter2"),
        ("Authorization: Bearer " + JWT, JWT),
        ("authorization: bearer opaque-token-1", "opaque-token-1"),
        ("curl -H 'Authorization: Basic " + B64 + "' http://x", B64),
        ("Proxy-Authorization: Basic " + B64, B64),
        ("sent Bearer " + JWT + " to the API", JWT),
        ("secret=" + "YWJj+ZGVm/Z2hp==", "YWJj+ZGVm/Z2hp=="),
        ('"client_secret": "' + "YWJj+ZGVm/Z2hp==" + '"', "YWJj+ZGVm/Z2hp=="),
        ("{'api_key': 'YWJj/ZGVm+Z2hp=='}", "YWJj/ZGVm+Z2hp=="),
        ("postgresql://u:p/a?b#c@host/db", "p/a?b#c"),
        ("postgresql://u:p?q@host:5432/db?sslmode=require", "p?q"),
        ("store postgresql://app:s3/cr#t@db.example/stoker failed", "s3/cr#t"),
        ("redis://:pa/ss@h:6379/0", "pa/ss"),
    ],
)
def test_the_reviews_values_are_hidden(text: str, secret: str) -> None:
    shown = redact_text(text)
    assert secret not in shown, shown
    assert MASK in shown, shown


@pytest.mark.parametrize(
    "text",
    [
        "basic information about the job",
        "Basic Setup done",
        "http://host:8080/path?q=1#frag",
        "see http://host/p@x and https://example.org/a/b",
        "epoch 12 committed",
    ],
)
def test_plain_text_stays_as_it_is(text: str) -> None:
    assert redact_text(text) == text


def test_urls_keep_their_host_and_path() -> None:
    assert redact_text("postgresql://u:p/a?b#c@host/db") == f"postgresql://u:{MASK}@host/db"
    assert redact_text("x postgresql://u:p#x@h/db y") == f"x postgresql://u:{MASK}@h/db y"


def test_conf_and_answers_hide_them_too() -> None:
    conf = {
        "spark.ssl.keyStorePassphrase": "hunter2",
        "db.pw": "hunter2",
        "spark.x.header": "Basic " + B64,
        "spark.mongodb.read.connection.uri": "mongodb://u:p/q#r@db.example/x",
        "spark.sql.shuffle.partitions": "4",
    }
    shown = redact_conf(conf)
    assert shown["spark.ssl.keyStorePassphrase"] == shown["db.pw"] == MASK
    assert B64 not in shown["spark.x.header"] and "p/q#r" not in str(shown)
    assert shown["spark.sql.shuffle.partitions"] == "4"
    answer = redact_answer({"spec": {"conf": conf}, "error": "Authorization: Bearer " + JWT})
    assert "hunter2" not in str(answer) and B64 not in str(answer) and JWT not in str(answer)
    # Off the driver's command line as well (DriverArgs.to_argv uses this).
    assert is_secret_entry("spark.x.header", "Basic " + B64)
    assert is_secret_entry("spark.mongodb.read.connection.uri", "mongodb://u:p/q#r@h/x")
