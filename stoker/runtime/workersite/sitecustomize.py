"""Run by ``site`` at the start of every Python process a stoker driver's Spark JVM starts (its
Python workers, data source planners and streaming source runners): this folder is the last
entry of the JVM's ``PYTHONPATH`` (stoker.runtime.session). Not a module of the stoker package.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and the spark-core jar) first on its Python
processes' path. With PySpark installed from PyPI, ``SPARK_HOME`` is the installed ``pyspark``
package itself and the zip a copy of it, but Python cannot cache bytecode for a zip: every one
of those processes compiled PySpark from source, about half a CPU second each, several times
per driver start (measured in docs/benchmarks.md). When the zip duplicates the installed
package (``SPARK_HOME`` holds its ``__init__.py`` and its parent is on the path), the zip and
the jar are taken off the path and PySpark is imported from the installed package, compiled
once. A Spark distribution's ``SPARK_HOME`` (no ``__init__.py``) is left alone.

The ``sitecustomize`` this one shadows (a later entry of the path, as Debian's) is run after.
"""

import contextlib
import importlib.util
import os
import sys


def _drop_copies() -> None:
    home = os.environ.get("SPARK_HOME")
    if not home or not os.path.isfile(os.path.join(home, "__init__.py")):
        return
    parent = os.path.dirname(os.path.abspath(home))
    if not any(os.path.abspath(p or ".") == parent for p in sys.path):
        return
    lib = os.path.join(os.path.abspath(home), "python", "lib") + os.sep
    jars = os.path.join(os.path.abspath(home), "jars") + os.sep
    sys.path[:] = [
        p
        for p in sys.path
        if not (
            (p.startswith(lib) and os.path.basename(p).startswith("pyspark"))
            or (p.startswith(jars) and p.endswith(".jar"))
        )
    ]


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    seen_here = False
    for entry in list(sys.path):
        folder = os.path.abspath(entry or ".")
        if folder == here:
            seen_here = True
            continue
        candidate = os.path.join(folder, "sitecustomize.py")
        if not seen_here or not os.path.isfile(candidate):
            continue
        spec = importlib.util.spec_from_file_location("sitecustomize", candidate)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
        return


# Never stop a Spark worker from starting over this: at worst it runs as before.
with contextlib.suppress(Exception):
    _drop_copies()
_chain()
