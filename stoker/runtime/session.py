"""The SparkSession of a driver, with stoker's sources registered."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stoker.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Chosen for a job manager's drivers, each overridable with -D spark.<key>=...
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    # query.stop() during a Python foreachBatch can overflow the default stack (SPARK_FACTS).
    "spark.driver.extraJavaOptions": "-Xss16m",
    "spark.sql.streaming.stopTimeout": "30s",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # The Python data source runners connect back to the JVM; on a loaded machine the default
    # socket timeout was seen to expire.
    "spark.python.authenticate.socketTimeout": "120s",
}


def get_session(settings: Settings, app_name: str) -> SparkSession:
    """Create (or reuse) the session for ``settings`` and register stoker's data sources."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name).master(settings.master)
    conf = {**DEFAULT_CONF, **settings.spark_conf}
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    register_sources(spark)
    return spark


def register_sources(spark: SparkSession) -> None:
    from stoker.sources.files import FilesDataSource
    from stoker.sources.generator import GeneratorDataSource

    spark.dataSource.register(GeneratorDataSource)
    spark.dataSource.register(FilesDataSource)
