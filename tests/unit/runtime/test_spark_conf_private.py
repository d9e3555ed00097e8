"""The Spark conf a driver starts with keeps a local driver on loopback and gives Hadoop the
process's umask (issue 39 item 9); a driver on a cluster master and a user's own setting are
left alone. The end-to-end check on a real driver: tests/e2e/test_local_driver_private.py."""

from __future__ import annotations

import os

from stoker.runtime.session import UMASK_KEY, process_umask, spark_conf
from stoker.settings import Settings


def test_a_local_driver_binds_to_loopback_unless_told_otherwise() -> None:
    for master in ("local[*]", "local[2]", "local"):
        conf = spark_conf(Settings().with_overrides({"stoker.master": master}))
        assert conf["spark.driver.bindAddress"] == conf["spark.driver.host"] == "127.0.0.1"
    on_cluster = spark_conf(Settings().with_overrides({"spark.master": "spark://h:7077"}))
    assert "spark.driver.bindAddress" not in on_cluster
    assert "spark.driver.host" not in on_cluster
    own = spark_conf(Settings().with_overrides({"spark.driver.bindAddress": "0.0.0.0"}))
    assert own["spark.driver.bindAddress"] == "0.0.0.0"


def test_hadoop_writes_with_the_process_umask() -> None:
    before = os.umask(0o077)
    try:
        assert process_umask() == 0o077
        assert spark_conf(Settings())[UMASK_KEY] == "077"
        os.umask(0o022)
        assert spark_conf(Settings())[UMASK_KEY] == "022"
        given = Settings().with_overrides({UMASK_KEY: "027"})
        assert spark_conf(given)[UMASK_KEY] == "027"
    finally:
        os.umask(before)
