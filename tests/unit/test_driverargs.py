"""The manager-to-driver command line and environment are written and read by one object
(stoker/driverargs.py): what the manager writes is what the driver reads, secrets never on the
command line, and the environment entries taken out once read."""

from __future__ import annotations

from pathlib import Path

import pytest

from stoker.driverargs import (
    FROM_SAVEPOINT_ENV,
    MANAGER_URL_ENV,
    REWRITE_OUTPUT_ENV,
    SECRETS_ENV,
    STORE_URL_ENV,
    DriverArgs,
    DriverRole,
)
from stoker.errors import InvalidInput
from stoker.manager import processes

STORE = "postgresql://stoker:s3cret/pw@db.example:5432/stoker"
CONF = {
    "spark.master": "local[2]",
    "spark.hadoop.fs.s3a.secret.key": "AKIA-very-secret",
    "stoker.trigger": "2s",
}


def _round_trip(args: DriverArgs) -> DriverArgs:
    argv, env = args.to_argv(python="python3"), args.to_env()
    joined = " ".join(argv)
    assert "s3cret" not in joined and "AKIA-very-secret" not in joined, joined
    assert argv[:3] == ["python3", "-m", args.role.module]
    back = DriverArgs.from_argv(args.role, argv[3:], env)
    assert STORE_URL_ENV not in env and SECRETS_ENV not in env  # taken out once read
    return back


@pytest.mark.parametrize("attempt", [3, None])
def test_a_job_driver_reads_what_the_manager_wrote(attempt: int | None) -> None:
    args = DriverArgs(
        role=DriverRole.JOB,
        name="orders",
        attempt=attempt,
        store=STORE,
        state_dir=Path("/var/lib/stoker/jobs/orders"),
        lease_ttl=12.5,
        entrypoint=Path("/apps/orders.py"),
        args=("--day", "2026-12-02", "--"),
        conf=CONF,
        upgrade="u-1" if attempt is None else None,
        from_savepoint="/sp/7",
        rewrite_output=True,
        manager_url="http://127.0.0.1:8080",
    )
    assert _round_trip(args) == args
    assert args.standby is (attempt is None)


def test_an_application_driver_and_a_cleanup_round_trip() -> None:
    app = DriverArgs(
        role=DriverRole.APP,
        name="shop",
        attempt=1,
        store=STORE,
        state_dir=Path("/s/apps/shop"),
        lease_ttl=30.0,
        entrypoint=Path("/apps/shop.py"),
        conf=CONF,
    )
    assert _round_trip(app) == app
    cleanup = DriverArgs(role=DriverRole.CLEANUP, name="orders", store=STORE, state_dir=Path("/s"))
    assert cleanup.to_argv(python="py")[3:] == [
        "--job",
        "orders",
        "--store",
        cleanup.to_argv(python="py")[6],
        "--state-dir",
        "/s",
    ]
    assert _round_trip(cleanup) == cleanup


def test_the_managers_argv_keeps_its_shape() -> None:
    """A driver of this version reads the command line managers of earlier versions wrote:
    the shape (flags, order, ``--`` before the app) is kept."""
    argv = processes.DriverArgv.of(
        DriverArgs(
            role=DriverRole.JOB,
            name="j",
            attempt=2,
            store="sqlite:////tmp/s.db",
            state_dir=Path("/d"),
            entrypoint=Path("/a.py"),
            args=("x",),
            conf={"k": "v"},
            lease_ttl=30.0,
        )
    )
    assert list(argv)[1:] == [
        "-m",
        "stoker.runtime.driver",
        "--job",
        "j",
        "--attempt",
        "2",
        "--store",
        "sqlite:////tmp/s.db",
        "--state-dir",
        "/d",
        "--lease-ttl",
        "30.0",
        "-D",
        "k=v",
        "--",
        "/a.py",
        "x",
    ]
    assert argv.env == {STORE_URL_ENV: "sqlite:////tmp/s.db"}
    assert FROM_SAVEPOINT_ENV not in argv.env and REWRITE_OUTPUT_ENV not in argv.env
    assert MANAGER_URL_ENV not in argv.env


def test_bad_secrets_in_the_environment_are_named() -> None:
    argv = DriverArgs(
        role=DriverRole.JOB,
        name="j",
        attempt=1,
        store="sqlite:////s.db",
        state_dir=Path("/d"),
        entrypoint=Path("/a.py"),
    ).to_argv()[3:]
    with pytest.raises(InvalidInput, match=SECRETS_ENV):
        DriverArgs.from_argv(DriverRole.JOB, argv, {SECRETS_ENV: "[1, 2]"})
