"""``logkeeper demo``: the embedded default, run over a local directory.

Part 1, the engine: creates the example topics (``examples/topics.yaml``), produces keyed
traffic with every codec, reads it back, looks offsets up by timestamp, deletes records below an
offset, simulates a crash with a torn write and shows the recovery.

Part 2, the worker: runs the same worker as ``logkeeper serve`` over the directory, on a clock
that runs 12 hours per second, with its HTTP port on loopback (status and metrics URLs are
printed). With cleaning and retention paused it takes a keyed workload with updates and
tombstones, reports the logs ("before"), resumes both and waits until compaction and retention
have settled, then reports again ("after") with the cleaner's stats and what retention deleted.
The worker keeps serving for ``--linger`` seconds for a person to look, stops cleanly, and the
directory is verified.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import time
from pathlib import Path
from typing import Any

from storagecore import (
    Compression,
    LogManager,
    NewRecord,
    TopicPartition,
    build_batch,
    parse_topic_manifests,
)
from storagecore.cleaner.log_cleaner import LogCleaner
from storagecore.clock import ScaledClock
from storagecore.config import CleanerConfig
from storagecore.partitioner import partition_for_key
from storagecore.tools.verify import verify_log_dir
from storageworker.http import AdminServer
from storageworker.status import volume_status
from storageworker.worker import Worker

#: The demo worker's clock: 12 hours per real second (orders' 7-day retention in 14 s).
CLOCK_SPEED = 43_200.0
#: Scheduled work every 3 clock hours: a quarter of a real second.
DEMO_SETTINGS = """\
# Written by logkeeper demo: the worker's settings (a StorageVolume spec).
cleaner: {threads: 1, dedupeBufferBytes: 8388608, backoffMs: 100}
retentionCheckIntervalMs: 10800000
worker:
  flushCheckIntervalMs: 10800000
  checkpointIntervalMs: 10800000
  deleteCheckIntervalMs: 10800000
  configReloadIntervalMs: 21600000
"""
DEMO_CLOCK_MS = 8 * 86_400_000
SETTLE_TIMEOUT_S = 60.0

_MARKER = ".logkeeper-demo"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "topics.yaml"


def _prepare(directory: Path) -> None:
    if directory.exists():
        if not (directory / _MARKER).exists() and any(directory.iterdir()):
            raise SystemExit(
                f"logkeeper demo: {directory} exists and was not made by the demo; "
                "pass --dir with a new or demo directory"
            )
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    (directory / _MARKER).write_text("created by logkeeper demo\n", encoding="utf-8")


def _table(manager: LogManager) -> list[str]:
    rows = [f"  {'partition':<18}{'segments':>9}{'bytes':>10}{'log start':>11}{'log end':>9}"]
    for tp, log in sorted(manager.logs.items()):
        rows.append(
            f"  {tp!s:<18}{len(log.segments):>9}{log.size_bytes:>10}"
            f"{log.log_start_offset:>11}{log.log_end_offset:>9}"
        )
    return rows


def run_demo(directory: Path, *, records: int = 20_000, linger_s: float = 20.0) -> int:
    started = time.monotonic()
    _prepare(directory)
    data_dir = directory / "volume-0"
    topics = parse_topic_manifests(EXAMPLES.read_text(encoding="utf-8"), source=str(EXAMPLES))
    configs = {name: spec.config for name, spec in topics.items()}
    rng = random.Random(42)
    now_ms = int(time.time() * 1000)
    codecs = list(Compression)
    produced: dict[TopicPartition, int] = {}
    print(f"logkeeper demo: {len(topics)} topics from {EXAMPLES.name} in {data_dir}")

    with LogManager([data_dir], config_for=configs) as manager:
        for name, spec in topics.items():
            for partition in range(spec.partitions):
                manager.get_or_create_log(TopicPartition(name, partition), spec.config)
        pending: dict[TopicPartition, list[NewRecord]] = {}
        names = sorted(topics)
        for i in range(records):
            name = names[i % len(names)]
            spec = topics[name]
            if spec.config.compact:
                key = f"user-{rng.randrange(500):04d}"
                value = (
                    None if rng.random() < 0.05 else json.dumps({"plan": rng.choice("ABC"), "v": i})
                )
            else:
                key = f"order-{i:07d}"
                value = json.dumps({"amount": rng.randrange(1, 500), "sku": rng.randrange(1000)})
            tp = TopicPartition(name, partition_for_key(key.encode(), spec.partitions))
            timestamp = now_ms - (records - i) * 10
            batch = pending.setdefault(tp, [])
            batch.append(
                NewRecord(
                    key=key.encode(),
                    value=None if value is None else value.encode(),
                    timestamp=timestamp,
                )
            )
            if len(batch) >= 200:
                codec = codecs[(i // 200) % len(codecs)]
                manager.get_log(tp).append(build_batch(batch, compression=codec))
                produced[tp] = produced.get(tp, 0) + len(batch)
                pending[tp] = []
        for tp, batch in pending.items():
            if batch:
                manager.get_log(tp).append(build_batch(batch))
                produced[tp] = produced.get(tp, 0) + len(batch)
        print(
            f"\nProduced {sum(produced.values())} records with codecs "
            f"{', '.join(c.config_name for c in codecs)}:"
        )
        print("\n".join(_table(manager)))

        read_back = sum(1 for log in manager.logs.values() for _ in log.records())
        print(
            f"\nRead back {read_back} records "
            f"({'all of them' if read_back == sum(produced.values()) else 'MISMATCH'})."
        )
        orders0 = manager.get_log(TopicPartition("orders", 0))
        middle = now_ms - records * 3
        found = orders0.offset_for_timestamp(middle)
        print(
            f"orders-0: first record at or after timestamp {middle} is offset "
            f"{None if found is None else found.offset}"
        )
        target = (orders0.log_start_offset + orders0.log_end_offset) // 2
        orders0.delete_records(target)
        print(
            f"orders-0: delete-records below offset {target}; log start offset is now "
            f"{orders0.log_start_offset}"
        )
        # Retention, as the worker's kafka-log-retention task runs it.
        for plan in manager.cleanup_logs():
            rules = sorted({d.rule.value for d in plan.deletions})
            print(
                f"retention {plan.tp}: deleted {len(plan.deletions)} segments "
                f"({plan.deleted_bytes} bytes, {', '.join(rules)}); log start offset "
                f"{plan.log_start_offset_before} -> {plan.log_start_offset_after}"
            )
        # Compaction, as the worker's cleaner threads run it (here: until nothing is dirty).
        cleaner = LogCleaner(manager, CleanerConfig(dedupe_buffer_size=8 << 20))
        rounds = cleaner.clean_until_done()
        if not rounds:
            print("compaction: nothing cleanable yet (the active segment is never cleaned)")
        for stats in rounds:
            print(
                f"compaction {stats.topic_partition}: dirty section [{stats.first_dirty_offset}, "
                f"{stats.end_offset}): {stats.messages_read} -> {stats.messages_written} "
                f"records, {100 * stats.size_reduction:.1f}% smaller"
            )
        for tp, reason in cleaner.manager.uncleanable.items():
            print(f"compaction {tp}: UNCLEANABLE: {reason}")
        manager.delete_expired_segment_files()
        # What the worker's periodic tasks do: flush, then checkpoint recovery points and
        # log start offsets.
        for log in manager.logs.values():
            log.flush()
        manager.checkpoint_recovery_points_and_log_start_offsets()
        torn = manager.get_log(TopicPartition("user-profiles", 0))
        for n in range(3):  # acknowledged but never flushed: recovery revalidates them
            torn.append(
                build_batch(
                    [NewRecord(key=f"user-late-{n}".encode(), value=b"late", timestamp=now_ms)]
                )
            )
        torn_path = torn.active_segment.log.path
        end_before_crash = torn.log_end_offset
        manager.close_without_shutdown()
    # Simulate a crash in the middle of a write: half a batch at the end of the active segment.
    half = build_batch([NewRecord(key=b"user-torn", value=b"x" * 300, timestamp=now_ms)])
    with torn_path.open("ab") as handle:
        handle.write(half[: len(half) // 2])
    print(
        f"\nSimulated crash: no clean shutdown, {len(half) // 2} torn bytes appended to "
        f"{torn_path.name}"
    )

    with LogManager([data_dir], config_for=configs) as manager:
        log = manager.get_log(TopicPartition("user-profiles", 0))
        print(
            f"Recovered user-profiles-0 from its recovery point: log end {log.log_end_offset} "
            f"(was {end_before_crash}: the unflushed appends were revalidated, the torn tail "
            f"cut); orders-0 log start "
            f"{manager.get_log(TopicPartition('orders', 0)).log_start_offset} from its checkpoint"
        )
        print("\n".join(_table(manager)))

    worker_ok = run_worker_demo(directory, data_dir, records=records, linger_s=linger_s)

    report = verify_log_dir(data_dir)
    for finding in report.findings:
        print(f"  {finding}")
    print(
        f"\nverify: {'OK' if report.ok else 'FAILED'} "
        f"({sum(p.records for p in report.partitions)} records in "
        f"{sum(p.segments for p in report.partitions)} segments); "
        f"{time.monotonic() - started:.1f}s"
    )
    first_segment = min((data_dir / "user-profiles-0").glob("*.log"))
    print(f"Inspect it: logkeeper dump-log --records {first_segment} | head")
    return 0 if report.ok and worker_ok and read_back == sum(produced.values()) else 1


# -- part 2: the worker ----------------------------------------------------------------------


def _snapshot(worker: Worker) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    manager, _ = worker.started_parts()
    for entry in volume_status(worker)["partitions"]:
        name = f"{entry['topic']}-{entry['partition']}"
        log = manager.get_log(TopicPartition(entry["topic"], entry["partition"]))
        entry["records"] = sum(1 for _ in log.records())
        entry["tombstones"] = sum(1 for r in log.records() if r.value is None)
        rows[name] = entry
    return rows


def _worker_table(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[str]:
    def ratio(entry: dict[str, Any]) -> str:
        value = entry.get("dirtyRatio")
        return "-" if value is None else f"{value:.2f}"

    lines = [
        f"  {'partition':<17}{'records':>16}{'tombstones':>12}{'bytes':>17}{'segments':>10}"
        f"{'log start':>13}{'dirty':>12}"
    ]
    for name in sorted(after):
        b, a = before.get(name, after[name]), after[name]
        lines.append(
            f"  {name:<17}{b['records']:>7} -> {a['records']:<6}{b['tombstones']:>4} -> "
            f"{a['tombstones']:<4}{b['sizeBytes']:>8} -> {a['sizeBytes']:<7}"
            f"{b['segments']:>3} -> {a['segments']:<3}{b['logStartOffset']:>6} -> "
            f"{a['logStartOffset']:<5}{ratio(b):>5} -> {ratio(a):<5}"
        )
    return lines


def _settled(worker: Worker) -> bool:
    status = volume_status(worker)
    for entry in status["partitions"]:
        if entry["cleanerState"] != "idle" or entry["compactNowPending"]:
            return False
        if entry["retention"] and entry["retention"]["segmentsDue"]:
            return False
        if entry["dirtyRatio"] is not None and entry["dirtyRatio"] > 0:
            return False
    return True


def run_worker_demo(directory: Path, data_dir: Path, *, records: int, linger_s: float) -> bool:
    """Part 2 (see the module docstring); True when every step did what it should."""
    topics_dir = directory / "topics"
    topics_dir.mkdir(exist_ok=True)
    (topics_dir / "topics.yaml").write_text(EXAMPLES.read_text(encoding="utf-8"), encoding="utf-8")
    settings_path = directory / "settings.yaml"
    settings_path.write_text(DEMO_SETTINGS, encoding="utf-8")
    clock = ScaledClock(CLOCK_SPEED)
    worker = Worker([data_dir], topics_dir, settings_path, clock=clock)
    server = AdminServer(worker, "127.0.0.1", 0, None)
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    print(
        f"\nThe worker (as `logkeeper serve`) over {data_dir}, on a clock running "
        f"{CLOCK_SPEED / 3600:.0f} hours per second:\n  status:  {base}/v1/status\n"
        f"  metrics: {base}/metrics"
    )
    ok = True
    try:
        worker.start()
        manager, cleaner = worker.started_parts()
        worker.control("pause-cleaning", None)
        worker.control("pause-retention", None)
        rng = random.Random(7)
        topics = worker.topics
        produced = tombstones = 0
        for round_ in range(20):  # a keyed workload: new keys, updates, deletes
            for name, spec in sorted(topics.items()):
                batch_by_tp: dict[TopicPartition, list[NewRecord]] = {}
                for _ in range(max(records // 200, 10)):
                    if spec.config.compact:
                        key = f"user-{rng.randrange(300):04d}".encode()
                        value = None if rng.random() < 0.1 else b'{"plan": "%d"}' % round_
                    else:
                        key = f"order-{rng.randrange(10**9):09d}".encode()
                        value = b'{"amount": %d}' % rng.randrange(1, 500)
                    tp = TopicPartition(name, partition_for_key(key, spec.partitions))
                    batch_by_tp.setdefault(tp, []).append(
                        NewRecord(key=key, value=value, timestamp=clock.milliseconds())
                    )
                    produced += 1
                    tombstones += value is None
                for tp, batch in batch_by_tp.items():
                    manager.get_log(tp).append(build_batch(batch, compression=Compression.LZ4))
            time.sleep(0.05)
        for log in manager.logs.values():
            log.roll()  # the active segment is never cleaned: seal what was written
        print(
            f"Produced {produced} records ({tombstones} tombstones) with cleaning and retention "
            "paused (POST /v1/volume/pause-cleaning, pause-retention)."
        )
        before = _snapshot(worker)
        worker.control("resume-cleaning", None)
        worker.control("resume-retention", None)
        started = time.monotonic()
        resumed_ms = clock.milliseconds()
        # Eight clock days: past orders' retention.ms (7 days) and every delete.retention.ms,
        # so time retention and tombstone removal happen too, then until nothing is left to do.
        while clock.milliseconds() - resumed_ms < DEMO_CLOCK_MS:
            time.sleep(0.25)
        while not _settled(worker) and time.monotonic() - started < SETTLE_TIMEOUT_S:
            time.sleep(0.25)
        settled = _settled(worker)
        ok = ok and settled
        after = _snapshot(worker)
        print(
            f"Resumed; {(clock.milliseconds() - resumed_ms) / 86_400_000:.1f} clock days "
            f"({time.monotonic() - started:.1f}s) later the worker "
            f"{'has settled' if settled else 'has NOT settled'} (before -> after):"
        )
        print("\n".join(_worker_table(before, after)))
        totals = cleaner.totals
        print(
            f"cleaner: {totals.rounds} rounds, {totals.records_read} records read, "
            f"{totals.records_removed} removed, {totals.bytes_read} bytes read, "
            f"{totals.bytes_written} written, {totals.duration_s:.2f}s"
        )
        for tp, stats in sorted(cleaner.last_stats.items()):
            print(
                f"  last clean of {tp}: {stats.messages_read} -> {stats.messages_written} records, "
                f"{100 * stats.size_reduction:.1f}% smaller, "
                f"{stats.records_per_second:,.0f} records/s"
            )
        for tp, reason in sorted(cleaner.manager.uncleanable.items()):
            print(f"  {tp}: UNCLEANABLE: {reason}")
            ok = False
        retained = manager.retention_totals
        print(
            f"retention: {retained.segments_deleted} segments deleted "
            f"({retained.bytes_deleted} bytes)"
        )
        if linger_s > 0:
            print(
                f"\nThe worker keeps serving for {linger_s:.0f}s: {base}/v1/status and "
                f"{base}/metrics (Ctrl-C ends it now).",
                flush=True,
            )
            with contextlib.suppress(KeyboardInterrupt):
                time.sleep(linger_s)
    finally:
        worker.shutdown()
        server.stop()
    print("Worker stopped cleanly (checkpoints written, clean-shutdown marker left).")
    return ok
