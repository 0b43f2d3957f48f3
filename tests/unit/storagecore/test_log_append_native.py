"""The native append (``storagecore.native_append.append_to_segment``: validation, the segment
write and its bookkeeping in one C call) against the general path (validation, producer state,
roll, ``LogSegment.append`` one step at a time), on the same requests.

Two logs with the same settings and clocks take the same sequence of generated requests, one
with the native append and one without it; the general path runs once with the native
validator and once with the pure-Python one (the specification). Every append must give the
same LogAppendInfo or the same error, and at every step both directories must hold
byte-identical files: segments, offset and time indexes, producer snapshots. A refused request
writes nothing. A spy counts the native writes, so a change that quietly stops taking the
native append fails here too.
"""

from __future__ import annotations

import dataclasses
import shutil
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from storagecore import (
    Compression,
    ControlType,
    Log,
    LogConfig,
    ManualClock,
    NewRecord,
    StorageError,
    build_batch,
    build_control_batch,
    log_validator,
    native_append,
)
from storagecore.index.base import AbstractIndex
from storagecore.log_validator import AppendOrigin
from storagecore.records import layout
from storagecore.records.crc import crc32c
from storagecore.records.file_records import FileRecords
from storagecore.records.layout import NO_TIMESTAMP
from storagecore.records.scan import append_to_segment, write_to_segment
from storagecore.segment import LogSegment
from tests.conftest import START_MS

pytestmark = pytest.mark.skipif(append_to_segment is None, reason="native speed-up not built")


class _Spy:
    """Calls the real native append and counts the appends it wrote."""

    def __init__(self) -> None:
        self.written = 0
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        assert append_to_segment is not None
        self.calls += 1
        result = append_to_segment(*args)
        if result is not None and len(result) == 6:  # written (six ints: scan.AppendToSegment)
            self.written += 1
        return result


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> _Spy:
    spy = _Spy()
    monkeypatch.setattr(native_append, "append_to_segment", spy)
    return spy


class _WriteSpy:
    """Calls the real write_to_segment (batches with producer ids) and counts its writes."""

    def __init__(self) -> None:
        self.written = 0

    def __call__(self, *args: Any) -> Any:
        assert write_to_segment is not None
        result = write_to_segment(*args)
        if result is not None:
            self.written += 1
        return result


@pytest.fixture
def write_spy(monkeypatch: pytest.MonkeyPatch) -> _WriteSpy:
    spy = _WriteSpy()
    monkeypatch.setattr(native_append, "write_to_segment", spy)
    return spy


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@dataclasses.dataclass(frozen=True)
class _Refused:
    error: str
    message: str


def _append(log: Log, data: bytes, origin: AppendOrigin) -> object:
    """The append's answer, or its refusal with the message as the log's own directory does not
    matter in it (each twin has its own: an error that names a segment file names it there)."""
    try:
        return log.append(data, origin=origin)
    except StorageError as exc:
        return _Refused(type(exc).__name__, str(exc).replace(str(log.directory), "<log dir>"))


class _Twins:
    """The log under test (native append) and its references (general path: native validator,
    pure-Python validator)."""

    def __init__(self, config: LogConfig, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = Path(tempfile.mkdtemp())
        self.clocks = [ManualClock(START_MS) for _ in range(3)]
        self.logs = [
            Log.open(self.root / f"t{i}" / "topic-0", config, clock)
            for i, clock in enumerate(self.clocks)
        ]
        self.monkeypatch = monkeypatch
        self.native_append = native_append.append_to_segment

    def close(self) -> None:
        for log in self.logs:
            log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def advance(self, ms: int) -> None:
        for clock in self.clocks:
            clock.advance(ms)

    def append(self, data: bytes, origin: AppendOrigin) -> list[object]:
        results = [_append(self.logs[0], data, origin)]
        with self.monkeypatch.context() as patch:
            patch.setattr(native_append, "append_to_segment", None)
            results.append(_append(self.logs[1], data, origin))
            patch.setattr(log_validator, "validate_uncompressed", None)
            results.append(_append(self.logs[2], data, origin))
        return results

    def directories(self) -> Iterator[dict[str, bytes]]:
        for log in self.logs:
            yield _files(log.directory)


record = st.builds(
    NewRecord,
    key=st.one_of(st.none(), st.binary(min_size=1, max_size=6)),
    value=st.one_of(st.none(), st.binary(max_size=300)),
    timestamp=st.integers(min_value=-2_000, max_value=4_000),
)
batch_args = st.fixed_dictionaries(
    {
        "records": st.lists(record, min_size=1, max_size=8),
        "producer": st.sampled_from([None, None, None, 7, 8]),
        "max_timestamp": st.one_of(st.none(), st.just(0)),
        "compression": st.sampled_from([Compression.NONE, Compression.NONE, Compression.LZ4]),
    }
)
request = st.fixed_dictionaries(
    {
        "batches": st.lists(batch_args, min_size=1, max_size=3),
        "origin": st.sampled_from([AppendOrigin.CLIENT] * 4 + [AppendOrigin.REPLICATION]),
        "mutation": st.one_of(
            st.none(), st.none(), st.tuples(st.integers(min_value=0), st.integers(0, 255))
        ),
        "fix_crc": st.booleans(),
        "cut": st.sampled_from([0, 0, 0, 1, 30]),
        "resend": st.integers(0, 5),
        "advance_ms": st.sampled_from([0, 0, 1, 700, 5_000]),
    }
)
configs = st.builds(
    LogConfig,
    segment_bytes=st.sampled_from([600, 2_000, 1 << 20]),
    segment_ms=st.sampled_from([1_000, 7 * 24 * 3_600_000]),
    segment_index_bytes=st.sampled_from([24, 4_096]),
    index_interval_bytes=st.sampled_from([1, 300, 4_096]),
    flush_messages=st.sampled_from([3, 2**63 - 1]),
    cleanup_policy=st.sampled_from([("delete",), ("compact",)]),
    message_timestamp_before_max_ms=st.sampled_from([2**63 - 1, 1_500]),
    max_message_bytes=st.sampled_from([1_048_588, 900]),
    compression_type=st.sampled_from(["producer", "producer", "uncompressed"]),
)


def _build(args: dict[str, Any], base_ms: int, sequences: dict[int, int], offset: int) -> bytes:
    records = [
        NewRecord(key=r.key, value=r.value, timestamp=base_ms + r.timestamp)
        for r in args["records"]
    ]
    producer = args["producer"]
    kwargs: dict[str, Any] = {}
    if producer is not None:
        kwargs = {
            "producer_id": producer,
            "producer_epoch": 0,
            "base_sequence": sequences.get(producer, 0),
        }
        sequences[producer] = sequences.get(producer, 0) + len(records)
    if args["max_timestamp"] is not None:
        kwargs["max_timestamp"] = base_ms  # a wrong max timestamp: rewritten, CRC recomputed
    return build_batch(records, base_offset=offset, compression=args["compression"], **kwargs)


@given(config=configs, requests=st.lists(request, min_size=1, max_size=10))
def test_native_append_matches_the_general_path(
    config: LogConfig, requests: list[dict[str, Any]]
) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        twins = _Twins(config, monkeypatch)
        try:
            _run(twins, requests)
        finally:
            twins.close()


def _run(twins: _Twins, requests: list[dict[str, Any]]) -> None:
    sequences: dict[int, int] = {}
    sent: list[bytes] = []
    for args in requests:
        twins.advance(args["advance_ms"])
        base_ms = twins.clocks[0].milliseconds()
        origin = args["origin"]
        if args["resend"] == 0 and sent:
            data = sent[-1]  # a producer's retry: a duplicate when it carries a producer id
        else:
            offset = twins.logs[0].log_end_offset if origin is AppendOrigin.REPLICATION else 0
            pieces = []
            for batch in args["batches"]:
                pieces.append(_build(batch, base_ms, sequences, offset))
                offset += len(batch["records"])
            data = _mutate(b"".join(pieces), args)
        sent.append(data)
        before = list(twins.directories())
        results = twins.append(data, origin)
        event("refused" if isinstance(results[0], _Refused) else "appended")
        assert results[0] == results[1] == results[2], data.hex()
        after = list(twins.directories())
        assert after[0] == after[1] == after[2]
        if isinstance(results[0], _Refused):
            assert after[0] == before[0], "a refused request changed the log's files"


def _mutate(data: bytes, args: dict[str, Any]) -> bytes:
    out = bytearray(data)
    if args["mutation"] is not None:
        position, value = args["mutation"]
        out[position % len(out)] = value
        if args["fix_crc"] and len(out) >= layout.RECORD_BATCH_OVERHEAD:
            (length,) = struct.unpack_from(">i", out, layout.LENGTH_OFFSET)
            end = min(len(out), max(layout.RECORD_BATCH_OVERHEAD, length + layout.LOG_OVERHEAD))
            struct.pack_into(
                ">I", out, layout.CRC_OFFSET, crc32c(bytes(out[layout.ATTRIBUTES_OFFSET : end]))
            )
    return bytes(out[: len(out) - args["cut"]])


def _ordinary(count: int, base_ms: int, **kwargs: Any) -> bytes:
    return build_batch(
        [NewRecord(key=b"k%d" % i, value=b"v" * 50, timestamp=base_ms + i) for i in range(count)],
        **kwargs,
    )


def test_ordinary_appends_take_the_native_append(tmp_path: Path, spy: _Spy) -> None:
    clock = ManualClock(START_MS)
    log = Log.open(tmp_path / "topic-0", LogConfig(index_interval_bytes=100), clock)
    infos = [log.append(_ordinary(5, START_MS)) for _ in range(4)]
    # All four are native; the second writes the first index entries, whose disk blocks (64 KiB
    # of each index) are reserved before the native call (OffsetIndex.native_scratch).
    assert spy.written == 4
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 4), (5, 9), (10, 14), (15, 19)]
    assert [r.offset for r in log.records()] == list(range(20))
    assert log.active_segment.offset_index.entries == 3  # one per append after the first
    log.close()


def test_native_appends_write_the_index_entries_of_the_general_path(
    tmp_path: Path, spy: _Spy
) -> None:
    """The native append writes each due offset and time entry into the mappings itself; the
    entries, the searched columns built before those appends, and lookups by offset and by
    time are those of the general path's LogSegment.append."""
    config = LogConfig(index_interval_bytes=100)
    logs = [
        Log.open(tmp_path / f"{name}" / "topic-0", config, ManualClock(START_MS)) for name in "ng"
    ]
    for step in range(12):
        # Timestamps that go down and up: some appends are due a time entry, some are not.
        data = _ordinary(3, START_MS + step * 10 - (step % 3) * 25)
        logs[0].append(data)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(native_append, "append_to_segment", None)
            logs[1].append(data)
        if step == 5:  # the lookup columns, built now, are extended by the next appends
            for log in logs:
                log.active_segment.offset_index.lookup(7)
                log.active_segment.time_index.lookup(START_MS + 20)
    assert spy.written == 12  # every append native, index blocks reserved before each call
    native, general = (log.active_segment for log in logs)
    for index in ("offset_index", "time_index"):
        ours, theirs = getattr(native, index), getattr(general, index)
        assert ours.entries == theirs.entries >= 3
        assert [ours.entry_at(n) for n in range(ours.entries)] == [
            theirs.entry_at(n) for n in range(theirs.entries)
        ]
    for offset in range(36):
        assert native.offset_index.lookup(offset) == general.offset_index.lookup(offset)
    for timestamp in range(START_MS - 35, START_MS + 130, 5):
        assert logs[0].offset_for_timestamp(timestamp) == logs[1].offset_for_timestamp(timestamp)
        assert native.time_index.lookup(timestamp) == general.time_index.lookup(timestamp)
    for log in logs:
        log.close()
    assert (tmp_path / "n" / "topic-0").is_dir()
    assert _files(tmp_path / "n" / "topic-0") == _files(tmp_path / "g" / "topic-0")


def test_producer_batches_are_written_natively_after_the_producer_checks(
    tmp_path: Path, spy: _Spy, write_spy: _WriteSpy
) -> None:
    """Idempotent batches: validated by append_to_segment, checked by the producer state, then
    written by write_to_segment; a retried batch answers with its original's offsets and
    writes nothing; a sequence gap is refused and writes nothing; a roll takes the general
    path."""
    clock = ManualClock(START_MS)
    log = Log.open(tmp_path / "topic-0", LogConfig(segment_bytes=1_000), clock)
    idempotent = _ordinary(3, START_MS, producer_id=9, producer_epoch=0, base_sequence=0)
    first = log.append(idempotent)
    assert (spy.calls, spy.written, write_spy.written) == (1, 0, 1)
    duplicate = log.append(idempotent)
    assert (duplicate.first_offset, duplicate.last_offset) == (first.first_offset, 2)
    assert log.log_end_offset == 3 and write_spy.written == 1
    size = log.size_bytes
    gap = _ordinary(1, START_MS, producer_id=9, producer_epoch=0, base_sequence=7)
    with pytest.raises(StorageError, match="sequence"):
        log.append(gap)
    assert log.size_bytes == size and log.log_end_offset == 3 and write_spy.written == 1
    follow = _ordinary(1, START_MS, producer_id=9, producer_epoch=0, base_sequence=3)
    log.append(follow)
    assert write_spy.written == 2 and log.producer_state.producers[9].last_sequence == 3
    log.append(_ordinary(12, START_MS))  # 358 + 771 bytes > 1000: rolls on the general path
    assert len(log.segments) == 2 and spy.written == 0
    log.append(_ordinary(1, START_MS))  # 771 + 120 bytes fit the new segment
    assert spy.written == 1
    assert [r.offset for r in log.records()] == list(range(17))
    log.close()


def test_transactions_and_their_markers_match_the_general_path(
    monkeypatch: pytest.MonkeyPatch, write_spy: _WriteSpy
) -> None:
    """Transactional batches take the native write; the markers that end a transaction (an
    ABORT indexes it in the .txnindex) take the general path's; the files, the answers and the
    producer state agree with the general path's and the pure-Python one's."""
    twins = _Twins(LogConfig(), monkeypatch)
    try:
        for pid, control in ((5, ControlType.ABORT), (6, ControlType.COMMIT)):
            for seq in (0, 2):
                data = _ordinary(
                    2,
                    START_MS,
                    producer_id=pid,
                    producer_epoch=0,
                    base_sequence=seq,
                    is_transactional=True,
                )
                results = twins.append(data, AppendOrigin.CLIENT)
                assert results[0] == results[1] == results[2]
            end = build_control_batch(
                control, producer_id=pid, producer_epoch=0, coordinator_epoch=0, timestamp=START_MS
            )
            results = twins.append(end, AppendOrigin.COORDINATOR)
            assert results[0] == results[1] == results[2]
            after = list(twins.directories())
            assert after[0] == after[1] == after[2]
        assert write_spy.written == 4  # the transactional data; not the markers
        states = [log.producer_state.producers for log in twins.logs]
        assert states[0] == states[1] == states[2]
        assert twins.logs[0].aborted_transactions(0, 100) == twins.logs[1].aborted_transactions(
            0, 100
        )
        assert len(twins.logs[0].aborted_transactions(0, 100)) == 1
    finally:
        twins.close()


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        (lambda d: d[:-1], "CorruptRecordError"),
        (lambda d: d[:30] + bytes([d[30] ^ 1]) + d[31:], "CorruptRecordError"),
        (lambda d: d[:16] + b"\x01" + d[17:], "CorruptRecordError"),
        (lambda d: struct.pack(">q", 5) + d[8:], "InvalidRecordError"),
    ],
)
def test_corrupt_requests_are_refused_alike_and_write_nothing(
    tmp_path: Path, damage: Any, error: str
) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        twins = _Twins(LogConfig(), monkeypatch)
        try:
            twins.append(_ordinary(4, START_MS), AppendOrigin.CLIENT)
            before = list(twins.directories())
            bad = _ordinary(4, START_MS)
            results = twins.append(bytes(damage(bad)), AppendOrigin.CLIENT)
            assert results[0] == results[1] == results[2]
            assert isinstance(results[0], _Refused) and results[0].error == error, results[0]
            assert "topic-0: batch 0 (byte 0 of the request)" in results[0].message
            assert list(twins.directories()) == before
            assert all(log.log_end_offset == 4 for log in twins.logs)
        finally:
            twins.close()


# -- the segment's state, case by case ------------------------------------------------------------
# The native call reads the active segment's state from its Python objects and writes the
# bookkeeping back (storagecore/records/_segment_append.c). Each case below drives the twins
# into one rule of that bookkeeping where a mistake shows in the files only after later appends;
# the spy shows that the native append took the appends it should.


def _same_everywhere(twins: _Twins, steps: list[tuple[int, bytes]]) -> None:
    """Advance the clocks and append, step by step; the three logs agree after each step."""
    for advance_ms, data in steps:
        twins.advance(advance_ms)
        results = twins.append(data, AppendOrigin.CLIENT)
        assert results[0] == results[1] == results[2]
        assert not isinstance(results[0], _Refused), results[0]
        after = list(twins.directories())
        assert after[0] == after[1] == after[2]


def _batch_at(timestamps: list[int], size: int = 50) -> bytes:
    return build_batch([NewRecord(key=b"k", value=b"v" * size, timestamp=ts) for ts in timestamps])


def test_a_time_roll_is_left_to_the_general_path(
    monkeypatch: pytest.MonkeyPatch, spy: _Spy
) -> None:
    """segment.ms measured from the first batch's timestamp: the append whose records pass it
    rolls (general path) in every log, and the appends before it stay native."""
    twins = _Twins(LogConfig(segment_ms=1_000), monkeypatch)
    try:
        _same_everywhere(
            twins,
            [
                (0, _batch_at([START_MS])),
                (0, _batch_at([START_MS + 500])),
                (0, _batch_at([START_MS + 2_000])),  # 2 000 ms after the first: a roll
                (0, _batch_at([START_MS + 2_100])),
            ],
        )
        assert len(twins.logs[0].segments) == 2
        assert spy.written == 3  # all but the rolling append
    finally:
        twins.close()


def test_the_rolling_timestamp_is_the_first_requests_max(
    monkeypatch: pytest.MonkeyPatch, spy: _Spy
) -> None:
    """The first request into a segment sets the timestamp time-based rolling measures from to
    the request's max timestamp (LogSegment.record_appended), not its first batch's: a later
    batch 1 500 ms after the first batch but 600 ms after the request's max does not roll."""
    twins = _Twins(LogConfig(segment_ms=1_000), monkeypatch)
    try:
        first = _batch_at([START_MS]) + _batch_at([START_MS + 900])
        _same_everywhere(twins, [(0, first), (0, _batch_at([START_MS + 1_500]))])
        assert len(twins.logs[0].segments) == 1
        assert spy.written == 2
    finally:
        twins.close()


def test_without_record_timestamps_the_segment_rolls_by_its_age(
    monkeypatch: pytest.MonkeyPatch, spy: _Spy
) -> None:
    """Records without timestamps (-1): time-based rolling measures the segment's age by the
    clock instead, and the append after segment.ms rolls."""
    twins = _Twins(LogConfig(segment_ms=1_000), monkeypatch)
    try:
        _same_everywhere(
            twins,
            [
                (0, _batch_at([NO_TIMESTAMP])),
                (600, _batch_at([NO_TIMESTAMP])),
                (600, _batch_at([NO_TIMESTAMP])),  # 1 200 ms after the segment was made
            ],
        )
        assert len(twins.logs[0].segments) == 2
        assert spy.written == 2
    finally:
        twins.close()


def test_index_entries_every_index_interval_bytes(
    monkeypatch: pytest.MonkeyPatch, spy: _Spy
) -> None:
    """Batches of ~190 bytes with index.interval.bytes 300: an entry every second append after
    the first, which needs the bytes since the last entry counted from the entry's own append."""
    twins = _Twins(LogConfig(index_interval_bytes=300), monkeypatch)
    try:
        _same_everywhere(twins, [(0, _batch_at([START_MS + i], size=100)) for i in range(9)])
        entries = twins.logs[0].active_segment.offset_index.entries
        assert entries == twins.logs[1].active_segment.offset_index.entries == 4
        assert spy.written == 9
    finally:
        twins.close()


def test_a_reopened_segment_reads_its_state_from_the_files(
    monkeypatch: pytest.MonkeyPatch, spy: _Spy
) -> None:
    """After a close and reopen the segment's next offset, max timestamp and rolling timestamp
    are not cached yet: the native call has them computed (the segment's own methods) and then
    decides the time roll as the general path does."""
    twins = _Twins(LogConfig(segment_ms=1_000), monkeypatch)
    try:
        _same_everywhere(twins, [(0, _batch_at([START_MS])), (0, _batch_at([START_MS + 400]))])
        for i, log in enumerate(twins.logs):
            log.close()
            twins.logs[i] = Log.open(log.directory, log.config, twins.clocks[i])
        _same_everywhere(
            twins,
            [(0, _batch_at([START_MS + 800])), (0, _batch_at([START_MS + 1_200]))],  # rolls
        )
        assert [len(log.segments) for log in twins.logs] == [2, 2, 2]
        assert twins.logs[0].log_end_offset == 4
        assert spy.written == 3
    finally:
        twins.close()


def test_the_attributes_the_native_append_reaches_directly_are_slots() -> None:
    """The native append reads and writes these attributes at their __slots__ offsets
    (storagecore/records/_slots.h): a class that moved one back into its instance dict would
    still append correctly, only slower (the generic attribute calls) — this keeps them slots."""
    from storagecore.records import _native  # only with the extension, as this module

    owners = (LogSegment, AbstractIndex, FileRecords)
    assert len(_native.APPEND_SLOTS) == 20
    for name in _native.APPEND_SLOTS:
        kinds = [type(vars(owner).get(name)).__name__ for owner in owners]
        assert kinds.count("member_descriptor") == 1, (name, kinds)
