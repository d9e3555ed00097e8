"""Conf that runs or loads code when Spark starts is refused under a job manager unless its
operator allows it (issue 22, item 3: spark.driver.extraJavaOptions=-XX:OnOutOfMemoryError=...
ran a command outside --allow-dir). A real SQLite store and JobManager; nothing runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from stoker.errors import InvalidInput
from stoker.manager import JobManager
from stoker.store import open_store

REFUSED = {
    "spark.driver.extraJavaOptions": '-Xss16m -XX:OnOutOfMemoryError="id > /tmp/pwned"',
    "spark.executor.extraJavaOptions": "-javaagent:/tmp/a.jar",
    "spark.jars": "/tmp/evil.jar",
    "spark.jars.packages": "org.evil:evil:1.0",
    "spark.driver.extraClassPath": "/tmp",
    "spark.plugins": "org.evil.Plugin",
    "spark.submit.pyFiles": "/tmp/x.py",
    "spark.executorEnv.LD_PRELOAD": "/tmp/evil.so",
    "spark.pyspark.python": "/tmp/evil",
}


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_code_running_conf_is_refused_naming_the_key_unless_allowed(
    key: str, tmp_path: Path
) -> None:
    app = tmp_path / "apps" / "app.py"
    app.parent.mkdir()
    app.write_text("print('never run here')\n")
    strict = JobManager(open_store(f"sqlite:///{tmp_path / 's.db'}"), tmp_path, [app.parent])
    lenient = JobManager(
        open_store(f"sqlite:///{tmp_path / 'l.db'}"),
        tmp_path,
        [app.parent],
        allowed_conf=(key.rsplit(".", 1)[0],),
    )
    try:
        with pytest.raises(InvalidInput) as refused:
            strict.submit("j", str(app), conf={key: REFUSED[key]})
        assert refused.value.field == f"conf.{key}"
        assert "--allow-conf" in refused.value.message
        assert strict.list_jobs() == []  # nothing made
        with pytest.raises(InvalidInput) as refused_app:
            strict.submit_application("a", str(app), conf={key: REFUSED[key]})
        assert refused_app.value.field == f"conf.{key}"
        # The operator allowed the prefix: taken (a job is made; its driver is not run here).
        assert lenient.submit("j", str(app), conf={key: REFUSED[key]}).outcome == "created"
    finally:
        for m in (strict, lenient):
            m.close()
            m.store.close()


def test_plain_jvm_options_stay_allowed(tmp_path: Path) -> None:
    app = tmp_path / "apps" / "app.py"
    app.parent.mkdir()
    app.write_text("")
    m = JobManager(open_store(f"sqlite:///{tmp_path / 's.db'}"), tmp_path, [app.parent])
    try:
        opts = "-Xss16m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dfoo=bar"
        res = m.submit("j", str(app), conf={"spark.driver.extraJavaOptions": opts})
        assert res.outcome == "created"
    finally:
        m.close()
        m.store.close()
