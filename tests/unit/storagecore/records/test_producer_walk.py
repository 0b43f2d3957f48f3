"""The producer walk: the native call and the pure-Python reference agree on every region, and
the transaction state built on it equals one built from every batch of the log."""

from __future__ import annotations

import importlib
import os
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storagecore import LogConfig, NewRecord, build_batch
from storagecore.clock import ManualClock
from storagecore.errors import CorruptRecordError
from storagecore.log import Log
from storagecore.log_validator import AppendOrigin
from storagecore.records import _headers_py, file_records, layout, producer_walk
from storagecore.records.batch import ControlType
from storagecore.records.file_records import FileRecords
from storagecore.records.memory_records_builder import build_control_batch
from storagecore.transactions import TransactionState

try:
    _native = importlib.import_module("storagecore.records._native")
except ImportError:  # pragma: no cover - the build is checked by the implementation test
    _native = None

needs_native = pytest.mark.skipif(_native is None, reason="native speed-up not built")
_LENGTH = struct.Struct(">i")


def test_expected_implementation_is_loaded() -> None:
    forced_python = os.environ.get("STORAGECORE_NO_EXTENSIONS", "") not in ("", "0")
    assert ("python" if forced_python else "c") == producer_walk.IMPLEMENTATION


def _legacy_entry(offset: int, size: int) -> bytes:
    """A magic-1 log entry of ``size`` bytes (offset, length, then magic at byte 16)."""
    body = bytearray(size - layout.LOG_OVERHEAD)
    body[layout.MAGIC_OFFSET - layout.LOG_OVERHEAD] = 1
    return struct.pack(">qi", offset, len(body)) + bytes(body)


@st.composite
def regions(draw: st.DrawFn, kinds: str = "pdcl") -> bytes:
    """Batches of the kinds: p with a producer, d without, c control, l legacy; B and P large
    (4-100 KB: past the native file walk's 4 KiB hop and 64 KiB window), without and with a
    producer."""
    parts: list[bytes] = []
    offset = 0
    for kind in draw(st.lists(st.sampled_from(kinds), max_size=12)):
        if kind in "BP":
            size = draw(st.integers(4 << 10, 100 << 10))
            producer = {"producer_id": 5, "producer_epoch": 0} if kind == "P" else {}
            parts.append(
                build_batch(
                    [NewRecord(key=b"k", value=bytes(size))],
                    base_offset=offset,
                    **producer,  # type: ignore[arg-type]
                )
            )
            offset += 1
            continue
        if kind == "l":
            parts.append(_legacy_entry(offset, draw(st.integers(26, 80))))
            offset += 1
            continue
        if kind == "c":
            parts.append(
                build_control_batch(
                    draw(st.sampled_from([ControlType.COMMIT, ControlType.ABORT])),
                    producer_id=draw(st.integers(0, 3)),
                    producer_epoch=0,
                    coordinator_epoch=0,
                    timestamp=1,
                    base_offset=offset,
                )
            )
            offset += 1
            continue
        count = draw(st.integers(1, 4))
        producer = {"producer_id": draw(st.integers(0, 3)), "producer_epoch": 0}
        parts.append(
            build_batch(
                [NewRecord(key=b"k", value=b"v") for _ in range(count)],
                base_offset=offset,
                **(producer if kind == "p" else {}),  # type: ignore[arg-type]
            )
        )
        offset += count
    region = bytearray(b"".join(parts))
    # Damage: a cut anywhere, or a declared length rewritten at a batch start.
    if region and draw(st.booleans()):
        del region[draw(st.integers(0, len(region) - 1)) :]
    if parts and draw(st.booleans()):
        starts = [sum(len(p) for p in parts[:i]) for i in range(len(parts))]
        at = draw(st.sampled_from(starts))
        if at + layout.LOG_OVERHEAD <= len(region):
            _LENGTH.pack_into(region, at + layout.LENGTH_OFFSET, draw(st.integers(-5, 60)))
    return bytes(region)


@needs_native
@settings(max_examples=300)
@given(region=regions())
def test_native_and_reference_agree(region: bytes) -> None:
    assert _native is not None
    assert _native.producer_batches(region) == _headers_py.producer_batches(region)


@needs_native
@settings(max_examples=200, deadline=None)
@given(region=regions("pdclBP"), start=st.integers(0, 70_000))
def test_native_file_walk_agrees_with_the_region_walk(
    tmp_path_factory: pytest.TempPathFactory, region: bytes, start: int
) -> None:
    """producer_batches_file over [start, start + len) of a file holding the region there (and
    more bytes after it, which the walk must not read as batches) gives the region walk's
    answer in file positions, with each found batch's 61-byte header."""
    assert _native is not None
    path = tmp_path_factory.mktemp("walk") / "00000000000000000000.log"
    path.write_bytes(b"\xff" * start + region + b"\x00" * 100)
    fd = os.open(path, os.O_RDONLY)
    try:
        walked = _native.producer_batches_file(fd, start, start + len(region))
    finally:
        os.close(fd)
    consumed, next_offset, found, problem, value = _native.producer_batches(region)
    positions = [p for (p,) in struct.iter_unpack("=q", found)]
    headers = b"".join(region[p : p + layout.RECORD_BATCH_OVERHEAD] for p in positions)
    shifted = b"".join(struct.pack("=q", start + p) for p in positions)
    assert walked == (start + consumed, next_offset, shifted, headers, problem, value)


def test_the_walk_reports_producer_batches_and_stops_at_what_it_cannot_frame() -> None:
    plain = build_batch([NewRecord(key=b"a", value=b"1")], base_offset=0)
    produced = build_batch(
        [NewRecord(key=b"b", value=b"2")] * 2, base_offset=1, producer_id=7, producer_epoch=0
    )
    legacy = _legacy_entry(3, 40)
    region = plain + produced + legacy
    consumed, next_offset, found, problem, _ = producer_walk.producer_batches(region)
    assert (consumed, next_offset, problem) == (len(region), 4, 0)
    assert [p for (p,) in struct.iter_unpack("=q", found)] == [len(plain)]
    # A torn tail ends the walk quietly; a short declared length is a problem at its batch.
    consumed, next_offset, _, problem, _ = producer_walk.producer_batches(region[:-1])
    assert (consumed, next_offset, problem) == (len(plain) + len(produced), 3, 0)
    broken = bytearray(region)
    _LENGTH.pack_into(broken, len(plain) + layout.LENGTH_OFFSET, 3)
    consumed, _, found, problem, value = producer_walk.producer_batches(bytes(broken))
    assert (consumed, found, problem, value) == (len(plain), b"", 1, 3)


@pytest.fixture(params=["native file walk", "chunks"])
def small_chunks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """FileRecords' walk as it runs (the native file walk where it is built), and its chunked
    walk in chunks of 300 bytes: batches cross chunk ends and some are larger than a chunk."""
    if request.param == "chunks":
        monkeypatch.setattr(producer_walk, "producer_batches_file", None)
    monkeypatch.setattr(file_records, "_READ_CHUNK_BYTES", 300)


def _file(tmp_path: Path, parts: list[bytes]) -> FileRecords:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(parts))
    return FileRecords(path, create=False, writable=False)


@pytest.mark.usefixtures("small_chunks")
def test_file_walk_yields_every_producer_batch_across_chunks(tmp_path: Path) -> None:
    parts: list[bytes] = []
    offset = 0
    for i in range(40):
        size = 1 + (i * 7) % 30  # some batches are larger than a chunk
        producer = {"producer_id": i % 3, "producer_epoch": 0} if i % 4 else {}
        parts.append(
            build_batch(
                [NewRecord(key=b"k%d" % i, value=b"v" * 20)] * size,
                base_offset=offset,
                **producer,  # type: ignore[arg-type]
            )
        )
        offset += size
        if i % 9 == 8:
            parts.append(
                build_control_batch(
                    ControlType.COMMIT,
                    producer_id=1,
                    producer_epoch=0,
                    coordinator_epoch=0,
                    timestamp=5,
                    base_offset=offset,
                )
            )
            offset += 1
    records = _file(tmp_path, [*parts, parts[0][:30]])  # and a torn tail
    expected = [
        (position, bytes(batch.buffer[: layout.RECORD_BATCH_OVERHEAD]), batch.is_control)
        for position, batch in records.batches()
        if batch.has_producer_id
    ]
    walked = list(records.producer_batches())
    assert [(bytes(b.buffer[: layout.RECORD_BATCH_OVERHEAD]), b.is_control) for b in walked] == [
        (header, control) for _, header, control in expected
    ]
    # Control batches come whole (their record is read), the others as headers.
    assert all(b.records_count == 1 for b in walked if b.is_control)
    # From a later position: the same suffix.
    second = expected[3][0]
    assert len(list(records.producer_batches(second))) == len(expected) - 3
    records.close()


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("length", [3, 20])
def test_file_walk_names_the_file_and_position_of_a_bad_length(tmp_path: Path, length: int) -> None:
    first = build_batch([NewRecord(key=b"a", value=b"1")], producer_id=1, producer_epoch=0)
    second = bytearray(build_batch([NewRecord(key=b"b", value=b"2")], base_offset=1))
    _LENGTH.pack_into(second, layout.LENGTH_OFFSET, length)
    records = _file(tmp_path, [first, bytes(second), first])
    message = "declares length 3" if length == 3 else "is 32 bytes, smaller than the 61-byte"
    with pytest.raises(CorruptRecordError, match=f"{records.path}: batch at position "):
        list(records.producer_batches())
    with pytest.raises(CorruptRecordError, match=message):
        list(records.producer_batches())
    records.close()


def test_transaction_state_equals_the_state_of_every_batch(tmp_path: Path) -> None:
    """The log's state (producer batches only, natively skipped otherwise) against the state
    extended with every batch of every segment."""
    clock = ManualClock(1_000)
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=600), clock)
    sequences = {1: 0, 2: 0}
    for step in range(60):
        if step % 5 == 0:
            log.append(build_batch([NewRecord(key=b"plain", value=b"x")]))
            continue
        pid = 1 + step % 2
        if step % 7 == 0:
            marker = ControlType.ABORT if step % 2 else ControlType.COMMIT
            log.append(
                build_control_batch(
                    marker, producer_id=pid, producer_epoch=0, coordinator_epoch=0, timestamp=9
                ),
                origin=AppendOrigin.COORDINATOR,
            )
            continue
        log.append(
            build_batch(
                [NewRecord(key=b"t%d" % step, value=b"v")],
                producer_id=pid,
                producer_epoch=0,
                base_sequence=sequences[pid],
                is_transactional=pid == 2,
            )
        )
        sequences[pid] += 1
    log.append(build_batch([NewRecord(key=b"plain", value=b"last")]))  # no producer: last
    assert len(log.segments) > 3
    reference = TransactionState()
    for segment in log.segments:
        reference.extend(batch for _, batch in segment.log.batches())
    state = log.transaction_state()
    assert state == reference
    assert state.next_offset == log.log_end_offset
    log.close()
