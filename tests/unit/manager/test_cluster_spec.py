"""The ``cluster`` text of an application: what parses, what is refused and why."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from stoker.errors import InvalidInput
from stoker.manager.clusters import (
    ClusterSpec,
    app_conf,
    machine_memory_mb,
    memory_mb,
    parse_cluster,
    spark_home,
)
from tests.support import REPO


def test_local_is_the_default() -> None:
    assert parse_cluster(None) == ClusterSpec("local")
    assert parse_cluster("local") == ClusterSpec("local")
    assert parse_cluster("  Local ") == ClusterSpec("local")


def test_standalone_defaults_and_settings() -> None:
    assert parse_cluster("standalone") == ClusterSpec("standalone", 2, 1, "1g")
    spec = parse_cluster("standalone: workers=1 ,cores=1, memory=512M")
    assert spec == ClusterSpec("standalone", workers=1, cores=1, memory="512m")
    assert spec.text() == "standalone:workers=1,cores=1,memory=512m"
    assert parse_cluster("standalone:memory=2g").workers == 2


def test_external_and_session() -> None:
    spec = parse_cluster("spark://10.0.0.5:7077")
    assert spec == ClusterSpec("external", master_url="spark://10.0.0.5:7077")
    assert parse_cluster("spark://a.example:7077,b.example:7077").master_url == (
        "spark://a.example:7077,b.example:7077"
    )
    assert parse_cluster("shared_2-a") == ClusterSpec("session", name="shared_2-a")


@pytest.mark.parametrize(
    "text",
    [
        "local",
        "standalone",
        "standalone:workers=1,cores=1,memory=1536m",
        "spark://127.0.0.1:7077",
        "spark://h1:7077,h2:7078",
        "nightly",
    ],
)
def test_text_parses_back_to_the_same_spec(text: str) -> None:
    spec = parse_cluster(text)
    assert parse_cluster(spec.text()) == spec


def _too_many_cores() -> str:
    return f"standalone:cores={(os.cpu_count() or 1) + 1}"


def _too_much_memory() -> str:
    return f"standalone:workers=1,memory={machine_memory_mb() // 1024 + 1}g"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("yarn://rm:8032", "unknown master URL scheme 'yarn'"),
        ("local[2]", "unknown cluster kind 'local[2]'"),
        ("local:workers=2", "local takes no settings"),
        ("kubernetes:workers=2", "unknown cluster kind 'kubernetes'"),
        ("two words", "unknown cluster kind 'two words'"),
        ("standalone:nodes=2", "unknown standalone setting 'nodes'"),
        ("standalone:workers", "'workers' is not key=value"),
        ("standalone:", "'' is not key=value"),
        ("standalone:workers=2,workers=3", "'workers' is given twice"),
        ("standalone:workers=0", "workers=0: a cluster needs at least 1 worker"),
        ("standalone:workers=-1", "workers='-1' is not a whole number"),
        ("standalone:workers=two", "workers='two' is not a whole number"),
        ("standalone:workers=300,memory=512m", "workers=300 is above 253"),
        ("standalone:cores=0", "cores=0: a worker needs at least 1 core"),
        (_too_many_cores(), "CPUs"),
        ("standalone:memory=lots", "memory 'lots' is not a size like 512m or 2g"),
        ("standalone:memory=1024", "memory '1024' is not a size"),
        ("standalone:memory=1.5g", "memory '1.5g' is not a size"),
        ("standalone:memory=256m", "memory=256m is below 512m"),
        (_too_much_memory(), "above this machine's memory"),
        ("spark://", "'' is not host:port"),
        ("spark://master", "'master' is not host:port"),
        ("spark://:7077", "':7077' is not host:port"),
        ("spark://master:99999", "port 99999 is not in 1..65535"),
        ("spark://master:7077/path", "is not host:port"),
    ],
)
def test_bad_specs_are_refused_naming_the_problem(text: str, problem: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_cluster(text)
    assert caught.value.field == "cluster"
    assert problem in caught.value.message


def test_a_spec_that_is_not_text_is_refused() -> None:
    with pytest.raises(InvalidInput, match="must be text"):
        parse_cluster(2)  # type: ignore[arg-type]


def test_memory_sizes() -> None:
    assert memory_mb("512m") == 512
    assert memory_mb("2G") == 2048
    assert memory_mb("2gb") == 2048
    assert memory_mb("1t") == 1024 * 1024
    assert memory_mb("2048k") == 2


def test_app_conf_fits_executors_to_the_workers() -> None:
    conf = app_conf(parse_cluster("standalone:workers=2,cores=1,memory=512m"))
    assert conf["spark.executor.memory"] == "512m"
    assert conf["spark.executor.cores"] == "1"
    assert conf["spark.decommission.enabled"] == "true"
    assert conf["spark.storage.decommission.enabled"] == "true"


def test_spark_home_is_found_without_importing_pyspark() -> None:
    assert (spark_home() / "bin" / "spark-class").is_file()
    code = (
        "import sys\n"
        "from stoker.manager.clusters import spark_home\n"
        "home = spark_home()\n"
        "assert (home / 'bin' / 'spark-class').is_file(), home\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('pyspark'))\n"
        "assert not loaded, loaded[:5]\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
