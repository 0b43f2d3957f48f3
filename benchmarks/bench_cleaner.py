"""Cleaner throughput on a standard log, as a ratio of a plain copy of the same bytes.

    .venv/bin/python benchmarks/bench_cleaner.py [--records 1000000] [--keys 100000]

The log (issue 3's standard): ``--records`` records with 16-byte keys drawn from ``--keys``
distinct keys and 100-byte values, in batches of 100 records, uncompressed and lz4. One
cleaning round over the whole log (map of 128 MiB, one thread), measured in one run against a
plain copy of the same files (read 1 MiB chunks, write, one fsync each side). Printed: records/s
and MB/s of the clean, the ratio to the copy, and the peak of traced allocations (tracemalloc)
of a separate, smaller run (tracing slows Python down, so it is not timed).

Target for now (issue 3): >= 1M records/s per cleaner thread, uncompressed. The first line
printed says which implementation of the per-record work ran (``c``: the native path of
storagecore.cleaner._native; ``python`` with STORAGECORE_NO_EXTENSIONS=1).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path

from storagecore import Compression, LogConfig, LogManager, NewRecord, TopicPartition, build_batch
from storagecore.cleaner import Cleaner, CleanRequest
from storagecore.cleaner.offset_map import IMPLEMENTATION, SkimpyOffsetMap

TP = TopicPartition("bench", 0)
BATCH_RECORDS = 100


def build_log(root: Path, records: int, keys: int, codec: Compression) -> LogManager:
    config = LogConfig(cleanup_policy=("compact",), segment_bytes=64 << 20)
    manager = LogManager([root], default_config=config)
    log = manager.get_or_create_log(TP)
    rng = random.Random(7)
    value = bytes(range(100))
    for first in range(0, records, BATCH_RECORDS):
        log.append(
            build_batch(
                [
                    NewRecord(key=b"key-%012d" % rng.randrange(keys), value=value, timestamp=first)
                    for _ in range(min(BATCH_RECORDS, records - first))
                ],
                compression=codec,
            )
        )
    log.roll()
    log.flush()
    return manager


def plain_copy(source: Path, target: Path) -> float:
    start = time.perf_counter()
    target.mkdir()
    for path in sorted(source.glob("*.log")):
        with open(path, "rb") as src, open(target / path.name, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
            dst.flush()
            os.fsync(dst.fileno())
    return time.perf_counter() - start


def clean_once(manager: LogManager, map_bytes: int) -> tuple[float, int, int]:
    log = manager.get_log(TP)
    cleaner = Cleaner(offset_map=SkimpyOffsetMap(map_bytes))
    start = time.perf_counter()
    stats = cleaner.clean(CleanRequest(log, 0, log.active_segment.base_offset))
    elapsed = time.perf_counter() - start
    return elapsed, stats.messages_read, stats.bytes_read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    args = parser.parse_args()
    print(
        f"cleaner record work: {IMPLEMENTATION}; {args.records} records, {args.keys} distinct "
        "16-byte keys, 100-byte values"
    )
    print(f"{'codec':6} {'records/s':>11} {'MB/s':>8} {'copy MB/s':>10} {'ratio':>6}")
    for codec in (Compression.NONE, Compression.LZ4):
        root = Path(tempfile.mkdtemp(prefix="bench-cleaner-"))
        try:
            manager = build_log(root / "data", args.records, args.keys, codec)
            copy_s = plain_copy(root / "data" / "bench-0", root / "copy")
            clean_s, messages, nbytes = clean_once(manager, 128 << 20)
            manager.shutdown()
            mib = nbytes / (1 << 20)
            print(
                f"{codec.config_name:6} {messages / clean_s:11.0f} {mib / clean_s:8.1f} "
                f"{mib / copy_s:10.1f} {copy_s / clean_s:6.3f}"
            )
        finally:
            shutil.rmtree(root, ignore_errors=True)
    # Peak memory on a smaller log: the map dominates; the rest is one read chunk and a batch.
    root = Path(tempfile.mkdtemp(prefix="bench-cleaner-mem-"))
    try:
        manager = build_log(root / "data", 100_000, 10_000, Compression.NONE)
        map_bytes = 8 << 20
        tracemalloc.start()
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        clean_once(manager, map_bytes)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        manager.shutdown()
        used, rest = (peak - base) / (1 << 20), (peak - base - map_bytes) / (1 << 20)
        print(
            f"peak traced memory of a clean with an {map_bytes >> 20} MiB map: "
            f"{used:.1f} MiB (map + {rest:.1f} MiB)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
