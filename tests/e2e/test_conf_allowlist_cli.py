"""``stoker run --server`` with a conf key off the job manager's allow-list: exit 2 with the
key and the ``--allow-conf`` that would let it through, and no job made; the same key passes
on a manager started with ``--allow-conf`` (issue 39 item 9). A real ``stoker server``,
no Spark (the allowed job is cancelled before it matters)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO, stoker_cmd
from tests.support.manager import one_manager

pytestmark = pytest.mark.timeout(300)

APP = """\
from stoker import Pipeline, sinks, sources

p = Pipeline("allowlist")
p.source(sources.generator(rows_per_second=1))
p.sink(sinks.files({out!r}))
"""


def _run(url: str, app: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOKER_")}
    return subprocess.run(
        stoker_cmd("run", str(app), "--server", url, "--detached", *args),
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_cli_says_which_key_and_how_to_allow_it(tmp_path: Path) -> None:
    for root in ("a", "b"):  # each manager's allowed folder: <root>/apps
        (tmp_path / root / "apps").mkdir(parents=True)
        (tmp_path / root / "apps" / "allowlist.py").write_text(APP.format(out=str(tmp_path)))
    app = tmp_path / "a" / "apps" / "allowlist.py"
    marker = tmp_path / "pwned"
    bad = f'spark.driver.extraJavaOptions=-XX:"OnOutOfMemoryError=touch {marker}"'
    with one_manager(tmp_path / "a", "strict") as m:
        for d in (bad, "spark.python.daemon.module=evil"):
            key = d.split("=", 1)[0]
            done = _run(m.url, app, "-D", d, "-D", "stoker.master=local[1]")
            assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
            assert f"conf.{key}" in done.stderr and "--allow-conf" in done.stderr, done.stderr
        assert m.http.get("/v1/jobs").json() == []
    with one_manager(
        tmp_path / "b", "lenient", extra_args=["--allow-conf", "spark.python.daemon.module"]
    ) as m:
        app = tmp_path / "b" / "apps" / "allowlist.py"
        done = _run(m.url, app, "-D", "spark.python.daemon.module=pyspark.daemon")
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert [j["job_id"] for j in m.http.get("/v1/jobs").json()] == ["allowlist"]
        m.http.post("/v1/jobs/allowlist/cancel")
    assert not marker.exists()
