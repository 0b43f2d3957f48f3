"""storagepipeline: topic logs on Spark — a data source, bulk writes, compaction, snapshot, stats.

What belongs here: the ``logkeeper`` Python data source (read and write), the ``compact``,
``snapshot`` and ``stats`` jobs, and the session helper. What must not: the worker, the operator
or the CLI (import-linter enforces it); only storagecore and pyspark (with pyarrow). Log dirs are
read without locks; the only thing a read writes into a data dir is its pin set (hard links,
storagecore.pins). Anything that changes a log (offline writes, ``compact``) takes the
data dir's lock, so it runs only where no worker holds the dir; on a served volume ``compact``
asks the worker to swap (:mod:`storagepipeline.online_compact`).
"""

from storagepipeline.logdirs import CorruptDataError, DataLossError, PipelineError
from storagepipeline.reading import read_skip_report
from storagepipeline.session import local_session, register
from storagepipeline.source import SCHEMA, LogkeeperDataSource

__all__ = [
    "SCHEMA",
    "CorruptDataError",
    "DataLossError",
    "LogkeeperDataSource",
    "PipelineError",
    "local_session",
    "read_skip_report",
    "register",
]
