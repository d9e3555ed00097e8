"""stoker's worker site (stoker/runtime/workersite/sitecustomize.py) in real Python processes
started as Spark starts its Python workers: ``SPARK_HOME`` set, PySpark's zip and the
spark-core jar first on ``PYTHONPATH``, the worker site last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyspark

from stoker.runtime.session import WORKER_SITE

HOME = Path(pyspark.__file__).resolve().parent  # a PyPI install: SPARK_HOME is the package
ZIPS = sorted(str(p) for p in (HOME / "python" / "lib").glob("*.zip"))
JARS = sorted(str(p) for p in (HOME / "jars").glob("spark-core_*.jar"))
PROBE = "import json, sys, pyspark; print(json.dumps([pyspark.__file__, sys.path]))"


def _worker(home: Path, *extra: str) -> tuple[str, list[str]]:
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "PYTHONPATH": os.pathsep.join([*ZIPS, *JARS, *extra, str(WORKER_SITE)]),
    }
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    ).stdout
    found, path = json.loads(out.splitlines()[-1])
    return found, path


def test_a_pypi_pyspark_is_imported_from_the_package_not_its_zip() -> None:
    assert ZIPS and any("pyspark.zip" in z for z in ZIPS)
    found, path = _worker(HOME)
    assert found == pyspark.__file__
    assert not [p for p in path if p.endswith("pyspark.zip") or p in JARS]
    assert [z for z in ZIPS if "py4j" in z] == [p for p in path if "py4j" in p and ".zip" in p]


def test_a_spark_distributions_path_is_left_as_spark_made_it(tmp_path: Path) -> None:
    """A SPARK_HOME that is not the installed package (a Spark distribution): its zip may be
    the only PySpark there is; nothing is taken off."""
    dist = tmp_path / "spark-4.3.0-bin"
    (dist / "python" / "lib").mkdir(parents=True)
    zips = [str(dist / "python" / "lib" / "pyspark.zip")]
    env = {
        **os.environ,
        "SPARK_HOME": str(dist),
        "PYTHONPATH": os.pathsep.join([*zips, str(WORKER_SITE)]),
    }
    probe = "import json, sys; print(json.dumps(sys.path))"
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert zips[0] in json.loads(out.splitlines()[-1])


def test_the_sitecustomize_it_shadows_still_runs(tmp_path: Path) -> None:
    theirs = tmp_path / "later"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = '1'\n")
    env = {
        **os.environ,
        "SPARK_HOME": str(HOME),
        "PYTHONPATH": os.pathsep.join([*ZIPS, str(WORKER_SITE), str(theirs)]),
    }
    out = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('THEIRS_RAN'))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "1"
