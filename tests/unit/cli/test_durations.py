"""Duration flags take the syntax of -D stoker.* durations: 30s, 500ms, 2m, or seconds."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from stoker.cli import main
from stoker.cli._common import Duration

DURATION_FLAGS = [
    ("server", "--leader-ttl"),
    ("server", "--lease-ttl"),
    ("server", "--cancel-timeout"),
    ("server", "--scaler-window"),
    ("pause", "--timeout"),
    ("checkpoint", "--timeout"),
]


def _option(command: str, flag: str) -> click.Option:
    cmd = main.commands[command]
    return next(p for p in cmd.params if isinstance(p, click.Option) and flag in p.opts)


@pytest.mark.parametrize(
    ("given", "seconds"),
    [("30s", 30.0), ("500ms", 0.5), ("2m", 120.0), ("10", 10.0), ("0.5", 0.5), (7.0, 7.0)],
)
def test_a_duration_is_parsed_like_a_settings_duration(given: object, seconds: float) -> None:
    assert Duration().convert(given, None, None) == seconds


@pytest.mark.parametrize(("command", "flag"), DURATION_FLAGS)
def test_every_duration_flag_takes_the_duration_syntax(command: str, flag: str) -> None:
    opt = _option(command, flag)
    assert isinstance(opt.type, Duration)
    assert opt.type.convert("90s", opt, None) == 90.0
    assert opt.type.convert("1500ms", opt, None) == 1.5


def test_app_cancel_timeout_is_a_duration() -> None:
    app = main.commands["app"]
    assert isinstance(app, click.Group)
    cancel = app.commands["cancel"]
    opt = next(p for p in cancel.params if "--timeout" in getattr(p, "opts", ()))
    assert isinstance(opt.type, Duration)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("soon", "'soon' is not a duration like '500ms', '2s', '5m', '1h' or '7d'"),
        ("500ms", "less than the minimum 1s"),
    ],
)
def test_a_bad_duration_flag_is_named_and_exits_2(value: str, says: str) -> None:
    done = CliRunner().invoke(main, ["server", "--lease-ttl", value])
    assert done.exit_code == 2
    assert "--lease-ttl" in done.output and says in done.output, done.output


def test_a_server_flag_and_its_d_key_are_one_setting_with_one_syntax() -> None:
    """A flag is its -D key's name with '.' and '_' as '-', and takes the same values."""
    from stoker.settings import Settings, parse_window

    for flag, key in {
        "--lease-ttl": "lease_ttl",
        "--retention-epochs": "retention.epochs",
        "--retention-time": "retention.time",
    }.items():
        assert key in Settings.KEYS
        assert flag == "--" + key.replace(".", "-").replace("_", "-")
        _option("server", flag)  # the server has it
    lease = _option("server", "--lease-ttl")
    for value in ("30s", "500ms", "2m", "12"):
        try:
            local = Settings().with_overrides({"stoker.lease_ttl": value}).lease_ttl
        except Exception:
            local = None  # under 1s: refused by both
        try:
            managed = lease.type.convert(value, lease, None)
        except click.BadParameter:
            managed = None
        assert local == managed, value
    # --retention-time is parsed by the function -D stoker.retention.time uses.
    assert Settings().with_overrides({"stoker.retention.time": "7d"}).retention_time == (
        parse_window("7d", "--retention-time")
    )
