"""The Spark pipeline: data source read rate, and the ``compact`` job on local[1] vs local[2]
beside the storage core cleaner on the same log.

    .venv/bin/python benchmarks/bench_pipeline.py [--records 400000] [--keys 50000]

A compacted topic of 4 partitions is written through storagecore (16-byte keys, 100-byte values,
lz4, 1 MiB segments, ``--keys`` distinct keys). Then, each timed in this run:

1. the data source reads every record (``sum(length(value))``, so every column is decoded):
   rows/s and MB/s of key+value bytes, on local[2] (one warm-up read first);
2. ``compact`` on a fresh copy with local[1], then with local[2]: records read per second, and
   the local[2] / local[1] scaling ratio;
3. the storage core cleaner (``LogCleaner.clean_until_done``, one thread, 128 MiB buffer) on a
   fresh copy: records read per second, and compact(local[2]) / core as a ratio.

Ratios, not absolute targets: this machine is shared and noisy. Spark's own start-up is not
counted (sessions are started before the clocks run); its per-job scheduling is.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812

from storagecore import (
    Compression,
    LogConfig,
    LogManager,
    ManualClock,
    NewRecord,
    TopicPartition,
    build_batch,
)
from storagecore.cleaner.log_cleaner import LogCleaner
from storagecore.config import CleanerConfig
from storagepipeline import local_session
from storagepipeline.compact import compact

TOPIC = "bench"
PARTITIONS = 4
NOW_MS = 1_800_000_000_000
CONFIG = LogConfig.from_topic_config(
    {"cleanup.policy": "compact", "segment.bytes": 1 << 20, "delete.retention.ms": 0}
)


def build(data_dir: Path, records: int, keys: int) -> int:
    rng = random.Random(1)
    value = bytes(rng.randrange(256) for _ in range(100))
    per_partition = records // PARTITIONS
    with LogManager([data_dir], config_for={TOPIC: CONFIG}, clock=ManualClock(NOW_MS)) as manager:
        for partition in range(PARTITIONS):
            log = manager.get_or_create_log(TopicPartition(TOPIC, partition), CONFIG)
            for start in range(0, per_partition, 500):
                log.append(
                    build_batch(
                        [
                            NewRecord(
                                key=f"{rng.randrange(keys):016d}".encode(),
                                value=value,
                                timestamp=NOW_MS - 10_000,
                            )
                            for _ in range(min(500, per_partition - start))
                        ],
                        compression=Compression.LZ4,
                    )
                )
    return per_partition * PARTITIONS


def fresh_copy(source: Path, target: Path) -> Path:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    (target / ".lock").unlink(missing_ok=True)
    return target


def timed_compact(spark: SparkSession, data_dir: Path) -> tuple[float, int]:
    start = time.perf_counter()
    results = compact(spark, str(data_dir), topics=[TOPIC], configs={TOPIC: CONFIG}, now_ms=NOW_MS)
    elapsed = time.perf_counter() - start
    return elapsed, sum(r.stats["messages_read"] for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--keys", type=int, default=50_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lk-bench-pipeline-") as tmp:
        root = Path(tmp)
        source = root / "source"
        total = build(source, args.records, args.keys)
        payload_mb = total * (16 + 100) / 1e6
        print(f"log: {total} records ({payload_mb:.1f} MB of keys+values), {args.keys} keys")

        spark = local_session("local[2]", "bench-read")
        spark.sparkContext.setLogLevel("ERROR")

        def read_once() -> float:
            start = time.perf_counter()
            df = spark.read.format("logkeeper").option("path", str(source)).option("topic", TOPIC)
            row = df.load().agg(F.sum(F.length("value")), F.count("key")).first()
            elapsed = time.perf_counter() - start
            assert row is not None and row[1] == total, row
            return elapsed

        read_once()  # warm-up: Python workers started, JIT warmed
        read_s = read_once()
        print(
            f"read (local[2]):    {total / read_s:>12,.0f} rows/s  {payload_mb / read_s:7.1f} MB/s"
        )
        two_s, two_records = timed_compact(spark, fresh_copy(source, root / "two"))
        spark.stop()

        spark = local_session("local[1]", "bench-compact-1")
        spark.sparkContext.setLogLevel("ERROR")
        timed_compact(spark, fresh_copy(source, root / "warm"))  # warm-up
        one_s, one_records = timed_compact(spark, fresh_copy(source, root / "one"))
        spark.stop()

        clock = ManualClock(NOW_MS)
        core_dir = fresh_copy(source, root / "core")
        with LogManager([core_dir], config_for={TOPIC: CONFIG}, clock=clock) as manager:
            cleaner = LogCleaner(manager, CleanerConfig(), clock=clock)
            start = time.perf_counter()
            rounds = cleaner.clean_until_done()
            core_s = time.perf_counter() - start
        core_records = sum(r.messages_read for r in rounds)

        print(f"compact local[1]:   {one_records / one_s:>12,.0f} records/s  ({one_s:.1f} s)")
        print(f"compact local[2]:   {two_records / two_s:>12,.0f} records/s  ({two_s:.1f} s)")
        print(f"core cleaner:       {core_records / core_s:>12,.0f} records/s  ({core_s:.1f} s)")
        print(f"ratio local[2] / local[1]: {one_s / two_s:.2f}")
        print(f"ratio compact local[2] / core cleaner: {core_s / two_s:.2f}")


if __name__ == "__main__":
    main()
