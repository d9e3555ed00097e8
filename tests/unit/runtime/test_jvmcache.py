"""The driver JVM's class archive (stoker.runtime.jvmcache): when it is used, and that a
driver never maps one that is missing or half-written. The archive itself is made by the
suite's start (tests/conftest.py), with a real JVM, and every Spark test's driver uses it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stoker.runtime import jvmcache


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(jvmcache.ENV_SWITCH, raising=False)
    return tmp_path / "jvm"


def test_the_users_own_sharing_options_or_the_switch_turn_it_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(jvmcache.ENV_SWITCH, raising=False)
    assert jvmcache.enabled("-Xss16m")
    assert not jvmcache.enabled("-Xss16m -XX:SharedArchiveFile=/x.jsa")
    assert not jvmcache.enabled("-Xshare:off")
    monkeypatch.setenv(jvmcache.ENV_SWITCH, "0")
    assert not jvmcache.enabled("-Xss16m")
    assert jvmcache.driver_options("-Xss16m") == []


def test_an_archive_in_place_is_mapped_quietly(cache: Path) -> None:
    path = jvmcache.archive_path()
    assert path is not None and path.parent == cache
    cache.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"archive")
    opts = jvmcache.driver_options("-Xss16m")
    assert opts == [f"-XX:SharedArchiveFile={path}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    both = " ".join(["-Xss16m -Dx=1", *opts])
    assert jvmcache.without_archive(both) == "-Xss16m -Dx=1"


def test_no_archive_yet_starts_without_one_and_a_held_lock_starts_no_second_builder(
    cache: Path,
) -> None:
    path = jvmcache.archive_path()
    assert path is not None
    lock = jvmcache._lock(path)  # another builder is at it
    assert lock is not None and lock.read_text() == str(os.getpid())
    assert jvmcache._lock(path) is None
    assert jvmcache.driver_options("-Xss16m") == []  # no half-written archive is mapped
    assert jvmcache.build() is None  # nor a second one made
    assert not path.exists()
    lock.unlink()


def test_a_stale_lock_of_a_builder_that_died_is_taken_over(cache: Path) -> None:
    path = jvmcache.archive_path()
    assert path is not None
    cache.mkdir(parents=True, exist_ok=True)
    lock = path.with_suffix(".lock")
    lock.write_text("999999999")
    old = lock.stat().st_mtime - 3600
    os.utime(lock, (old, old))
    taken = jvmcache._lock(path)
    assert taken == lock and lock.read_text() == str(os.getpid())
    lock.unlink()


def test_the_suites_archive_exists_for_this_java_and_pyspark() -> None:
    if not jvmcache.enabled(""):
        pytest.skip(f"{jvmcache.ENV_SWITCH} turns the archive off")
    path = jvmcache.archive_path()
    assert path is not None and path.is_file() and path.stat().st_size > 1_000_000
