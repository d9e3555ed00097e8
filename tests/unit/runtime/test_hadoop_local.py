"""stoker's Hadoop classes in a driver's settings (stoker/runtime/hadoop_local.py): compiled
once with the machine's real javac, local masters only, the user's own settings and the switch
respected, a compile that fails remembered and not paid again at every driver start."""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

import pytest

from stoker.runtime import hadoop_local
from stoker.runtime.session import spark_conf
from stoker.settings import Settings


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(hadoop_local.ENV_SWITCH, raising=False)
    return tmp_path / "jvm"


def test_a_local_driver_gets_the_classes_and_a_cluster_driver_only_the_jar(cache: Path) -> None:
    jar = hadoop_local.jar()
    assert jar is not None and jar.parent == cache
    with zipfile.ZipFile(jar) as zf:
        names = set(zf.namelist())
    assert {f"stoker/hadoop/{c}.class" for c in ("NioLocalFs", "NioLocalFileSystem")} <= names
    assert hadoop_local.jar() == jar  # made once

    local = spark_conf(Settings(master="local[2]"))
    assert local["spark.driver.extraClassPath"] == str(jar)
    assert local["spark.hadoop.fs.file.impl"] == "stoker.hadoop.NioLocalFileSystem"
    assert local["spark.hadoop.fs.AbstractFileSystem.file.impl"] == "stoker.hadoop.NioLocalFs"

    cluster = spark_conf(Settings(master="spark://127.0.0.1:7077"))
    assert cluster["spark.driver.extraClassPath"] == str(jar)  # one class archive for both
    assert not any(k.startswith("spark.hadoop.fs.") and "impl" in k for k in cluster)
    # local-cluster's executors are JVMs of their own, started without the driver's class path
    other = spark_conf(Settings(master="local-cluster[2,1,1024]"))
    assert "spark.hadoop.fs.file.impl" not in other


def test_the_users_own_file_system_and_class_path_are_kept(cache: Path) -> None:
    conf = {
        "spark.hadoop.fs.file.impl": "org.example.TheirFs",
        "spark.driver.extraClassPath": "/opt/their.jar",
    }
    hadoop_local.add_to(conf, "local[2]")
    jar = hadoop_local.jar()
    assert conf["spark.hadoop.fs.file.impl"] == "org.example.TheirFs"
    assert conf["spark.driver.extraClassPath"] == f"{jar}:/opt/their.jar"
    hadoop_local.add_to(conf, "local[2]")  # twice is once
    assert conf["spark.driver.extraClassPath"] == f"{jar}:/opt/their.jar"


def test_the_switch_turns_it_off(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(hadoop_local.ENV_SWITCH, "0")
    conf: dict[str, str] = {}
    hadoop_local.add_to(conf, "local[2]")
    assert conf == {}
    assert not cache.exists()


def test_a_compile_that_fails_is_remembered_and_the_driver_runs_with_hadoops_classes(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    calls = tmp_path / "calls"
    javac = home / "bin" / "javac"
    javac.write_text(f'#!/bin/sh\necho x >> "{calls}"\necho "error: broken JDK" >&2\nexit 2\n')
    javac.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(home))
    with caplog.at_level(logging.WARNING, logger="stoker.hadoop_local"):
        conf: dict[str, str] = {}
        hadoop_local.add_to(conf, "local[2]")
    assert conf == {}
    assert "broken JDK" in caplog.text
    hadoop_local.add_to(conf, "local[2]")
    assert conf == {} and calls.read_text().split() == ["x"]  # not tried again
    assert not list(cache.glob("*.jar"))


def test_no_javac_no_classes(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jre-only"))
    conf: dict[str, str] = {}
    hadoop_local.add_to(conf, "local[2]")
    assert conf == {}
