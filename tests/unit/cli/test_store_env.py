"""STOKER_STORE: every command that takes --store reads it; an explicit --store wins."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from stoker.cli import main
from stoker.cli.run import local_overrides
from stoker.store import open_store
from stoker.types import job_id


def _commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, cmd in group.commands.items():
        yield f"{prefix}{name}", cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, f"{prefix}{name} ")


def test_every_store_option_reads_stoker_store() -> None:
    found = []
    for name, cmd in _commands(main):
        for p in cmd.params:
            if isinstance(p, click.Option) and "--store" in p.opts:
                found.append(name)
                assert p.envvar == "STOKER_STORE", name
    assert {"list", "status", "cancel", "server", "pause"} <= set(found)


def _store_with(path: Path, jid: str) -> str:
    url = f"sqlite:///{path}"
    st = open_store(url)
    try:
        st.create_job(job_id(jid), jid, {"sinks": []}, {})
    finally:
        st.close()
    return url


@pytest.fixture
def stores(tmp_path: Path) -> tuple[str, str]:
    return _store_with(tmp_path / "a.db", "job-a"), _store_with(tmp_path / "b.db", "job-b")


def test_list_and_status_read_stoker_store_and_an_explicit_store_wins(
    stores: tuple[str, str], tmp_path: Path
) -> None:
    a, b = stores
    run = CliRunner().invoke
    env = {"STOKER_STORE": a, "STOKER_SERVER": ""}

    listed = run(main, ["list"], env=env)
    assert listed.exit_code == 0, listed.output
    assert "job-a" in listed.output and "job-b" not in listed.output

    listed = run(main, ["list", "--store", b], env=env)
    assert listed.exit_code == 0, listed.output
    assert "job-b" in listed.output and "job-a" not in listed.output

    shown = run(main, ["status", "job-a"], env=env)
    assert shown.exit_code == 0, shown.output
    assert "job-a" in shown.output
    assert run(main, ["status", "job-a", "--store", b], env=env).exit_code == 3  # not in b


def test_a_local_run_takes_stoker_store_unless_d_names_a_store() -> None:
    env = {"STOKER_STORE": "sqlite:///env.db"}
    assert local_overrides({"spark.x": "1"}, env) == {
        "spark.x": "1",
        "stoker.store": "sqlite:///env.db",
    }
    given = {"stoker.store": "sqlite:///given.db"}
    assert local_overrides(given, env) == given
    assert local_overrides({}, {}) == {}


def test_a_store_url_in_a_file_keeps_its_password_off_the_command_line(
    stores: tuple[str, str], tmp_path: Path
) -> None:
    """Issue 22 item 7: ``--store-file`` (or STOKER_STORE_FILE) names a file whose first line
    is the URL; it wins over STOKER_STORE, and an explicit --store beside it is refused."""
    a, b = stores
    url_file = tmp_path / "store-url"
    url_file.write_text(b + "\n")
    run = CliRunner().invoke
    env = {"STOKER_STORE": a, "STOKER_SERVER": ""}

    listed = run(main, ["list", "--store-file", str(url_file)], env=env)
    assert listed.exit_code == 0, listed.output
    assert "job-b" in listed.output and "job-a" not in listed.output
    listed = run(main, ["list"], env={**env, "STOKER_STORE_FILE": str(url_file)})
    assert listed.exit_code == 0 and "job-b" in listed.output, listed.output
    both = run(main, ["list", "--store", a, "--store-file", str(url_file)], env={})
    assert both.exit_code == 2 and "not both" in both.output, both.output
    missing = run(main, ["list", "--store-file", str(tmp_path / "nope")], env=env)
    assert missing.exit_code == 2 and "cannot read" in missing.output, missing.output
    assert local_overrides({}, {"STOKER_STORE_FILE": str(url_file), "STOKER_STORE": a}) == {
        "stoker.store": b
    }


def test_a_typed_store_wins_over_a_server_from_the_environment(
    stores: tuple[str, str], tmp_path: Path
) -> None:
    """Issue 23 item 9: with STOKER_SERVER set (here a manager that is not there), a --store
    typed on the command line reads that store; a typed --server still wins over it."""
    a, _ = stores
    run = CliRunner().invoke
    env = {"STOKER_SERVER": "http://127.0.0.1:9", "STOKER_STORE": ""}
    listed = run(main, ["list", "--store", a], env=env)
    assert listed.exit_code == 0 and "job-a" in listed.output, listed.output
    status = run(main, ["status", "job-a", "--store", a], env=env)
    assert status.exit_code == 0 and "job-a" in status.output, status.output
    url_file = tmp_path / "store-url"
    url_file.write_text(a + "\n")
    from_file = run(main, ["list", "--store-file", str(url_file)], env=env)
    assert from_file.exit_code == 0 and "job-a" in from_file.output, from_file.output
    remote = run(main, ["list", "--store", a, "--server", "http://127.0.0.1:9"], env=env)
    assert remote.exit_code == 12, remote.output  # the typed server, unreachable
