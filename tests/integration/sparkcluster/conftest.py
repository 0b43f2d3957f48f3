"""A Spark standalone cluster (one master, two workers of one core each, on loopback) for the
whole test session, and a driver session on it for this package's tests.

The cluster's JVMs start once per test session; the driver session is package-scoped and
stopped after this package, because one process holds one SparkContext and the pipeline's other
tests start their own local[2] session.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark")  # the spark extra; the README's test command has it

from pyspark import SparkContext  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from storagepipeline import local_session  # noqa: E402
from tests.integration.sparkcluster.standalone import StandaloneCluster  # noqa: E402

#: Each worker offers one core and 1 GiB; each executor takes one core and 512 MiB (the
#: smallest heap Spark accepts is 450 MiB), so the application gets one executor per worker.
EXECUTOR_CONFIG = {
    "spark.executor.cores": "1",
    "spark.executor.memory": "512m",
    "spark.cores.max": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    if shutil.which("java") is None:
        pytest.skip("java not found: the Spark standalone cluster needs a JVM")
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1)
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="package")
def cluster_spark(spark_cluster: StandaloneCluster) -> Iterator[SparkSession]:
    """A driver on the standalone cluster whose two executors have registered."""
    # getOrCreate would hand back another package's live session, ignoring the master.
    assert SparkContext._active_spark_context is None, "another SparkContext is still running"
    session = local_session(spark_cluster.master_url, "logkeeper-cluster-tests", EXECUTOR_CONFIG)
    session.sparkContext.setLogLevel("ERROR")
    assert session.sparkContext.master == spark_cluster.master_url
    yield session
    session.stop()
