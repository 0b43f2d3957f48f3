"""A log dir written by Kafka's broker, read and cleaned by storagecore (issue 18, point 3).

The broker (:func:`restartable_broker`) holds a topic per codec (records with headers, written
by Kafka's Java producer), a compacted topic whose segments roll by ``segment.ms``, and a topic
of transactions committed and aborted by the Java client's transactional producer (with their
markers). The Java consumer reads every topic, read_committed and read_uncommitted, and
ListOffsets answers a timestamp lookup per record; then the broker stops cleanly and its
partition dirs are copied (with its checkpoints and clean-shutdown marker). Then Kafka's
cleaner runs on the compacted topic (its dirty ratio lowered from 1.0, which never cleans, to
0.01; the test waits on ``cleaner-offset-checkpoint``) and the broker stops again for a second
copy.

storagecore's :class:`LogManager` opens the copies and must read, record for record (offset,
timestamp, key, value, headers), what the Java consumer read, at both isolation levels; its
timestamp lookups (Kafka's ``.timeindex`` and ``.index``, loaded as they are: no index is
rebuilt) must answer as the broker's ListOffsets did; the aborted transactions it reads from
Kafka's ``.txnindex`` files must be those the files hold (last stable offsets included), and
those its own walk of the markers derives too (what it rebuilds a lost file from); the
producers it loads from Kafka's ``.snapshot`` must be the ones in the file. Its cleaner, run on
the copy taken before Kafka's clean, must keep exactly the records Kafka's cleaner kept and
write the same ``.txnindex`` entries, and on the copy taken after it must find nothing to clean
(Kafka's ``cleaner-offset-checkpoint`` is understood).
"""

from __future__ import annotations

import base64
import logging
import shutil
import struct
import threading
from pathlib import Path
from typing import Any

import pytest

from storagecore import LogConfig, LogManager, TopicPartition
from storagecore.cleaner.log_cleaner import LogCleaner
from storagecore.config import CleanerConfig
from storagecore.index.transaction_index import ENTRY, TransactionIndex
from storagecore.log import Log
from storagecore.producer_state.snapshot import read_snapshot
from storagecore.records.batch import RecordBatch, iter_complete_batches
from storagecore.transactions import AbortedTxn
from tests.integration.peer.conftest import CODECS, create_on_broker, wait_for_leaders
from tests.kafka_support.broker import KafkaBroker
from tests.kafka_support.java_client import java_client
from tests.kafka_support.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.kafka_peer]

COMPACTED = "disk-compacted"
TXN = "disk-txn"
SEGMENT_MS = 300
COMPACTED_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": str(SEGMENT_MS),
    "min.cleanable.dirty.ratio": "1.0",  # a ratio above 1 is never reached: no clean yet
}
TOPICS: dict[str, tuple[int, dict[str, str]]] = {
    **{f"disk-{codec}": (1, {}) for codec in CODECS},
    COMPACTED: (1, COMPACTED_CONFIG),
    TXN: (1, COMPACTED_CONFIG),
}
CLEANED = (COMPACTED, TXN)
#: What storagecore must know of each topic (the Kafka topic configs that matter to it).
CONFIGS = {
    name: LogConfig.from_topic_config(config) if config else LogConfig()
    for name, (_count, config) in TOPICS.items()
}
KAFKA_FILES = (
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
    "cleaner-offset-checkpoint",
    ".kafka_cleanshutdown",
)
TXN_INDEX_ENTRY = struct.Struct(">hqqqq")
"""Kafka's ``AbortedTxn``: version, producer id, first offset, last offset (the marker's),
last stable offset (written out here, to check storagecore's reader against it)."""
assert TXN_INDEX_ENTRY.format == ENTRY.format

Row = list[Any]  # [offset, timestamp, key, value, [[header key, header value], ...]]


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def copy_log_dir(broker: KafkaBroker, target: Path) -> Path:
    """The partition dirs of TOPICS and the broker's checkpoint files and clean-shutdown marker
    (not its KRaft metadata log, which is no topic's)."""
    target.mkdir(parents=True)
    for name in TOPICS:
        shutil.copytree(broker.log_dir / f"{name}-0", target / f"{name}-0")
    for name in KAFKA_FILES:
        if (broker.log_dir / name).is_file():
            shutil.copy2(broker.log_dir / name, target / name)
    assert (target / ".kafka_cleanshutdown").is_file(), "the broker stopped cleanly"
    return target


def open_manager(directory: Path) -> LogManager:
    return LogManager([directory], config_for=CONFIGS)


def batches(log: Log) -> list[RecordBatch]:
    found: list[RecordBatch] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        fetch = log.read(offset, 1 << 20)
        for _, batch in iter_complete_batches(fetch.records):
            batch.validate()
            found.append(batch)
            offset = batch.next_offset
    return found


def rows(log: Log, aborted: list[AbortedTxn] | None = None) -> list[Row]:
    """Every record as the Java consumer sees it; with ``aborted``, read_committed (the data
    of aborted transactions left out, as a consumer does with the aborted list of a Fetch)."""
    out: list[Row] = []
    for batch in batches(log):
        if batch.is_control:
            continue
        if (
            aborted is not None
            and batch.is_transactional
            and any(
                t.producer_id == batch.producer_id
                and t.first_offset <= batch.base_offset < t.last_offset
                for t in aborted
            )
        ):
            continue
        for record in batch.records():
            headers = [[key, b64(value)] for key, value in record.headers]
            out.append(
                [record.offset, record.timestamp, b64(record.key), b64(record.value), headers]
            )
    return out


def java_read(address: str, isolation: str, *topics: str) -> dict[str, Any]:
    """What the Java consumer read of each topic (one JVM for all)."""
    return java_client("read", address, isolation, *topics, program="LogDirClient")


def list_offset(address: str, topic: str, timestamp: int) -> int:
    with RawClient(address) as client:
        answer = client.call(
            2,
            7,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}
                ],
            },
        )
    part = answer["topics"][0]["partitions"][0]
    assert part["error_code"] == 0, part
    offset: int = part["offset"]
    return offset


def kafka_aborted(partition_dir: Path) -> dict[str, list[AbortedTxn]]:
    """The entries of the broker's ``.txnindex`` files, in file order, by file name (decoded
    here, not by storagecore)."""
    found: dict[str, list[AbortedTxn]] = {}
    for path in sorted(partition_dir.glob("*.txnindex")):
        data = path.read_bytes()
        assert len(data) % TXN_INDEX_ENTRY.size == 0, path
        entries = found.setdefault(path.name, [])
        for position in range(0, len(data), TXN_INDEX_ENTRY.size):
            version, pid, first, last, lso = TXN_INDEX_ENTRY.unpack_from(data, position)
            assert version == 0, path
            entries.append(AbortedTxn(first, last, pid, lso))
    return found


def storagecore_txn_indexes(partition_dir: Path) -> dict[str, list[AbortedTxn]]:
    """The same files as storagecore's reader reads them."""
    return {
        path.name: TransactionIndex(path, int(path.name.split(".")[0])).entries()
        for path in sorted(partition_dir.glob("*.txnindex"))
    }


def checkpoint_entries(path: Path) -> dict[str, int]:
    """The offsets of partition 0 of each topic in one of Kafka's offset checkpoint files."""
    if not path.is_file():
        return {}
    found = {}
    for line in path.read_text().splitlines()[2:]:
        name, partition, offset = line.split()
        if partition == "0":
            found[name] = int(offset)
    return found


def wait_for_kafka_clean(broker: KafkaBroker) -> dict[str, int]:
    """Until the broker's cleaner checkpoint lists both compacted topics (a condition polled
    with a short pause: the file is all the broker shows of a finished clean)."""
    pause = threading.Event()
    found: dict[str, int] = {}
    for _ in range(600):
        found = checkpoint_entries(broker.log_dir / "cleaner-offset-checkpoint")
        if all(found.get(name, 0) > 0 for name in CLEANED):
            return found
        pause.wait(0.1)
    raise AssertionError(f"Kafka's cleaner did not clean {CLEANED} ({found}):\n{broker.log_tail()}")


def lower_dirty_ratio(address: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": address})
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            name,
            incremental_configs=[
                ConfigEntry(
                    "min.cleanable.dirty.ratio",
                    "0.01",
                    incremental_operation=AlterConfigOpType.SET,
                )
            ],
        )
        for name in CLEANED
    ]
    for future in admin.incremental_alter_configs(resources).values():
        future.result(30)


@pytest.fixture(scope="module")
def written(
    restartable_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The broker's topics written and read by the Java client, and two copies of its log dir:
    before and after Kafka's cleaner ran on the compacted topic."""
    broker = restartable_broker
    address = broker.address
    create_on_broker(address, TOPICS)
    pairs = [f"disk-{codec}={codec}" for codec in CODECS]
    java_client("produce", address, 200, *pairs, program="LogDirClient")
    java_client("compacted", address, COMPACTED, 4, SEGMENT_MS + 50, program="LogDirClient")
    java_client("transactions", address, TXN, SEGMENT_MS + 50, program="LogDirClient")
    reads = {
        (name, isolation): answer
        for isolation in ("read_uncommitted", "read_committed")
        for name, answer in java_read(address, isolation, *TOPICS).items()
    }
    lookups = {
        name: [
            (row[1], list_offset(address, name, row[1]))
            for row in reads[name, "read_uncommitted"]["records"][::7]
        ]
        for name in TOPICS
    }
    root = tmp_path_factory.mktemp("broker-log-dir")
    broker.stop()
    before = copy_log_dir(broker, root / "before")
    broker.start()
    wait_for_leaders(address, TOPICS)
    lower_dirty_ratio(address)
    kafka_checkpoints = wait_for_kafka_clean(broker)
    cleaned_reads = java_read(address, "read_uncommitted", *CLEANED)
    broker.stop()
    after = copy_log_dir(broker, root / "after")
    broker.start()
    return {
        "reads": reads,
        "lookups": lookups,
        "before": before,
        "after": after,
        "kafka checkpoints": kafka_checkpoints,
        "cleaned reads": cleaned_reads,
    }


def test_every_record_reads_as_the_java_consumer_read_it(
    written: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.INFO, logger="storagecore"),
        open_manager(written["before"]) as manager,
    ):
        assert manager.had_clean_shutdown(written["before"].resolve())
        for name in TOPICS:
            log = manager.get_log(TopicPartition(name, 0))
            uncommitted = written["reads"][name, "read_uncommitted"]
            committed = written["reads"][name, "read_committed"]
            assert log.log_end_offset == uncommitted["end"], name
            assert log.last_stable_offset == committed["end"], name
            assert rows(log) == uncommitted["records"], name
            aborted = log.aborted_transactions(log.log_start_offset, log.last_stable_offset)
            assert rows(log, aborted) == committed["records"], name
            for timestamp, offset in written["lookups"][name]:
                found = log.offset_for_timestamp(timestamp)
                assert found is not None and found.offset == offset, (name, timestamp)
    # Kafka's indexes passed storagecore's checks as they are: nothing rebuilt or recovered.
    assert "Rebuilding indexes" not in caplog.text
    assert "Recovering" not in caplog.text
    assert "(unclean shutdown)" not in caplog.text
    codecs = written["reads"]["disk-zstd", "read_uncommitted"]["records"]
    assert len(codecs) == 200 and codecs[5][4] == [["h0", b64(b"header-0-key-5")], ["h1", None]]


def test_transactions_markers_txnindex_and_snapshots_are_understood(
    written: dict[str, Any],
) -> None:
    directory = written["before"] / f"{TXN}-0"
    kafka_txn_index = kafka_aborted(directory)
    kafka_entries = [txn for entries in kafka_txn_index.values() for txn in entries]
    assert storagecore_txn_indexes(directory) == kafka_txn_index
    kafka_snapshots = sorted(directory.glob("*.snapshot"))
    assert kafka_snapshots, "the broker's clean shutdown wrote a producer snapshot"
    newest = read_snapshot(kafka_snapshots[-1])
    txn_files = {p.name: p.read_bytes() for p in directory.glob("*.txnindex")}
    with open_manager(written["before"]) as manager:
        log = manager.get_log(TopicPartition(TXN, 0))
        # Two aborted transactions of five (ten records in two batches each) and the markers,
        # as a read_committed fetch gets them (from the files), at every start offset.
        assert log.aborted_transactions(0, log.log_end_offset) == sorted(kafka_entries)
        assert len(kafka_entries) == 2
        for start in range(log.log_end_offset):
            assert log.aborted_transactions(start, log.log_end_offset) == sorted(
                t for t in kafka_entries if t.last_offset >= start
            )
        # The walk of the markers (what a lost file is rebuilt from) finds the same entries,
        # Kafka's last stable offsets included.
        state = log.transaction_state()
        assert state.aborted == kafka_entries
        assert not state.open_first_offsets
        committed = written["reads"][TXN, "read_committed"]["records"]
        uncommitted = written["reads"][TXN, "read_uncommitted"]["records"]
        assert (len(committed), len(uncommitted)) == (30, 50)
        # The producer loaded from Kafka's snapshot at the log end is the one in the file.
        assert len(newest) == 1
        entry = log.producer_state.last_entry(newest[0].producer_id)
        assert entry is not None
        assert (entry.producer_epoch, entry.last_sequence, entry.last_data_offset) == (
            newest[0].producer_epoch,
            newest[0].last_sequence,
            newest[0].last_data_offset,
        )
        assert entry.current_txn_first_offset is None
        assert entry.coordinator_epoch == newest[0].coordinator_epoch
    # storagecore leaves the broker's .txnindex files as they were (it reads them, and
    # writes only on new ABORT markers, recovery and cleaning).
    assert {p.name: p.read_bytes() for p in directory.glob("*.txnindex")} == txn_files


@pytest.mark.parametrize("name", CLEANED)
def test_the_cleaner_keeps_what_kafkas_cleaner_kept(written: dict[str, Any], name: str) -> None:
    tp = TopicPartition(name, 0)
    with open_manager(written["before"]) as manager:
        log = manager.get_log(tp)
        assert len(log.segments) >= 4, "segment.ms rolled a segment per round"
        assert rows(log) == written["reads"][name, "read_uncommitted"]["records"]
        cleaner = LogCleaner(manager, CleanerConfig(dedupe_buffer_size=1 << 20))
        stats = cleaner.clean_log(tp)
        assert stats is not None
        assert stats.end_offset == written["kafka checkpoints"][name], "the same cleanable range"
        ours = rows(log)
        our_batches = [(b.base_offset, b.last_offset, len(b.records())) for b in batches(log)]
        our_aborted = log.aborted_transactions(0, log.log_end_offset)
        our_files = storagecore_txn_indexes(log.directory)
    with open_manager(written["after"]) as manager:
        log = manager.get_log(tp)
        theirs = rows(log)
        their_batches = [(b.base_offset, b.last_offset, len(b.records())) for b in batches(log)]
        # Kafka's cleaner checkpoint is read: nothing is left to clean.
        assert LogCleaner(manager, CleanerConfig(dedupe_buffer_size=1 << 20)).clean_log(tp) is None
        assert rows(log) == theirs
        assert log.aborted_transactions(0, log.log_end_offset) == our_aborted
        # The cleaned segments' .txnindex entries: Kafka's cleaner's (file by file, where the
        # two cleaners made the same segments).
        their_files = kafka_aborted(log.directory)
    assert [t for e in our_files.values() for t in e] == [
        t for e in their_files.values() for t in e
    ]
    if our_files.keys() == their_files.keys():
        assert our_files == their_files
    assert theirs == written["cleaned reads"][name]["records"]
    assert ours == theirs
    assert our_batches == their_batches
    assert len(theirs) < len(written["reads"][name, "read_uncommitted"]["records"])
    if name == COMPACTED:
        kept = {row[2] for row in theirs}
        assert b64(b"k0") in kept, "a first clean keeps tombstones (delete.retention.ms)"
    else:
        # The aborted transactions' data is gone from the cleaned segments, on both.
        keys = [base64.b64decode(row[2]) for row in theirs if row[2] is not None]
        assert not any(key.startswith((b"txn-1-", b"txn-3-")) for key in keys)
        assert any(key.startswith(b"txn-2-") for key in keys)
