"""The tests' in-process SparkSession (behind the ``spark`` fixture of tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# A loaded machine (other Spark drivers run beside the suite) can delay the Python data source
# runner's connection back to the JVM past the 15 s default.
SESSION_CONF = {"spark.python.authenticate.socketTimeout": "120s"}


def local_session(master: str, app_name: str) -> Iterator[SparkSession]:
    """A local SparkSession made by stoker's own ``get_session`` (stoker's data sources
    registered, as a driver has them), stopped when the generator is closed."""
    from stoker.runtime.session import get_session
    from stoker.settings import Settings

    session = get_session(Settings(master=master, spark_conf=dict(SESSION_CONF)), app_name)
    try:
        yield session
    finally:
        session.stop()
