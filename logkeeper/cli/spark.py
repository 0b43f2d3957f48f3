"""``logkeeper spark compact|snapshot|stats``: the flags of the PySpark jobs; the jobs
themselves are :mod:`logkeeper.spark_jobs`, imported only when one runs (pyspark is the spark
extra)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "spark",
        help="PySpark jobs over log dirs: compact, snapshot, stats (needs the spark extra)",
        description=(
            "Runs a storagepipeline job on Spark (default local[2]; --master for a cluster, "
            "whose executors must see the same data dirs)."
        ),
    )
    jobs = p.add_subparsers(dest="job", required=True, metavar="JOB")

    def spark_args(
        job: argparse.ArgumentParser, *, several_dirs: bool, dir_required: bool = True
    ) -> None:
        job.add_argument(
            "--dir",
            required=dir_required,
            action="append" if several_dirs else "store",
            type=Path,
            help="data dir" + (" (repeatable: several volumes)" if several_dirs else ""),
        )
        job.add_argument("--topic", action="append", default=[], help="topic (repeatable)")
        job.add_argument("--master", default="local[2]", help="Spark master (default local[2])")

    j = jobs.add_parser(
        "compact",
        help="distributed compaction of a data dir no worker holds, or of a live worker's",
        description=(
            "Kafka's log cleaning, each partition cleaned on one executor by the storage core "
            "cleaner (the offset map as a Spark aggregation for partitions past --map-bytes); "
            "the result is swapped in with the crash-safe protocol. With --dir (no worker may "
            "hold it): topic configs come from --topics (cleanup.policy must include compact); "
            "without --topic, every partition whose declared topic is compacted is cleaned; a "
            "--topic not declared in --topics is compacted with Kafka's defaults. With --worker "
            "URL (its admin port): the worker pauses cleaning of the --topic/--partition "
            "partitions, plans and pins them, the executors (which must see the volume) write "
            "the cleaned segments, and the worker checks and swaps them in while it serves."
        ),
    )
    spark_args(j, several_dirs=False, dir_required=False)
    j.add_argument("--worker", help="a live worker's admin URL, e.g. http://127.0.0.1:8080")
    j.add_argument(
        "--partition", action="append", default=[], help="<topic>-<partition> (with --worker)"
    )
    j.add_argument("--token-file", type=Path, help="the worker's admin token (with --worker)")
    j.add_argument(
        "--map-bytes",
        type=int,
        default=128 << 20,
        help="one executor's offset map (default 128 MiB); partitions past it are aggregated",
    )
    j.add_argument("--topics", type=Path, help="YAML file of Topic manifests (spec.config)")
    j.add_argument("--now-ms", type=int, help="clean as of this epoch-ms time (horizons, lags)")
    j.add_argument("--json", action="store_true", help="print the per-partition stats as JSON")
    j = jobs.add_parser(
        "snapshot",
        help="export the live keys of topics as Parquet or Iceberg; later runs only the changes",
    )
    spark_args(j, several_dirs=True)
    j.add_argument(
        "--topic-pattern", help="topics matching this regex (with or instead of --topic)"
    )
    j.add_argument(
        "--output",
        required=True,
        type=Path,
        help="Parquet: the runs' directory (with a manifest); Iceberg: the default catalog's",
    )
    j.add_argument(
        "--format",
        choices=("parquet", "iceberg"),
        default="parquet",
        help="parquet (default): one table per run; iceberg: every run applied to one table",
    )
    j.add_argument("--table", default="logkeeper.snapshot", help="Iceberg table (namespace.name)")
    j.add_argument(
        "--catalog",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a pyiceberg catalog property (repeat; default: a SQLite catalog in --output)",
    )
    j.add_argument(
        "--allow-data-loss",
        action="store_true",
        help="export from the log start when records since the last run were deleted unseen",
    )
    j = jobs.add_parser("stats", help="per-partition figures: records, keys, tombstones, sizes")
    spark_args(j, several_dirs=True)
    j.add_argument(
        "--topic-pattern", help="topics matching this regex (with or instead of --topic)"
    )
    j.add_argument("--output", type=Path, help="also write the figures as Parquet here")
    j.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=cmd_spark)


def cmd_spark(args: argparse.Namespace) -> int:
    from logkeeper.spark_jobs import run_job

    return run_job(args)
