"""Append and read-by-offset throughput of the storage core, as ratios of plain file I/O.

    .venv/bin/python benchmarks/bench_log.py [--mib 256] [--batch-kib 16]

Measured in one run on the same bytes (this machine is shared and noisy: compare ratios, not
absolute figures):

* append: ``Log.append`` of pre-built 16 KiB batches (as stored: uncompressed, then lz4 holding
  about 5x that in records, as a Kafka producer's ``batch.size`` gives) into a log
  directory, versus writing the same bytes to one plain file in the same chunks. Neither side
  fsyncs per append (Kafka does not either; durability comes from flush and recovery), and both
  end with one fsync so the comparison includes getting the data to disk.
* read: ``Log.read`` by offset from the start to the end in 1 MiB fetches, each starting where
  the previous one's last complete batch ended (``FetchResult.next_offset``), versus reading
  the same file sequentially in 1 MiB chunks (page cache warm for both).

Targets (issue 2): append >= 0.7 and read >= 0.8 of the plain operation.

The "(floor)" row is a reference, not a target: per batch only a copy, the native validation
and a ``pwrite``, without segments, indexes, roll decisions or bookkeeping. It shows how much
of the plain write's speed any append that validates as Kafka does can keep here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from storagecore import Compression, LogConfig, LogManager, NewRecord, TopicPartition, build_batch
from storagecore.records import scan
from storagecore.records.crc import crc32c
from storagecore.records.scan import validate_uncompressed


def make_batches(total_bytes: int, batch_bytes: int, codec: Compression) -> list[bytes]:
    """Batches of about ``batch_bytes`` each *as stored* (after compression), like a Kafka
    producer's ``batch.size``, which bounds the compressed batch: an lz4 batch of 16 KiB carries
    several times that in records. Records are 100-byte JSON-ish values with 13-byte keys."""

    def build(first: int, count: int) -> bytes:
        records = [
            NewRecord(
                key=b"user-%08d" % ((first + j) % 100_000),
                value=b'{"event":"click","page":"/p/%06d","amount":%05d,"s":"%s"}'
                % ((first + j) % 9973, (first + j) % 50_000, b"x" * 30),
                timestamp=1_700_000_000_000 + first + j,
            )
            for j in range(count)
        ]
        return build_batch(records, compression=codec)

    # Records per batch: scale a trial batch to the target stored size.
    trial = 256
    per_batch = max(1, int(trial * batch_bytes / len(build(0, trial))))
    batches: list[bytes] = []
    size = 0
    first = 0
    while size < total_bytes:
        data = build(first, per_batch)
        batches.append(data)
        size += len(data)
        first += per_batch
    return batches


def best_of_interleaved(
    runs: int, plain: Callable[[], None], log: Callable[[], None]
) -> tuple[float, float]:
    """Best time of each side, the runs alternating (plain, log, plain, log, ...) so that a
    noisy stretch of the shared machine hits both sides alike."""
    plain_times, log_times = [], []
    for _ in range(runs):
        for fn, times in ((plain, plain_times), (log, log_times)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return min(plain_times), min(log_times)


def plain_write(root: Path, batches: list[bytes]) -> None:
    """The baseline of the append measurements: the same bytes, the same chunks, one fsync."""
    path = root / "plain.bin"
    with path.open("wb", buffering=0) as handle:
        for data in batches:
            handle.write(data)
        os.fsync(handle.fileno())
    path.unlink()


def bench_append(root: Path, batches: list[bytes], runs: int) -> tuple[float, float]:
    total = sum(len(b) for b in batches)

    def plain() -> None:
        plain_write(root, batches)

    def log_append() -> None:
        directory = root / "logdir"
        manager = LogManager([directory], default_config=LogConfig())
        log = manager.get_or_create_log(TopicPartition("bench", 0))
        append = log.append
        for data in batches:
            append(data)
        log.flush()
        manager.shutdown()
        shutil.rmtree(directory)

    plain_s, log_s = best_of_interleaved(runs, plain, log_append)
    return total / plain_s, total / log_s


def bench_append_floor(root: Path, batches: list[bytes], runs: int) -> tuple[float, float]:
    """Reference, not a target: the least any validating append can do per batch (copy, the
    native validation of every batch, ``pwrite``), without segments, indexes or bookkeeping."""
    total = sum(len(b) for b in batches)
    if validate_uncompressed is None:
        return float("nan"), float("nan")  # no native module: no floor to show
    validate = validate_uncompressed

    def plain() -> None:
        plain_write(root, batches)

    def floor() -> None:
        path = root / "floor.bin"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        position, next_offset = 0, 0
        for data in batches:
            out = bytearray(data)
            result = validate(
                out, next_offset, 0, True, False, False, 1 << 30, 0, 2**63 - 1, 2**63 - 1, crc32c
            )
            assert result is not None
            os.pwrite(fd, out, position)
            position += len(out)
            next_offset = result[1] + 1
        os.fsync(fd)
        os.close(fd)
        path.unlink()

    plain_s, floor_s = best_of_interleaved(runs, plain, floor)
    return total / plain_s, total / floor_s


def bench_read(root: Path, batches: list[bytes], runs: int) -> tuple[float, float]:
    directory = root / "readdir"
    manager = LogManager([directory], default_config=LogConfig())
    log = manager.get_or_create_log(TopicPartition("bench", 0))
    for data in batches:
        log.append(data)
    log.flush()
    end = log.log_end_offset
    path = log.active_segment.log.path
    total = path.stat().st_size
    fetch = 1 << 20

    def plain() -> None:
        with path.open("rb", buffering=0) as handle:
            while handle.read(fetch):
                pass

    def log_read() -> None:
        offset = 0
        read = log.read
        while offset < end:
            offset = read(offset, fetch).next_offset

    plain_s, log_s = best_of_interleaved(runs, plain, log_read)
    manager.shutdown()
    shutil.rmtree(directory)
    return total / plain_s, total / log_s


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=256, help="bytes appended per run (MiB)")
    parser.add_argument(
        "--batch-kib", type=int, default=16, help="batch size (KiB, before compression)"
    )
    parser.add_argument("--runs", type=int, default=5, help="best of N runs per measurement")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="logkeeper-bench-", dir=os.environ.get("BENCH_DIR")))
    print(
        f"record scan implementation: {scan.IMPLEMENTATION}; {args.mib} MiB stored per run, "
        f"{args.batch_kib} KiB batches, best of {args.runs}"
    )
    results: list[tuple[str, float, float, float | None]] = []
    try:
        for codec in (Compression.NONE, Compression.LZ4):
            batches = make_batches(args.mib << 20, args.batch_kib << 10, codec)
            plain, log = bench_append(root, batches, args.runs)
            results.append((f"append {codec.config_name}", plain, log, 0.7))
            if codec is Compression.NONE:
                plain, floor = bench_append_floor(root, batches, args.runs)
                results.append(("  (floor, see doc)", plain, floor, None))
        batches = make_batches(args.mib << 20, args.batch_kib << 10, Compression.NONE)
        plain, log = bench_read(root, batches, args.runs)
        results.append(("read by offset", plain, log, 0.8))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'operation':<18}{'plain MB/s':>12}{'log MB/s':>12}{'ratio':>8}{'target':>8}")
    for name, plain, log, target in results:
        ratio = log / plain
        if target is None:
            verdict, shown = "", "-"
        else:
            verdict, shown = ("  ok" if ratio >= target else "  BELOW TARGET"), f"{target:.2f}"
        print(f"{name:<18}{plain / 1e6:>12.0f}{log / 1e6:>12.0f}{ratio:>8.2f}{shown:>8}{verdict}")


if __name__ == "__main__":
    main()
