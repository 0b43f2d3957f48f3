"""The worker over real directories on a manual clock: the topic set, reloads, deletion
policies, controls, compaction windows and lag forcing. Background threads are not started;
the tests run the scheduled work by hand."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from storagecore import NewRecord, TopicPartition, build_batch, pins
from storagecore.cleaner.manager import CleaningState
from storagecore.clock import ManualClock
from storagecore.errors import ConfigError
from storageworker.controls import COMPACT_NOW, PAUSE_CLEANING, PAUSE_RETENTION, RETRY_UNCLEANABLE
from storageworker.metrics import WorkerCollector
from storageworker.status import volume_status
from storageworker.worker import Worker

START_MS = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC


def worker_registry(worker: Worker) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(WorkerCollector(worker))
    return registry


def topic_yaml(
    name: str,
    partitions: int = 1,
    config: dict[str, object] | None = None,
    *,
    policy: str | None = None,
    annotations: dict[str, str] | None = None,
) -> str:
    lines = [
        "apiVersion: logkeeper.io/v1alpha1",
        "kind: Topic",
        "metadata:",
        f"  name: {name}",
    ]
    if annotations:
        lines.append("  annotations:")
        lines += [f'    {k}: "{v}"' for k, v in annotations.items()]
    lines += ["spec:", f"  partitions: {partitions}"]
    if policy:
        lines.append(f"  deletionPolicy: {policy}")
    if config:
        lines.append("  config:")
        lines += [f'    {k}: "{v}"' for k, v in config.items()]
    return "\n".join(lines) + "\n"


COMPACTED = {"cleanup.policy": "compact", "segment.bytes": 1024, "min.cleanable.dirty.ratio": 0.01}


class Setup:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.topics = root / "topics"
        self.topics.mkdir()
        self.settings = root / "settings.yaml"
        self.settings.write_text("cleaner: {dedupeBufferBytes: 1048576}\n", encoding="utf-8")
        self.clock = ManualClock(START_MS)
        self.worker: Worker | None = None

    def declare(self, *documents: str, file: str = "topics.yaml") -> None:
        (self.topics / file).write_text("---\n".join(documents), encoding="utf-8")

    def start(self) -> Worker:
        self.worker = Worker([self.root / "data"], self.topics, self.settings, clock=self.clock)
        self.worker.start(background=False)
        return self.worker


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    s = Setup(tmp_path)
    yield s
    if s.worker is not None:
        s.worker.shutdown()


def fill(worker: Worker, tp: TopicPartition, rounds: int = 5, keys: int = 5) -> None:
    assert worker.log_manager is not None
    log = worker.log_manager.get_log(tp)
    for r in range(rounds):
        log.append(
            build_batch(
                [
                    NewRecord(key=b"k%d" % k, value=b"v%d-" % r + b"x" * 60, timestamp=START_MS)
                    for k in range(keys)
                ]
            )
        )
    log.roll()


def test_declared_partitions_are_created_and_grow_but_never_shrink(setup: Setup) -> None:
    setup.declare(topic_yaml("orders", 2), topic_yaml("profiles", 1, COMPACTED))
    worker = setup.start()
    assert worker.log_manager is not None
    assert sorted(map(str, worker.log_manager.logs)) == ["orders-0", "orders-1", "profiles-0"]
    assert worker.log_manager.get_log(TopicPartition("profiles", 0)).config.compact
    setup.declare(topic_yaml("orders", 3, {"retention.ms": 1000}), topic_yaml("profiles", 1))
    worker.reload()
    orders2 = worker.log_manager.get_log(TopicPartition("orders", 2))
    assert orders2.config.retention_ms == 1000
    assert worker.log_manager.get_log(TopicPartition("orders", 0)).config.retention_ms == 1000
    assert not worker.log_manager.get_log(TopicPartition("profiles", 0)).config.compact
    assert worker.counters.reloads == 1
    setup.declare(topic_yaml("orders", 1), topic_yaml("profiles", 1))
    worker.reload()
    assert TopicPartition("orders", 2) in worker.log_manager.logs  # never shrinks
    assert worker.extra_partitions == ["orders-1", "orders-2"]


def test_topics_from_several_files_and_hidden_entries_skipped(setup: Setup) -> None:
    setup.declare(topic_yaml("a"), file="a.yaml")
    setup.declare(topic_yaml("b"), file="b.yml")
    setup.declare("not: [valid", file="..data")  # a ConfigMap's hidden entry
    worker = setup.start()
    assert sorted(worker.topics) == ["a", "b"]
    setup.declare(topic_yaml("a"), file="b.yml")
    worker.reload()
    assert worker.topics_status.error is not None
    assert "'a' is also declared" in worker.topics_status.error


def test_a_broken_topic_file_keeps_the_last_good_set_and_deletes_nothing(setup: Setup) -> None:
    setup.declare(topic_yaml("keep", 2, policy="Delete"))
    worker = setup.start()
    assert worker.log_manager is not None
    fill(worker, TopicPartition("keep", 0))
    before = sorted(p.name for p in (setup.root / "data").rglob("*"))
    for broken in ("kind: Topic\nspec: [", topic_yaml("keep", 1, {"retention.mss": 5}), ""):
        setup.declare(broken)
        worker.reload()
        if broken:
            assert worker.topics_status.error is not None
            assert sorted(worker.topics) == ["keep"]
    # An empty file parses (no topics): "keep" is gone from a good set, and it asked for
    # deletion. The two broken versions before it deleted nothing and counted two errors.
    assert worker.counters.errors >= 2
    assert TopicPartition("keep", 0) not in worker.log_manager.logs
    setup.declare(topic_yaml("keep", 2, policy="Delete"))
    worker.reload()
    assert worker.topics_status.error is None
    assert before  # the data existed


def test_broken_file_then_fixed_clears_the_error(setup: Setup) -> None:
    setup.declare(topic_yaml("t", 1, policy="Delete"))
    worker = setup.start()
    assert worker.log_manager is not None
    fill(worker, TopicPartition("t", 0))
    files_before = sorted(p.name for p in (setup.root / "data" / "t-0").iterdir())
    setup.declare(
        "apiVersion: logkeeper.io/v1alpha1\nkind: Topic\nmetadata: {name: t}\n"
        "spec: {partitions: zero}\n"
    )
    worker.reload()
    status = volume_status(worker)
    assert not status["config"]["topics"]["ok"]
    assert "spec.partitions" in status["config"]["topics"]["error"]
    assert sorted(p.name for p in (setup.root / "data" / "t-0").iterdir()) == files_before
    setup.declare(topic_yaml("t", 1, policy="Delete"))
    worker.reload()
    assert volume_status(worker)["config"]["topics"]["ok"]


def test_removed_topic_retained_unless_its_policy_is_delete(setup: Setup) -> None:
    setup.declare(topic_yaml("kept", 1), topic_yaml("dropped", 1, policy="Delete"))
    worker = setup.start()
    assert worker.log_manager is not None
    setup.declare(topic_yaml("other", 1))
    worker.reload()
    assert TopicPartition("kept", 0) in worker.log_manager.logs
    assert worker.orphans == ["kept-0"]
    assert TopicPartition("dropped", 0) not in worker.log_manager.logs
    assert any(p.name.endswith("-delete") for p in (setup.root / "data").iterdir())
    assert volume_status(worker)["orphanedLogs"] == ["kept-0"]


def test_pause_cleaning_annotation_and_api_hold(setup: Setup) -> None:
    setup.declare(topic_yaml("c", 1, COMPACTED, annotations={PAUSE_CLEANING: "true"}))
    worker = setup.start()
    assert worker.cleaner is not None
    tp = TopicPartition("c", 0)
    fill(worker, tp)
    assert worker.cleaner.manager.state(tp) == (CleaningState.PAUSED, 1)
    assert worker.cleaner.clean_filthiest() is None  # paused: not chosen
    setup.declare(topic_yaml("c", 1, COMPACTED))
    worker.reload()
    assert worker.cleaner.manager.state(tp) == (None, 0)
    worker.control("pause-cleaning", "c")
    assert worker.cleaner.manager.state(tp) == (CleaningState.PAUSED, 1)
    worker.control("resume-cleaning", "c")
    stats = worker.cleaner.clean_filthiest()
    assert stats is not None and stats.messages_written < stats.messages_read
    with pytest.raises(ConfigError, match="unknown topic 'nope'"):
        worker.control("pause-cleaning", "nope")


def test_pause_retention_keeps_segments_until_resumed(setup: Setup) -> None:
    config = {"retention.ms": 1000, "segment.bytes": 1024, "file.delete.delay.ms": 0}
    setup.declare(topic_yaml("r", 1, config, annotations={PAUSE_RETENTION: "true"}))
    worker = setup.start()
    assert worker.log_manager is not None
    tp = TopicPartition("r", 0)
    fill(worker, tp)
    segments = len(worker.log_manager.get_log(tp).segments)
    setup.clock.advance(10_000)
    worker._run_retention()
    assert len(worker.log_manager.get_log(tp).segments) == segments
    setup.declare(topic_yaml("r", 1, config))
    worker.reload()
    worker._run_retention()
    assert len(worker.log_manager.get_log(tp).segments) < segments
    assert worker.log_manager.retention_totals.segments_deleted > 0


def test_the_retention_task_sweeps_expired_read_pins_and_measures_the_live_ones(
    setup: Setup,
) -> None:
    config = {"retention.ms": 1000, "segment.bytes": 1024, "file.delete.delay.ms": 0}
    setup.declare(topic_yaml("r", 1, config))
    worker = setup.start()
    assert worker.log_manager is not None
    tp = TopicPartition("r", 0)
    fill(worker, tp)
    data_dir = setup.root / "data"
    log = worker.log_manager.get_log(tp)
    # A Spark reader pinned every segment (lease 60 s); another reader's lease has passed.
    live = pins.create_pin_set(data_dir, START_MS + 60_000)
    for segment in log.segments:
        assert pins.pin_segment(live, tp, segment.log.path, segment.log.path.stat().st_ino)
    expired = pins.create_pin_set(data_dir, START_MS - 1)
    sealed_bytes = sum(s.size_bytes for s in log.segments[:-1])
    setup.clock.advance(10_000)
    worker._run_retention()  # deletes every sealed segment
    worker._run_deletes()  # unlinks what is left under .deleted: only the pins hold the bytes
    worker._run_retention()  # measures (once per retention check)
    assert not expired.path.exists() and live.path.exists()
    assert worker.pin_sets_expired == 1
    held = worker.pinned_bytes[str(data_dir)]
    assert held >= sealed_bytes > 0  # the .log files plus their index files
    text = generate_latest(worker_registry(worker)).decode()
    assert f'logkeeper_read_pins_bytes{{dir="{data_dir}"}} {float(held)}' in text
    assert "logkeeper_read_pin_sets_expired_total 1.0" in text
    setup.clock.advance(60_000)
    worker._run_retention()
    assert not live.path.exists() and worker.pinned_bytes[str(data_dir)] == 0


def test_compact_now_annotation_asks_once_per_new_value(setup: Setup) -> None:
    lazy = {**COMPACTED, "min.cleanable.dirty.ratio": 1.0}  # never above it
    setup.declare(topic_yaml("c", 1, lazy))
    worker = setup.start()
    assert worker.cleaner is not None
    tp = TopicPartition("c", 0)
    fill(worker, tp)
    assert worker.cleaner.clean_filthiest() is None  # below its dirty ratio
    setup.declare(topic_yaml("c", 1, lazy, annotations={COMPACT_NOW: "2026-11-21T10:00"}))
    worker.reload()
    assert tp in worker.cleaner.manager.compaction_requests
    assert worker.cleaner.clean_filthiest() is not None
    fill(worker, tp)
    worker.reload()  # same value: no new request
    assert tp not in worker.cleaner.manager.compaction_requests
    setup.declare(topic_yaml("c", 1, lazy, annotations={COMPACT_NOW: "again"}))
    worker.reload()
    assert tp in worker.cleaner.manager.compaction_requests


def test_compaction_windows_and_lag_forcing_on_a_fake_clock(setup: Setup) -> None:
    # START_MS is 22:13 UTC: outside a 01:00-02:00 window.
    setup.settings.write_text(
        "cleaner: {dedupeBufferBytes: 1048576}\n"
        "compactionWindows: {timeZone: UTC, windows: ['01:00-02:00']}\n"
        "compactionLagLeadMs: 60000\n",
        encoding="utf-8",
    )
    lagged = {**COMPACTED, "max.compaction.lag.ms": 3_600_000}
    setup.declare(topic_yaml("plain", 1, COMPACTED), topic_yaml("lagged", 1, lagged))
    worker = setup.start()
    assert worker.cleaner is not None
    fill(worker, TopicPartition("plain", 0))
    fill(worker, TopicPartition("lagged", 0))
    assert not volume_status(worker)["compactionWindowOpen"]
    assert worker.cleaner.clean_filthiest() is None  # closed, and no lag is near
    # 59 minutes later the lagged log is within a minute of its max.compaction.lag.ms.
    setup.clock.advance(59 * 60_000 + 1)
    stats = worker.cleaner.clean_filthiest()
    assert stats is not None and stats.topic_partition == "lagged-0"
    assert worker.cleaner.clean_filthiest() is None  # the other one still waits
    # Compact-now is served outside the window.
    worker.compact_now("plain")
    stats = worker.cleaner.clean_filthiest()
    assert stats is not None and stats.topic_partition == "plain-0"
    fill(worker, TopicPartition("plain", 0))
    # Inside the window (01:30 the next day) the ordinary dirty-ratio rule applies.
    setup.clock.set(START_MS + (3 * 60 + 17) * 60_000)
    assert volume_status(worker)["compactionWindowOpen"]
    stats = worker.cleaner.clean_filthiest()
    assert stats is not None and stats.topic_partition == "plain-0"


def test_settings_reload_applies_every_value_live(setup: Setup) -> None:
    setup.declare(topic_yaml("c", 1, COMPACTED))
    worker = setup.start()
    assert worker.cleaner is not None
    worker.cleaner.start()
    seen: list[tuple[int, int]] = []
    worker.settings_listeners.append(lambda old, new: seen.append((old.backoff_ms, new.backoff_ms)))
    setup.settings.write_text(
        "cleaner: {threads: 2, dedupeBufferBytes: 2097152, ioMaxBytesPerSecond: 1048576,"
        " backoffMs: 50}\n"
        "retentionCheckIntervalMs: 1234\n",
        encoding="utf-8",
    )
    worker.reload()
    assert worker.scheduler.tasks["retention"].interval_ms == 1234
    cleaner = worker.cleaner
    assert cleaner.config.threads == 2 and cleaner.config.map_memory_per_thread == 1048576
    assert cleaner.throttler.bytes_per_second == 1048576 and cleaner.config.backoff_ms == 50
    assert cleaner.alive_threads == 2  # restarted with the new maps
    assert [t["name"] for t in cleaner.thread_states()] == [
        "logkeeper-cleaner-0",
        "logkeeper-cleaner-1",
    ]
    assert seen == [(15_000, 50)]
    # The restarted threads clean.
    fill(worker, TopicPartition("c", 0))
    deadline = time.monotonic() + 30
    while cleaner.totals.rounds == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cleaner.totals.rounds >= 1
    setup.settings.write_text("cleaner: {threads: -1}\n", encoding="utf-8")
    worker.reload()
    assert worker.settings.retention_check_interval_ms == 1234  # the last good stays
    assert "cleaner.threads" in (worker.settings_status.error or "")


def test_status_document_describes_partitions(setup: Setup) -> None:
    setup.declare(topic_yaml("c", 1, COMPACTED))
    worker = setup.start()
    assert worker.cleaner is not None
    fill(worker, TopicPartition("c", 0))
    worker.cleaner.clean_filthiest()
    status = volume_status(worker)
    (entry,) = status["partitions"]
    assert entry["topic"] == "c" and entry["cleanupPolicy"] == "compact"
    assert entry["logEndOffset"] == 25 and entry["segments"] >= 2
    assert entry["lastClean"]["messages_read"] == 25
    assert entry["cleanerState"] == "idle" and not entry["uncleanable"]
    assert entry["firstDirtyOffset"] == 25 and entry["dirtyRatio"] == 0.0
    assert status["dirs"][0]["online"] and status["dirs"][0]["disk"]["totalBytes"] > 0
    assert status["cleaner"]["roundsTotal"] == 1


def test_status_reports_the_dedupe_buffer_requested_and_applied(setup: Setup) -> None:
    # 3 threads and a size that is no multiple of them nor of the 24-byte slot: what each
    # thread's map holds differs from a third of the request.
    setup.settings.write_text(
        "cleaner: {threads: 3, dedupeBufferBytes: 4194311}\n", encoding="utf-8"
    )
    worker = setup.start()
    assert worker.cleaner is not None

    def live_maps() -> set[tuple[int, int]]:
        assert worker.cleaner is not None
        return {
            (state.cleaner.offset_map.memory_bytes, state.cleaner.offset_map.slots)
            for state in worker.cleaner._threads
        }

    buffer = volume_status(worker)["cleaner"]["dedupeBuffer"]
    assert buffer == {
        "requestedBytes": 4194311,
        "appliedBytes": 4194311,
        "threads": 3,
        "mapBytesPerThread": 1398096,  # 58254 slots of 24 bytes, of 4194311 // 3 = 1398103
        "mapSlotsPerThread": 58254,
        "mapKeysPerRoundPerThread": int(58254 * 0.9),
    }
    assert live_maps() == {(buffer["mapBytesPerThread"], buffer["mapSlotsPerThread"])}
    # A reload changes both; a file the cleaner cannot take (below 1 MiB per thread) is
    # refused whole, and the figures stay those of the maps in use.
    setup.settings.write_text("cleaner: {threads: 2, dedupeBufferBytes: 2097152}\n")
    worker.reload()
    buffer = volume_status(worker)["cleaner"]["dedupeBuffer"]
    assert (buffer["requestedBytes"], buffer["appliedBytes"], buffer["threads"]) == (
        2097152,
        2097152,
        2,
    )
    assert (
        live_maps()
        == {(1048560, 43690)}
        == {(buffer["mapBytesPerThread"], buffer["mapSlotsPerThread"])}
    )
    setup.settings.write_text("cleaner: {threads: 4, dedupeBufferBytes: 2097152}\n")
    worker.reload()
    assert "cleaner.dedupeBufferBytes: 2097152 bytes for 4 cleaner thread(s)" in (
        worker.settings_status.error or ""
    )
    assert volume_status(worker)["cleaner"]["dedupeBuffer"] == buffer
    assert live_maps() == {(1048560, 43690)}


def test_an_uncleanable_partition_is_retried_by_backoff_by_annotation_and_by_verb(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean that fails marks the partition uncleanable with its reason; status shows the mark
    and the failed compact-now; the cleaner retries after the backoff, at once on a new
    retry-uncleanable annotation value or verb; the mark stays until a retry succeeds."""
    from storagecore.cleaner.cleaner import Cleaner
    from storagecore.cleaner.uncleanable import RETRY_INITIAL_MS

    lazy = {**COMPACTED, "min.cleanable.dirty.ratio": 1.0}  # only forced rounds clean it
    setup.declare(topic_yaml("c", 1, lazy))
    worker = setup.start()
    assert worker.cleaner is not None and worker.log_manager is not None
    tp = TopicPartition("c", 0)
    fill(worker, tp)
    failures = iter([OSError(28, "No space left on device"), RuntimeError("still broken")])
    real_clean = Cleaner.clean

    def flaky_clean(self: Cleaner, *args: object, **kwargs: object) -> object:
        failure = next(failures, None)
        if failure is not None:
            raise RuntimeError(f"injected: {failure}")
        return real_clean(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Cleaner, "clean", flaky_clean)
    asked = worker.compact_now("c")[tp]
    assert asked.outcome.value == "pending"
    assert worker.cleaner.clean_filthiest() is None  # the round failed
    entry = next(p for p in volume_status(worker)["partitions"] if p["topic"] == "c")
    assert entry["uncleanable"] and "No space left on device" in entry["uncleanableReason"]
    assert entry["uncleanableMark"]["attempts"] == 1
    assert entry["uncleanableMark"]["retryAtMs"] == START_MS + RETRY_INITIAL_MS
    assert entry["compactNow"]["state"] == "failed"
    # Before the backoff passed, nothing is retried; the annotation asks at once.
    setup.clock.advance(1_000)
    assert worker.cleaner.clean_filthiest() is None
    assert worker.cleaner.manager.uncleanable_marks[tp].attempts == 1
    setup.declare(topic_yaml("c", 1, lazy, annotations={RETRY_UNCLEANABLE: "1"}))
    worker.reload()
    assert worker.cleaner.clean_filthiest() is None  # retried, failed again
    mark = worker.cleaner.manager.uncleanable_marks[tp]
    assert mark.attempts == 2 and "still broken" in mark.reason
    worker.reload()  # same value: no new retry
    assert worker.cleaner.manager.uncleanable_marks[tp].retry_at_ms > setup.clock.milliseconds()
    # The verb retries at once; this time the clean succeeds and the mark is gone.
    assert worker.retry_uncleanable("c") == [tp]
    stats = worker.cleaner.clean_filthiest()
    assert stats is not None
    entry = next(p for p in volume_status(worker)["partitions"] if p["topic"] == "c")
    assert not entry["uncleanable"] and entry["uncleanableMark"] is None
    assert entry["compactNow"]["state"] == "done"
    assert worker.retry_uncleanable(None) == []
