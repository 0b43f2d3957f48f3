"""Append and read-by-offset throughput of the storage core, as ratios of plain file I/O, beside
Kafka's own leader append on the same batches.

    .venv/bin/python benchmarks/bench_log.py [--mib 256] [--batch-kib 16] [--lz4-batch-kib 37]
        [--runs 5] [--no-kafka] [--no-callgrind]

Measured in one run on the same bytes (this machine is shared and noisy: compare ratios, not
absolute figures):

* append: ``Log.append`` of pre-built batches, sized as stored (a Kafka producer's
  ``batch.size`` bounds the compressed batch): 16 KiB uncompressed, 37 KiB lz4 (about 37 KB,
  the issue's standard, holding about 5x that in records), into a log directory, versus
  writing the same bytes to one plain file in the same chunks. Neither side fsyncs per append
  (Kafka does not either; durability comes from flush and recovery), and both end with one
  fsync so the comparison includes getting the data to disk. Timed as Kafka's harness times
  its two sides: creating the file (ours: the partition's log, its directory, segment and
  indexes, through a LogManager made before the timer), the appends, the flush; deleting the
  files after each run is not timed on any side (it was until 2026-11-27, on our two sides
  only: the plain file's unlink, and the log manager's start-up, shutdown and deletion, 30-50
  ms a run, about 5% of a 256 MiB append).
* Kafka's append: the same batches, written to a file, given to the Java harness in
  ``kafka_anchor/`` (Kafka 4.3.1's classes): per batch what the leader does (base offset and
  size checks, the batch CRC, Kafka's own ``LogValidator``: every record iterated and checked,
  lz4 decompressed, offsets and leader epoch set in place), then ``FileRecords.append``; one
  flush at the end; versus a plain ``FileChannel.write`` of the same buffers in the same JVM,
  alternating, warm JIT, best of ``--runs``. Its ratio is Kafka's share of its own plain write.
* rounds (``--rounds``, default 3): the two append measurements above, ours then Kafka's, are
  repeated; each round gives each side's ratio (printed, ours/Kafka), and a row shows the round
  of our median ratio beside Kafka's median ratio. Both ratios move by 0.1-0.2 from one run to
  the next on this shared machine (Kafka's 0.55-0.74 in the runs of 2026-11-27), more than the
  difference being judged: one round per side decided the verdict by chance, medians over
  rounds that alternate in time do not;
* read: ``Log.read`` by offset from the start to the end in 1 MiB fetches, each starting where
  the previous one's last complete batch ended (``FetchResult.next_offset``), versus reading
  the same file sequentially in 1 MiB chunks (page cache warm for both).
* instructions per record of ``Log.append`` under ``valgrind --tool=callgrind`` (unless
  ``--no-callgrind``): a Python process appends ``--callgrind-mib`` MiB of the same batches to a
  fresh log; a second one does the same without the appends (start-up, imports, loading the
  batches, opening the log); the difference of the instruction totals over the records. Stable
  from run to run, unlike the timings.

Targets: append: our median ratio >= Kafka's median ratio on the same batches (issue 2's first
target was 0.7 of the plain write); read >= 0.8 of the plain read. Printed with ok/BELOW, never
asserted.

The "(floor)" row is a reference, not a target: per batch only a copy, the native validation
and a ``pwrite``, without segments, indexes, roll decisions or bookkeeping. It shows how much
of the plain write's speed any append that validates as Kafka does can keep here. (``Log.append``
itself no longer copies: its native append writes rewritten headers and the request's records
with one ``pwritev``, so it can come above this row.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import kafka_anchor
from callgrind import callgrind_total

from storagecore import Compression, LogConfig, LogManager, NewRecord, TopicPartition, build_batch
from storagecore.records import layout, scan
from storagecore.records.scan import validate_uncompressed

INT32 = struct.Struct(">i")


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
    runs: int, plain: Callable[[], float], log: Callable[[], float]
) -> tuple[float, float]:
    """Best time of each side, the runs alternating (plain, log, plain, log, ...) so that a
    noisy stretch of the shared machine hits both sides alike. Each side returns the seconds of
    its own timed region (what it leaves out, such as deleting its files, is untimed)."""
    plain_times: list[float] = []
    log_times: list[float] = []
    for _ in range(runs):
        for fn, times in ((plain, plain_times), (log, log_times)):
            times.append(fn())
    return min(plain_times), min(log_times)


def median_round(rounds: list[tuple[float, float]]) -> tuple[float, float]:
    """The (plain, log) throughputs of the round whose ratio is the median (the lower middle
    one of an even number: ties go to Kafka), so the row's MB/s figures and its ratio come from
    one round."""
    ordered = sorted(rounds, key=lambda r: r[1] / r[0])
    return ordered[(len(ordered) - 1) // 2]


def timed(fn: Callable[[], None]) -> Callable[[], float]:
    """``fn`` as a side of :func:`best_of_interleaved`, timed as a whole."""

    def run() -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    return run


def plain_write(root: Path, batches: list[bytes]) -> float:
    """The baseline of the append measurements: the same bytes, the same chunks, one fsync.
    Timed: open, the writes, the fsync, close (as Kafka's harness times its plain write); the
    file's deletion after is not."""
    path = root / "plain.bin"
    start = time.perf_counter()
    with path.open("wb", buffering=0) as handle:
        for data in batches:
            handle.write(data)
        os.fsync(handle.fileno())
    elapsed = time.perf_counter() - start
    path.unlink()
    return elapsed


def bench_append(root: Path, batches: list[bytes], runs: int) -> tuple[float, float]:
    total = sum(len(b) for b in batches)

    def plain() -> float:
        return plain_write(root, batches)

    def log_append() -> float:
        """Timed: creating the partition's log (directory, segment, indexes), the appends and
        the flush, as Kafka's harness times FileRecords.open, its appends and the flush; the
        log manager around it is made before, and shut down and deleted after, untimed."""
        directory = root / "logdir"
        manager = LogManager([directory], default_config=LogConfig())
        start = time.perf_counter()
        log = manager.get_or_create_log(TopicPartition("bench", 0))
        append = log.append
        for data in batches:
            append(data)
        log.flush()
        elapsed = time.perf_counter() - start
        manager.shutdown()
        shutil.rmtree(directory)
        return elapsed

    plain_s, log_s = best_of_interleaved(runs, plain, log_append)
    return total / plain_s, total / log_s


def bench_append_floor(root: Path, batches: list[bytes], runs: int) -> tuple[float, float]:
    """Reference, not a target: the least any validating append can do per batch (copy, the
    native validation of every batch, ``pwrite``), without segments, indexes or bookkeeping."""
    total = sum(len(b) for b in batches)
    if validate_uncompressed is None:
        return float("nan"), float("nan")  # no native module: no floor to show
    validate = validate_uncompressed

    def plain() -> float:
        return plain_write(root, batches)

    def floor() -> float:
        path = root / "floor.bin"
        start = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        position, next_offset = 0, 0
        for data in batches:
            out = bytearray(data)
            result = validate(
                out, next_offset, 0, True, False, False, 1 << 30, 0, 2**63 - 1, 2**63 - 1
            )
            assert result is not None
            os.pwrite(fd, out, position)
            position += len(out)
            next_offset = result[1] + 1
        os.fsync(fd)
        os.close(fd)
        elapsed = time.perf_counter() - start
        path.unlink()
        return elapsed

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

    plain_s, log_s = best_of_interleaved(runs, timed(plain), timed(log_read))
    manager.shutdown()
    shutil.rmtree(directory)
    return total / plain_s, total / log_s


def write_batches(path: Path, batches: list[bytes]) -> Path:
    with path.open("wb") as handle:
        for data in batches:
            handle.write(data)
    return path


def split_batches(data: bytes) -> list[bytes]:
    """The batches of a file of whole batches."""
    batches, position = [], 0
    while position < len(data):
        (length,) = INT32.unpack_from(data, position + layout.LENGTH_OFFSET)
        batches.append(data[position : position + layout.LOG_OVERHEAD + length])
        position += layout.LOG_OVERHEAD + length
    return batches


def callgrind_child(batches_file: Path, directory: Path, append: bool) -> None:
    """Run under callgrind: load the batches, open a log and (with ``append``) append them."""
    batches = split_batches(batches_file.read_bytes())
    with LogManager([directory], default_config=LogConfig()) as manager:
        log = manager.get_or_create_log(TopicPartition("bench", 0))
        if append:
            for data in batches:
                log.append(data)
        log.flush()


def append_instructions_per_record(root: Path, batches: list[bytes], records: int) -> float:
    batches_file = write_batches(root / "callgrind-batches.bin", batches)
    totals = {}
    for mode in ("baseline", "append"):
        directory = root / "callgrind-log"
        command = [
            sys.executable, __file__, "--callgrind-child", mode,
            "--batches", str(batches_file), "--dir", str(directory),
        ]  # fmt: skip
        totals[mode] = callgrind_total(command, root / f"callgrind.{mode}.out")
        shutil.rmtree(directory)
    batches_file.unlink()
    return (totals["append"] - totals["baseline"]) / records


def count_records(batches: list[bytes]) -> int:
    return sum(INT32.unpack_from(data, layout.RECORDS_COUNT_OFFSET)[0] for data in batches)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=256, help="bytes appended per run (MiB)")
    parser.add_argument(
        "--batch-kib", type=int, default=16, help="uncompressed batch size (KiB, as stored)"
    )
    parser.add_argument(
        "--lz4-batch-kib", type=int, default=37, help="lz4 batch size (KiB, as stored)"
    )
    parser.add_argument("--runs", type=int, default=5, help="best of N runs per measurement")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="append rounds, ours and Kafka's in turn; the rows give each side's median ratio",
    )
    parser.add_argument("--no-kafka", action="store_true", help="skip Kafka's harness")
    parser.add_argument("--no-callgrind", action="store_true")
    parser.add_argument("--callgrind-mib", type=int, default=4, help="MiB appended under callgrind")
    parser.add_argument("--callgrind-child", choices=("baseline", "append"), help=argparse.SUPPRESS)
    parser.add_argument("--batches", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.callgrind_child:
        callgrind_child(args.batches, args.dir, args.callgrind_child == "append")
        return
    if not args.no_kafka and (missing := kafka_anchor.missing_tools()):
        parser.error(f"Kafka's harness needs {', '.join(missing)} on PATH (or pass --no-kafka)")
    root = Path(tempfile.mkdtemp(prefix="logkeeper-bench-", dir=os.environ.get("BENCH_DIR")))
    print(
        f"record scan implementation: {scan.IMPLEMENTATION}; {args.mib} MiB stored per run, "
        f"batches of {args.batch_kib} KiB (none) and {args.lz4_batch_kib} KiB (lz4) as stored, "
        f"best of {args.runs}, appends in {args.rounds} rounds (median)"
    )
    # (name, plain B/s, log B/s, Kafka's ratio or None, target ratio or None)
    results: list[tuple[str, float, float, float | None, float | None]] = []
    notes: list[str] = []
    try:
        for codec, batch_kib in ((Compression.NONE, args.batch_kib),
                                 (Compression.LZ4, args.lz4_batch_kib)):  # fmt: skip
            batches = make_batches(args.mib << 20, batch_kib << 10, codec)
            records = count_records(batches)
            notes.append(
                f"{codec.config_name}: {len(batches)} batches, "
                f"{sum(map(len, batches)) / len(batches) / 1000:.1f} KB stored and "
                f"{records / len(batches):.0f} records each"
            )
            # Rounds: ours, then Kafka's, then ours again...: each side's ratio per round, the
            # row shows the round of our median ratio and Kafka's median (see --rounds).
            ours: list[tuple[float, float]] = []
            kafkas: list[kafka_anchor.KafkaAppend] = []
            batches_file = None if args.no_kafka else write_batches(root / "batches.bin", batches)
            for _ in range(args.rounds):
                ours.append(bench_append(root, batches, args.runs))
                if batches_file is not None:
                    kafka = kafka_anchor.kafka_append(
                        batches_file, codec.config_name, root, runs=args.runs, warmup=2
                    )
                    assert kafka.records == records, (kafka.records, records)
                    kafkas.append(kafka)
            if batches_file is not None:
                batches_file.unlink()
            plain, log = median_round(ours)
            kafka_ratio = None
            if kafkas:
                # The upper middle of an even number (ours takes the lower): ties go to Kafka.
                kafka = sorted(kafkas, key=lambda k: k.ratio)[len(kafkas) // 2]
                kafka_ratio = kafka.ratio
                plain_mb_s, kafka_mb_s = kafka.bytes / kafka.plain_s, kafka.bytes / kafka.kafka_s
                notes.append(
                    f"  Kafka {codec.config_name}: plain write {plain_mb_s / 1e6:.0f} MB/s, "
                    f"leader append {kafka_mb_s / 1e6:.0f} MB/s (JVM, same batches)"
                )
            if args.rounds > 1:
                pairs = ", ".join(
                    f"{log_r / plain_r:.2f}" + ("" if not kafkas else f"/{kafkas[i].ratio:.2f}")
                    for i, (plain_r, log_r) in enumerate(ours)
                )
                notes.append(
                    f"  append {codec.config_name}, each round's ratio (ours"
                    f"{'' if not kafkas else '/Kafka'}): {pairs}"
                )
            results.append((f"append {codec.config_name}", plain, log, kafka_ratio, kafka_ratio))
            if codec is Compression.NONE:
                plain, floor = bench_append_floor(root, batches, args.runs)
                results.append(("  (floor, see doc)", plain, floor, None, None))
            if not args.no_callgrind and shutil.which("valgrind") is not None:
                small = make_batches(args.callgrind_mib << 20, batch_kib << 10, codec)
                small_records = count_records(small)
                per_record = append_instructions_per_record(root, small, small_records)
                notes.append(
                    f"  callgrind, Log.append of {small_records} records {codec.config_name}: "
                    f"{per_record:,.0f} instructions per record"
                )
        batches = make_batches(args.mib << 20, args.batch_kib << 10, Compression.NONE)
        plain, log = bench_read(root, batches, args.runs)
        results.append(("read by offset", plain, log, None, 0.8))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for note in notes:
        print(note)
    print(
        f"{'operation':<18}{'plain MB/s':>12}{'log MB/s':>12}{'ratio':>8}{'Kafka':>8}{'target':>9}"
    )
    for name, plain, log, kafka_ratio, target in results:
        ratio = log / plain
        kafka_shown = "-" if kafka_ratio is None else f"{kafka_ratio:.2f}"
        if target is None:
            verdict, shown = "", "-"
        else:
            verdict = "  ok" if ratio >= target else "  BELOW TARGET"
            shown = ">=Kafka" if target is kafka_ratio else f"{target:.2f}"
        print(
            f"{name:<18}{plain / 1e6:>12.0f}{log / 1e6:>12.0f}{ratio:>8.2f}{kafka_shown:>8}"
            f"{shown:>9}{verdict}"
        )


if __name__ == "__main__":
    main()
