"""A SparkSession set up for the pipeline, and registration of the ``logkeeper`` format.

Local mode is the embedded default (``local[2]``); on a cluster, pass the master of the cluster
(or use ``spark-submit``, whose session :func:`register` completes). The settings below are the
ones ``../shared/reference/environment.md`` found necessary on this kind of machine.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from storagepipeline.source import LogkeeperDataSource

#: Settings every pipeline session gets (``extra`` may override them).
SESSION_CONFIG = {
    "spark.ui.enabled": "false",
    # The progress bar writes \r lines into stdout, which the CLI's tables share.
    "spark.ui.showConsoleProgress": "false",
    # With option pushdown=true the data source pushes partition/offset/timestamp filters down
    # (Spark refuses a reader that implements pushFilters unless this is on).
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    # Keep shuffle partitions small for per-partition jobs on small machines.
    "spark.sql.shuffle.partitions": "8",
}


def register(spark: SparkSession) -> SparkSession:
    """Register the ``logkeeper`` format with ``spark`` (idempotent) and enable pushdown."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(LogkeeperDataSource)
    return spark


def local_session(
    master: str = "local[2]", app_name: str = "logkeeper", extra: dict[str, str] | None = None
) -> SparkSession:
    """A session whose Python workers run this interpreter (so they import this package)."""
    # Workers otherwise run `python3` from PATH, which may not have the pipeline installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # The hostname may resolve to loopback; Spark then guesses an interface. Stay on loopback.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**SESSION_CONFIG, **(extra or {})}.items():
        builder = builder.config(key, value)
    return register(builder.getOrCreate())
