"""Issue 8 items 9 and 6: pipeline config set from outside (``stoker run --config``, REST
``"config"``), ``--pipeline`` not ignored, ``status`` showing what the attempt runs with, and an
app that fails after its job FINISHED leaving the error on the attempt.

Real processes: the ``stoker`` CLI, a real ``stoker server`` with its drivers, local Spark.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from stoker.settings import Settings
from tests.support import file_sink_ids, stoker_cmd, wait_for
from tests.support.manager import Manager

pytestmark = pytest.mark.scenario

SPARK = 600.0  # a cold Spark driver on a loaded 2-core machine
QUICK = 120.0

# The config decides what the transform writes: ids >= min_id, plus `shift`.
APP = """\
import sys

import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline({name!r}, config={{"min_id": 0, "shift": 0.0, "label": "x"}})
p.source(sources.generator(total=40, max_rows_per_epoch=20))
p.transform(
    lambda df, ctx: df.where(df.id >= ctx.config["min_id"]).selectExpr(
        f"id + {{int(ctx.config['shift'])}} AS id"
    )
)
p.sink(sinks.files({out!r}))

if __name__ == "__main__":
    stoker.run(p)
    if "--fail-after" in sys.argv:
        raise RuntimeError("boom: the app's own code after stoker.run")
"""


def run_cli(*args: str, cwd: Path, timeout: float = QUICK) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOKER_")}
    return subprocess.run(
        stoker_cmd(*args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def write_app(folder: Path, name: str) -> tuple[Path, Path]:
    out = folder / "out" / name
    app = folder / f"{name}.py"
    app.write_text(APP.format(name=name, out=str(out)))
    return app, out


def config_versions(db: Path, job: str) -> list[tuple[int, dict[str, object]]]:
    with sqlite3.connect(db) as c:
        rows = c.execute(
            "SELECT version, config FROM control_versions WHERE job_id = ? ORDER BY version",
            (job,),
        ).fetchall()
    return [(int(v), json.loads(cfg)) for v, cfg in rows]


@pytest.mark.parametrize(
    ("pair", "field", "words"),
    [
        ("min_idd=3", "config.min_idd", ["declared: label, min_id, shift"]),
        ("min_id=abc", "config.min_id", ["expects integer", "string 'abc'"]),
        ("min_id=2.5", "config.min_id", ["expects integer", "number 2.5"]),
        ("label=7", "config.label", ["expects string", "integer 7"]),
        ("nonsense", "config", ["key=value"]),
    ],
)
def test_a_bad_config_exits_2_naming_the_key_before_anything_is_written(
    tmp_path: Path, pair: str, field: str, words: list[str]
) -> None:
    app, out = write_app(tmp_path, "cfgbad")
    p = run_cli("run", str(app), "--config", pair, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    err = p.stderr.strip().splitlines()[-1]
    assert f"{field}:" in err, err
    for w in words:
        assert w in err, err
    assert not (tmp_path / ".stoker").exists() and not out.exists()


def test_pipeline_naming_another_than_the_file_runs_is_refused(tmp_path: Path) -> None:
    app, out = write_app(tmp_path, "cfgpick")
    p = run_cli("run", str(app), "--pipeline", "other", cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert "--pipeline 'other'" in p.stderr and "'cfgpick'" in p.stderr, p.stderr
    assert not (tmp_path / ".stoker").exists() and not out.exists()


def test_config_from_the_command_line_changes_the_output_and_is_kept_on_restart(
    tmp_path: Path,
) -> None:
    app, out = write_app(tmp_path, "cfglocal")
    p = run_cli(
        "run",
        str(app),
        "--config",
        "min_id=30",
        "--config",
        "shift=100",
        cwd=tmp_path,
        timeout=SPARK,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert sorted(file_sink_ids(out)) == list(range(130, 140))  # ids 30..39, shifted
    db = tmp_path / ".stoker/cfglocal/store.db"
    # Version 0: the declared defaults with the submitted values on top (an int for a float).
    assert config_versions(db, "cfglocal") == [(0, {"min_id": 30, "shift": 100.0, "label": "x"})]

    # The file's defaults change; a restart without --config keeps the submitted values, and
    # `status` shows what the new attempt runs with (its -D, the config it was given).
    app.write_text(app.read_text().replace('"label": "x"', '"label": "y"'))
    p = run_cli(
        "run", str(app), "--restart", "-D", "stoker.trigger=2s", cwd=tmp_path, timeout=SPARK
    )
    assert p.returncode == 0, p.stderr[-3000:]
    versions = config_versions(db, "cfglocal")
    assert versions[-1][1] == {"min_id": 30, "shift": 100.0, "label": "y"}, versions
    st = run_cli(
        "status", "cfglocal", "--state-dir", str(tmp_path / ".stoker/cfglocal"), cwd=tmp_path
    )
    assert st.returncode == 0, st.stderr
    assert "trigger    2s" in st.stdout, st.stdout  # as `stoker config` writes it
    assert "stoker.trigger=2s" in st.stdout, st.stdout
    assert '"min_id": 30' in st.stdout, st.stdout


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[Manager]:
    (tmp_path / "apps").mkdir()
    m = Manager(
        "cfg",
        f"sqlite:///{tmp_path / 'store.db'}",
        tmp_path / "state",
        [tmp_path / "apps"],
        tmp_path / "server.log",
    )
    try:
        m.wait_up()
        yield m
    finally:
        m.proc.terminate()
        m.proc.wait(60)


def test_rest_config_is_checked_part_of_the_spec_and_version_0(
    tmp_path: Path, manager: Manager
) -> None:
    app, out = write_app(tmp_path / "apps", "cfgrest")
    bad = manager.http.post("/v1/jobs", json={"entrypoint": str(app), "config": {"min_id": "ten"}})
    assert bad.status_code == 422, bad.text
    assert "config.min_id" in bad.text and "expects integer" in bad.text, bad.text
    unknown = manager.http.post("/v1/jobs", json={"entrypoint": str(app), "config": {"x": 1}})
    assert unknown.status_code == 422 and "config.x" in unknown.text, unknown.text

    # The id is learned from the file's own stoker.run call; the driver fails after the job
    # FINISHED (the app's code after stoker.run), which is recorded on the attempt.
    body = {"entrypoint": str(app), "config": {"min_id": 35}, "args": ["--fail-after"]}
    r = manager.http.post("/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    assert r.json()["job_id"] == "cfgrest"
    again = manager.http.post("/v1/jobs", json={**body, "config": {"min_id": 36}})
    assert again.status_code == 409, again.text
    # Live with another config: the difference names it. (Ended meanwhile: the job's state.)
    assert "config" in str(again.json().get("difference")) or again.json().get("state"), again.text

    def finished() -> dict[str, object] | None:
        job = manager.http.get("/v1/jobs/cfgrest").json()
        return job if job["state"] in ("FINISHED", "FAILED") else None

    job = wait_for("cfgrest to end", finished, SPARK)
    assert job["state"] == "FINISHED", job
    # The trigger the driver ran with, recorded by it (before: null under a job manager, and
    # `stoker config` said the job had not started yet while it ran).
    assert job["trigger_s"] == Settings().trigger, job
    assert sorted(file_sink_ids(out)) == list(range(35, 40))
    assert config_versions(tmp_path / "store.db", "cfgrest")[0] == (
        0,
        {"min_id": 35, "shift": 0.0, "label": "x"},
    )

    def noted() -> list[dict[str, object]] | None:
        atts = manager.http.get("/v1/jobs/cfgrest/attempts").json()
        return atts if atts and atts[-1].get("error") else None

    atts = wait_for("the late error on the attempt", noted, QUICK)
    assert "boom: the app's own code after stoker.run" in str(atts[-1]["error"])
    st = run_cli("status", "cfgrest", "--server", manager.url, cwd=tmp_path)
    assert "FINISHED" in st.stdout and "boom" in st.stdout, st.stdout + st.stderr
    assert 'config set {"min_id": 35}' in st.stdout, st.stdout


def test_an_omitted_id_that_cannot_be_learned_is_one_422_naming_job_id_once(
    tmp_path: Path, manager: Manager
) -> None:
    app = tmp_path / "apps" / "two.py"
    app.write_text(
        "from stoker import Pipeline, sinks, sources\n"
        "a = Pipeline('a').source(sources.generator(total=1)).sink(sinks.files('o1'))\n"
        "b = Pipeline('b').source(sources.generator(total=1)).sink(sinks.files('o2'))\n"
    )
    r = manager.http.post("/v1/jobs", json={"entrypoint": str(app)})
    assert r.status_code == 422, r.text
    answer = r.json()
    assert answer["field"] == "job_id", answer
    assert "2 module-level pipelines" in r.text, r.text
    assert r.text.count("job_id:") <= 1 and "stoker.errors" not in r.text, r.text
