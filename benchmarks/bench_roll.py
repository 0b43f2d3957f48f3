"""How long an append that rolls the active segment keeps its caller waiting.

    .venv/bin/python benchmarks/bench_roll.py [--mib 256] [--segment-mib 16] [--rounds 3]

The worker appends Produce requests of up to 1 MiB on its event loop's thread
(``storageworker/kafka/server.py``), so the slowest append is how long every connection of the
worker can stall. One process appends ``--mib`` MiB of 16 KiB batches (1 KiB values, the Java
producer's default batch) to a log with ``segment.bytes`` = ``--segment-mib``, in turn:

* ``at the roll``: the roll flushes the old segment and the new producer snapshot before the
  append returns (``Log.flush_scheduler`` None: the tools, and the worker before 2026-11-25);
* ``scheduled``: the worker's way (``LogManager(background_roll_flush=True)``): the roll hands
  both fsyncs to the manager's flush thread (``storagecore/roll_flush.py``, Kafka's
  "flush-log" task), which opens the files by path and syncs them off the log's lock, and
  returns.

Printed per mode: appends/s, the median, 99.9th percentile and largest append latency, and the
largest latency of the appends that rolled; then at the roll / scheduled for the largest
latencies. Kafka's broker takes the same design (its ``UnifiedLog.roll`` schedules the flush),
so the anchor is the design, not a figure: this prints the difference the change makes here.
The machine is shared: fsync times depend on what else writes to the disk, so only the
figures of one round against each other mean anything.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storagecore import Log, LogConfig, ManualClock, NewRecord, build_batch
from storagecore.roll_flush import RollFlushThread

BATCH_RECORDS = 16  # 16 x 1 KiB values: the Java producer's default 16 KiB batch


def batches(count: int) -> list[bytes]:
    """``count`` distinct 16 KiB batches (random values: nothing compresses, nothing repeats)."""
    return [
        build_batch(
            [
                NewRecord(key=b"k%d" % i, value=os.urandom(1024), timestamp=1_700_000_000_000)
                for i in range(BATCH_RECORDS)
            ]
        )
        for _ in range(count)
    ]


def run(
    root: Path, data: list[bytes], rounds_of_data: int, segment_bytes: int, scheduled: bool
) -> tuple[float, list[float], list[float]]:
    """(appends per second, every append's latency in s, the latencies of rolling appends)."""
    flusher = RollFlushThread() if scheduled else None
    log = Log.open(
        root / "topic-0",
        LogConfig(segment_bytes=segment_bytes, retention_ms=-1),
        ManualClock(1_700_000_000_000),
        flush_scheduler=flusher.schedule if flusher is not None else None,
    )
    latencies: list[float] = []
    rolling: list[float] = []
    started = time.perf_counter()
    for _ in range(rounds_of_data):
        for batch in data:
            segments = len(log.segments)
            begun = time.perf_counter()
            log.append(batch)
            took = time.perf_counter() - begun
            latencies.append(took)
            if len(log.segments) != segments:
                rolling.append(took)
    elapsed = time.perf_counter() - started
    if flusher is not None:
        flusher.stop()  # the last roll's flush, outside the timed appends
    log.close()
    return len(latencies) / elapsed, latencies, rolling


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="MiB appended per mode and round")
    parser.add_argument("--segment-mib", type=int, default=16, help="segment.bytes in MiB")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = batches(1024)  # 16 MiB of distinct batches, appended over and over
    size = sum(len(b) for b in data)
    repeats = max(1, args.mib * (1 << 20) // size)
    for round_ in range(1, args.rounds + 1):
        largest: dict[str, float] = {}
        print(f"round {round_}: {repeats * size / 1e6:.0f} MB of 16 KiB batches, segment.bytes "
              f"{args.segment_mib} MiB")  # fmt: skip
        for name, scheduled in (("at the roll", False), ("scheduled", True)):
            with tempfile.TemporaryDirectory(prefix="bench-roll-") as tmp:
                rate, latencies, rolling = run(
                    Path(tmp), data, repeats, args.segment_mib << 20, scheduled
                )
            latencies.sort()
            ms = [latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.999)]]
            largest[name] = latencies[-1]
            print(
                f"  {name:<12} {rate:9.0f} appends/s; latency ms: median {ms[0] * 1e3:6.3f}, "
                f"99.9% {ms[1] * 1e3:7.3f}, largest {latencies[-1] * 1e3:7.2f}; "
                f"{len(rolling)} rolls, largest {max(rolling, default=0) * 1e3:7.2f}",
                flush=True,
            )
        ratio = largest["at the roll"] / largest["scheduled"]
        print(f"  largest append latency, at the roll / scheduled: {ratio:5.1f}", flush=True)


if __name__ == "__main__":
    main()
