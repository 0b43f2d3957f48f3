"""Every file Logkeeper writes or cleans passes Kafka's own ``kafka-dump-log.sh``
(``DumpLogSegments`` of kafka-tools 4.3.1): segments of every codec with idempotent and
transactional batches and their markers, segments after a clean, their indexes (Kafka's
``--verify-index-only`` and ``--index-sanity-check``), the transaction indexes (``.txnindex``,
written on ABORT markers and by the cleaner for the markers it keeps) and the producer-state
snapshots.

Kafka's deep iteration must find every batch valid and the same records (offsets and keys) as
storagecore reads; its dump of each ``.snapshot`` must be line for line ``logkeeper
dump-log``'s, its dump of each ``.txnindex`` the entries storagecore reads from it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from storagecore import (
    AppendOrigin,
    Compression,
    ControlType,
    Log,
    LogConfig,
    ManualClock,
    NewRecord,
    build_batch,
    build_control_batch,
)
from storagecore.cleaner import Cleaner, CleanRequest
from storagecore.cleaner.log_to_clean import cleanable_offsets, log_to_clean
from storagecore.cleaner.offset_map import SkimpyOffsetMap
from storagecore.index.transaction_index import TransactionIndex
from storagecore.records.batch import Record
from storagecore.tools.dump import dump_file
from tests.conftest import START_MS
from tests.kafka_support import dump_log_segments

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        bool(dump_log_segments.missing_tools()),
        reason=f"needs {dump_log_segments.missing_tools()} for Kafka's DumpLogSegments",
    ),
]

_RECORD = re.compile(r"^\| offset: (\d+) .* key: (\S*)(?: payload: .*)?$")  # a tombstone has none
_MARKER = re.compile(r"^\| offset: (\d+) .* endTxnMarker: (COMMIT|ABORT) coordinatorEpoch: (\d+)$")
_BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) .* isvalid: (true|false)$")


def records(count: int, tag: str, ts: int, keys: int | None = None) -> list[NewRecord]:
    names = [f"{tag}-{i if keys is None else i % keys}" for i in range(count)]
    return [NewRecord(n.encode(), f"v-{tag}-{i}".encode(), ts + i) for i, n in enumerate(names)]


def write_mixed_log(directory: Path, clock: ManualClock) -> Log:
    """Every codec; plain, idempotent and transactional batches; COMMIT and ABORT markers;
    several segments with index entries, rolled snapshots and the close's."""
    log = Log.open(directory, LogConfig(segment_bytes=4096, index_interval_bytes=256), clock)
    sequence = txn_sequence = 0
    for i in range(60):
        codec = list(Compression)[i % len(Compression)]
        batch_records = records(5, f"b{i}", START_MS + i * 10)
        if i % 3 == 1:  # an idempotent producer
            log.append(
                build_batch(batch_records, compression=codec, producer_id=11,
                            producer_epoch=0, base_sequence=sequence)
            )  # fmt: skip
            sequence += 5
        elif i % 6 == 2:  # a transaction of one batch, decided by a marker
            log.append(
                build_batch(batch_records, compression=codec, producer_id=12, producer_epoch=1,
                            base_sequence=txn_sequence, is_transactional=True)
            )  # fmt: skip
            txn_sequence += 5
            decision = ControlType.ABORT if i % 12 == 2 else ControlType.COMMIT
            log.append(
                build_control_batch(decision, producer_id=12, producer_epoch=1,
                                    coordinator_epoch=7, timestamp=START_MS + i * 10),
                origin=AppendOrigin.COORDINATOR,
            )  # fmt: skip
        else:
            log.append(build_batch(batch_records, compression=codec))
    return log


def write_cleaned_log(directory: Path, clock: ManualClock, *, transactions: bool = False) -> Log:
    """A compacted log after a clean: overwritten keys, tombstones, every codec, an
    idempotent producer whose last batch the cleaner keeps; with ``transactions``, aborted
    transactions whose markers (and ``.txnindex`` entries) the clean keeps."""
    config = LogConfig(
        cleanup_policy=("compact",), segment_bytes=2048, index_interval_bytes=128,
        file_delete_delay_ms=0,
    )  # fmt: skip
    log = Log.open(directory, config, clock)
    for i in range(80):
        codec = list(Compression)[i % len(Compression)]
        batch_records = records(4, "key", START_MS + i, keys=13)
        if i % 10 == 9:
            batch_records[0] = NewRecord(batch_records[0].key, None, START_MS + i)  # tombstone
        producer = {"producer_id": 21, "producer_epoch": 0, "base_sequence": 4 * (i // 7)}
        log.append(
            build_batch(batch_records, compression=codec, **(producer if i % 7 == 0 else {}))
        )  # type: ignore[arg-type]
        if (
            transactions and i % 20 == 5
        ):  # an aborted transaction: its data goes, its marker and entry stay
            log.append(
                build_batch(records(2, f"t{i}", START_MS + i), producer_id=22, producer_epoch=0,
                            base_sequence=2 * (i // 20), is_transactional=True)
            )  # fmt: skip
            log.append(
                build_control_batch(ControlType.ABORT, producer_id=22, producer_epoch=0,
                                    coordinator_epoch=7, timestamp=START_MS + i),
                origin=AppendOrigin.COORDINATOR,
            )  # fmt: skip
    # A committed transaction last: producer 22's last batch is not an aborted one, which the
    # cleaner would keep empty (Kafka's --verify-index-only then reports its time index entry,
    # pointing at a batch without records, as a mismatch: Kafka's cleaner writes the same).
    if transactions:
        log.append(
            build_batch(records(2, "t-last", START_MS + 80), producer_id=22, producer_epoch=0,
                        base_sequence=8, is_transactional=True)
        )  # fmt: skip
        log.append(
            build_control_batch(ControlType.COMMIT, producer_id=22, producer_epoch=0,
                                coordinator_epoch=7, timestamp=START_MS + 80),
            origin=AppendOrigin.COORDINATOR,
        )  # fmt: skip
    log.roll()
    now = clock.milliseconds()
    offsets = cleanable_offsets(log, None, now)
    to_clean = log_to_clean(log, offsets, now)
    stats = Cleaner(offset_map=SkimpyOffsetMap(64 * 1024)).clean(
        CleanRequest(log, to_clean.first_dirty_offset, to_clean.first_uncleanable_offset), now
    )
    assert stats.messages_read > stats.messages_written > 0, "the clean removed records"
    assert stats.segments_replaced > 1
    return log


def offset_gaps(stderr: str) -> dict[str, list[tuple[int, int]]]:
    """Kafka's "Non-consecutive offsets in <file>" report: per file, (offset, next offset)
    pairs. Anything else on stderr fails the test. Kafka 4.3's tool starts each file at -1, so
    every segment not based at 0 reports ``-1 is followed by <base>``."""
    gaps: dict[str, list[tuple[int, int]]] = {}
    current: list[tuple[int, int]] | None = None
    for line in stderr.splitlines():
        if line.startswith("Non-consecutive offsets in "):
            current = gaps.setdefault(
                Path(line.removeprefix("Non-consecutive offsets in ")).name, []
            )
            continue
        found = re.fullmatch(r"  (-?\d+) is followed by (\d+)", line)
        assert found is not None and current is not None, f"unexpected on stderr: {line!r}"
        current.append((int(found.group(1)), int(found.group(2))))
    return gaps


def chunk_entry_mismatches(stderr: str) -> str:
    """``stderr`` of ``--verify-index-only`` without the reports of offset index entries that
    carry the last offset of a cleaned chunk of several batches at the chunk's start (Kafka's
    ``LogSegment.append`` indexes a chunk so, and its cleaner appends a read buffer's retained
    batches as one chunk: the tool reports Kafka's own cleaned segments the same way). Small
    batches, such as markers, make such chunks."""
    kept: list[str] = []
    header: str | None = None
    for line in stderr.splitlines():
        if line.startswith("Mismatches in :") and line.endswith(".index"):
            header = line
            continue
        found = re.fullmatch(r"  Index offset: (\d+), log offset: (\d+)", line)
        if header is not None and found and int(found.group(1)) > int(found.group(2)):
            continue
        if header is not None and not found:
            header = None
        kept.append(line)
    return "\n".join(kept)


def check_with_kafka(log: Log, *, compacted: bool, chunked_entries: bool = False) -> None:
    directory = log.directory
    ours_data = [(r.offset, (r.key or b"").decode()) for r in log.records(include_control=False)]
    log.flush()
    log.close()
    segments = sorted(directory.glob("*.log"))
    txn_indexes = sorted(directory.glob("*.txnindex"))
    ours_aborted = [
        f"version: 0 producerId: {t.producer_id} firstOffset: {t.first_offset} "
        f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}"
        for path in txn_indexes
        for t in TransactionIndex(path, int(path.name.split(".")[0])).entries()
    ]
    assert bool(ours_aborted) == any(
        r.key == b"\x00\x00\x00\x00" for r in log_records_with_control(directory)
    ), "every log with a kept ABORT marker (of a transaction with data) has index entries"
    indexes = sorted(directory.glob("*.index")) + sorted(directory.glob("*.timeindex"))
    snapshots = sorted(directory.glob("*.snapshot"))
    assert len(segments) > 2 and snapshots

    deep = dump_log_segments.dump(segments, "--deep-iteration", "--print-data-log")
    gaps = offset_gaps(deep.stderr)
    for segment in segments:
        base = int(segment.name.split(".")[0])
        pairs = gaps.pop(segment.name, [])
        if not compacted:  # every offset present: only the tool's own report of each base
            assert pairs == ([(-1, base)] if base > 0 else []), (segment.name, pairs)
            continue
        # Gaps only where the cleaner removed records, always forward.
        assert all(a < b for a, b in pairs), (segment.name, pairs)
        assert not pairs or (pairs[0][0] == -1 and pairs[0][1] >= base), (segment.name, pairs)
    assert gaps == {}
    lines = deep.stdout.splitlines()
    batches = [m for m in map(_BATCH.match, lines) if m]
    assert batches and all(m.group(3) == "true" for m in batches), "every batch valid"
    assert not [line for line in lines if "invalid" in line.lower() or "corrupt" in line.lower()]
    kafka_data = [(int(m.group(1)), m.group(2)) for m in map(_RECORD.match, lines) if m]
    assert kafka_data == ours_data
    markers = [m.groups() for m in map(_MARKER.match, lines) if m]
    ours_markers = [
        (str(r.offset), "ABORT" if r.key == b"\x00\x00\x00\x00" else "COMMIT", "7")
        for r in log_records_with_control(directory)
        if r.offset not in {o for o, _ in ours_data}
    ]
    assert markers == ours_markers
    assert compacted or {kind for _, kind, _ in markers} == {"COMMIT", "ABORT"}

    verified = dump_log_segments.dump(indexes, "--verify-index-only")
    assert (chunk_entry_mismatches(verified.stderr) if chunked_entries else verified.stderr) == ""
    problems = [
        line for line in verified.stdout.splitlines()
        if "ismatch" in line or "out of order" in line or "Exception" in line
    ]  # fmt: skip
    assert problems == [], verified.stdout

    sanity = dump_log_segments.dump(indexes, "--index-sanity-check")
    assert sanity.stderr == ""
    for path in indexes:
        assert re.search(
            rf"{re.escape(str(path))} (passed sanity check|is empty)", sanity.stdout
        ), f"{path}: {sanity.stdout}"
    assert "failed" not in sanity.stdout

    if txn_indexes:
        kafka_txn = dump_log_segments.dump(txn_indexes)
        assert kafka_txn.stderr == ""
        kafka_aborted = [line for line in kafka_txn.stdout.splitlines() if line.startswith("v")]
        assert kafka_aborted == ours_aborted

    kafka_snapshots = dump_log_segments.dump(snapshots)
    assert kafka_snapshots.stderr == ""
    ours = [line for path in snapshots for line in dump_file(path)]
    assert kafka_snapshots.stdout.splitlines() == ours
    assert any(line.startswith("producerId: ") for line in ours)


def log_records_with_control(directory: Path) -> list[Record]:
    log = Log.open(directory, LogConfig(), ManualClock(START_MS), had_clean_shutdown=True)
    try:
        return list(log.records(include_control=True))
    finally:
        log.close()


def test_a_log_of_every_codec_with_transactions_passes_dump_log_segments(
    tmp_path: Path, clock: ManualClock
) -> None:
    check_with_kafka(write_mixed_log(tmp_path / "mixed-0", clock), compacted=False)


def test_a_cleaned_log_passes_dump_log_segments(tmp_path: Path, clock: ManualClock) -> None:
    check_with_kafka(write_cleaned_log(tmp_path / "cleaned-0", clock), compacted=True)


def test_a_cleaned_log_with_aborted_transactions_passes_dump_log_segments(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The cleaned segments' ``.txnindex`` files (the markers the clean keeps) as Kafka reads
    them."""
    log = write_cleaned_log(tmp_path / "cleaned-0", clock, transactions=True)
    check_with_kafka(log, compacted=True, chunked_entries=True)
