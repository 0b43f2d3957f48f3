"""``logkeeper demo``: the embedded default, run over a local directory.

Creates the example topics (``examples/topics.yaml``), produces keyed traffic with every codec,
reads it back, looks offsets up by timestamp, deletes records below an offset, simulates a crash
with a torn write and shows the recovery, then verifies the directory and prints a report.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path

from storagecore import (
    Compression,
    LogManager,
    NewRecord,
    TopicPartition,
    build_batch,
    parse_topic_manifests,
)
from storagecore.cleaner import CleanerConfig
from storagecore.log_cleaner import LogCleaner
from storagecore.partitioner import partition_for_key
from storagecore.verify import verify_log_dir

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


def run_demo(directory: Path, *, records: int = 20_000) -> int:
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

    report = verify_log_dir(data_dir)
    for finding in report.findings:
        print(f"  {finding}")
    print(
        f"\nverify: {'OK' if report.ok else 'FAILED'} "
        f"({sum(p.records for p in report.partitions)} records in "
        f"{sum(p.segments for p in report.partitions)} segments); "
        f"{time.monotonic() - started:.1f}s"
    )
    first_segment = min((data_dir / "orders-0").glob("*.log"))
    print(f"Inspect it: logkeeper dump-log --records {first_segment} | head")
    return 0 if report.ok and read_back == sum(produced.values()) else 1
