"""stoker run's modes (local, --server, --driver): one table says which options each takes."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from stoker.cli import main
from stoker.cli.run import DRIVER, LOCAL, MODE_OPTIONS, SERVER, check_mode, run_mode
from stoker.errors import InvalidInput

VALUES: dict[str, str | None] = {
    "--app-id": "a1",
    "--cluster": "local",
    "--driver-memory": "1g",
    "--driver-cores": "1",
    "--job-id": "j1",
    "--pipeline": "p",
    "--config": "k=1",
    "--from-savepoint": "/nowhere",
    "--rewrite-output-after-savepoint": "arg",  # a flag: the value is an app argument
    "--fork": None,  # a flag: no value
    "--ignore-unreachable-stores": None,  # a flag: no value
    "--reset-checkpoint": None,  # a flag: no value
    "--restart-strategy": "{}",
    "--scaling": "fixed",
    "--standby": None,  # a flag: no value
}
MODE_ARGS = {
    LOCAL: [],
    SERVER: ["--server", "http://127.0.0.1:9"],  # nothing listens: nothing may be sent
    DRIVER: ["--driver", "--server", "http://127.0.0.1:9"],
}


def test_the_mode_of_a_command_line() -> None:
    assert run_mode(False, None) == LOCAL
    assert run_mode(False, "http://h:1") == SERVER
    assert run_mode(True, "http://h:1") == DRIVER
    assert run_mode(True, None) == DRIVER  # need_server then says --server is needed


def test_the_table_names_every_option_that_some_mode_refuses() -> None:
    assert set(MODE_OPTIONS) == set(VALUES)
    for modes, _why in MODE_OPTIONS.values():
        assert modes and modes < {LOCAL, SERVER, DRIVER}


@pytest.mark.parametrize("mode", [LOCAL, SERVER, DRIVER])
def test_check_mode_refuses_what_the_mode_does_not_take(mode: str) -> None:
    for flag, (modes, why) in MODE_OPTIONS.items():
        if mode in modes:
            check_mode(mode, {flag: True})
        else:
            with pytest.raises(InvalidInput) as err:
                check_mode(mode, {flag: True})
            assert (err.value.field, err.value.message) == (flag, why)
        check_mode(mode, {flag: False})  # not given: never refused


def test_the_first_refused_option_in_table_order_is_named() -> None:
    with pytest.raises(InvalidInput, match=r"^--app-id"):
        check_mode(LOCAL, {"--scaling": True, "--app-id": True})


REFUSED = [(m, f) for f, (modes, _) in MODE_OPTIONS.items() for m in MODE_ARGS if m not in modes]


@pytest.mark.parametrize(("mode", "flag"), REFUSED)
def test_the_command_line_refuses_an_option_of_another_mode_with_exit_2(
    tmp_path: Path, mode: str, flag: str
) -> None:
    why, value = MODE_OPTIONS[flag][1], VALUES[flag]
    app = tmp_path / "app.py"
    app.write_text("raise SystemExit('must not run')\n")
    done = CliRunner().invoke(
        main,
        ["run", str(app), *MODE_ARGS[mode], flag, *([] if value is None else [value])],
        env={"STOKER_SERVER": "", "STOKER_STORE": ""},
    )
    assert done.exit_code == 2, done.output
    assert f"stoker: error: {flag}: {why}" in done.output
