"""The cleaner's native per-record path against its pure-Python reference, piece by piece.

``storagecore.cleaner._native`` takes over the per-record work of a cleaning round (key
digests, map probes and puts, retention decisions, re-encoding of kept records, the rebuilt
batch's header and CRC). The reference is the Python code of
:mod:`storagecore.cleaner.offset_map` and
:mod:`storagecore.cleaner`. Here the pieces are checked on their own (the shared constants,
SipHash, CRC-32C, the table after puts, declined inputs, a filtered batch's rebuild); whole
rounds cleaned both ways are in test_offset_map_native_rounds.py, the region calls in
test_offset_map_native_regions.py.
"""

from __future__ import annotations

import os
import random
import struct
from collections.abc import Iterator

import crc32c as crc32c_package
import pytest
from hypothesis import given
from hypothesis import strategies as st

from storagecore import NewRecord, RecordBatch, TimestampType, build_batch
from storagecore.cleaner.offset_map import IMPLEMENTATION, SkimpyOffsetMap, key_digest, key_digests
from storagecore.cleaner.siphash import siphash128
from storagecore.records import layout
from storagecore.records.memory_records_builder import rebuild_batch
from tests.unit.storagecore.helpers.native_cleaner import SECRET, START_MS, _native, needs_native


def test_expected_implementation_is_loaded() -> None:
    """CI runs the unit tests twice; each run must use the implementation it claims to test."""
    forced_python = os.environ.get("STORAGECORE_NO_EXTENSIONS", "") not in ("", "0")
    assert ("python" if forced_python else "c") == IMPLEMENTATION


@needs_native
def test_map_entry_layout_agrees() -> None:
    from storagecore.cleaner import offset_map, siphash

    assert _native is not None
    assert _native.HASH_BYTES == offset_map.HASH_BYTES
    assert _native.ENTRY_BYTES == offset_map.ENTRY_BYTES
    assert _native.SECRET_BYTES == siphash.SECRET_BYTES
    assert (_native.SIP_C_ROUNDS, _native.SIP_D_ROUNDS) == (siphash.C_ROUNDS, siphash.D_ROUNDS)
    assert [_native.STOP_END, _native.STOP_BATCH, _native.STOP_FULL] == [
        offset_map.RegionStop.END,
        offset_map.RegionStop.BATCH,
        offset_map.RegionStop.FULL,
    ]


@needs_native
@given(st.binary(max_size=300), st.binary(min_size=16, max_size=16))
def test_siphash_matches_the_python_reference(data: bytes, secret: bytes) -> None:
    assert _native is not None
    assert _native.siphash(data, secret, 1, 3) == siphash128(data, secret)
    assert _native.siphash(data, secret, 2, 4) == siphash128(data, secret, 2, 4)


@needs_native
@pytest.mark.parametrize("length", [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 255, 256, 257, 1000])
def test_siphash_block_boundaries(length: int) -> None:
    assert _native is not None
    data = bytes(range(256)) * 4
    assert _native.siphash(data[:length], SECRET, 1, 3) == siphash128(data[:length], SECRET)


@needs_native
@given(st.binary(max_size=5000))
def test_crc32c_matches_the_package(data: bytes) -> None:
    assert _native is not None
    assert _native.crc32c(data) == crc32c_package.crc32c(data)


@needs_native
@pytest.mark.parametrize(
    "length", [767, 768, 769, 775, 776, 1536, 24_575, 24_576, 24_577, 24_576 + 768, 100_003]
)
def test_crc32c_three_stream_boundaries(length: int) -> None:
    """Around the sizes where the hardware path runs three streams of 256 or 8192 bytes."""
    assert _native is not None
    data = random.Random(length).randbytes(length)
    assert _native.crc32c(data) == crc32c_package.crc32c(data)


# -- the table after puts ------------------------------------------------------------------


def _keys_batch(keys: list[bytes | None], base_offset: int = 0) -> RecordBatch:
    return RecordBatch(
        build_batch(
            [NewRecord(key=k, value=b"v", timestamp=START_MS) for k in keys],
            base_offset=base_offset,
        )
    )


def _reference_put(offset_map: SkimpyOffsetMap, batch: RecordBatch, start: int) -> tuple[int, bool]:
    """Cleaner.build_offset_map's Python loop over one batch."""
    walked = 0
    for record in batch.records():
        if record.key is not None and record.offset >= start:
            if offset_map.size >= offset_map.capacity:
                return walked, True
            offset_map.put_digest(offset_map.digest(record.key), record.offset)
        walked += 1
    return walked, False


@needs_native
@given(
    keys=st.lists(
        st.one_of(st.none(), st.binary(min_size=0, max_size=80)), min_size=1, max_size=60
    ),
    prefill=st.lists(st.binary(max_size=20), max_size=10),
    memory=st.integers(min_value=24 * 2, max_value=24 * 64),
    start=st.integers(min_value=0, max_value=70),
)
def test_puts_leave_the_same_table(
    keys: list[bytes | None], prefill: list[bytes], memory: int, start: int
) -> None:
    """Same table bytes, size, latest offset and full flag, including a map that fills in the
    middle of the batch (the capacity check comes before each put) and keys long enough to take
    the one-at-a-time MD5 path."""
    _check_puts(keys, prefill, memory, start)


@needs_native
@given(
    keys=st.integers(min_value=0, max_value=40).flatmap(
        lambda length: st.lists(
            st.one_of(st.none(), st.binary(min_size=length, max_size=length)),
            min_size=1,
            max_size=60,
        )
    ),
    memory=st.integers(min_value=24 * 2, max_value=24 * 64),
    start=st.integers(min_value=0, max_value=70),
)
def test_puts_of_keys_of_one_length_leave_the_same_table(
    keys: list[bytes | None], memory: int, start: int
) -> None:
    """Keys of one length, as a topic's often are: the engine digests four of them at once
    (one per lane of a vector register) and must leave the table the reference leaves."""
    _check_puts(keys, [], memory, start)


def _check_puts(keys: list[bytes | None], prefill: list[bytes], memory: int, start: int) -> None:
    native_map = SkimpyOffsetMap(memory, 0.75, secret=SECRET)
    python_map = SkimpyOffsetMap(memory, 0.75, native=False, secret=SECRET)
    for offset, key in enumerate(prefill[: native_map.capacity]):
        native_map.put(key, offset)
        python_map.put(key, offset)
    batch = _keys_batch(keys, base_offset=10)
    fast = native_map.put_batch_keys(batch.buffer, None, start)
    assert fast is not None
    assert fast == _reference_put(python_map, batch, start)
    assert bytes(native_map._table) == bytes(python_map._table)
    assert (native_map.size, native_map.latest_offset) == (
        python_map.size,
        python_map.latest_offset,
    )
    assert (native_map.lookups, native_map.probes) == (python_map.lookups, python_map.probes)


@given(keys=st.lists(st.binary(max_size=40), max_size=40))
def test_key_digests_of_a_column_are_each_keys_digest(keys: list[bytes]) -> None:
    """The digests of an Arrow binary column (int32 offsets + data) are the map's digest of
    each key, in order, by whichever implementation is loaded."""
    ends = [0]
    for key in keys:
        ends.append(ends[-1] + len(key))
    offsets = struct.pack(f"={len(ends)}i", *ends)
    digests = key_digests(offsets, b"".join(keys), len(keys), SECRET)
    assert digests == b"".join(key_digest(key, SECRET) for key in keys)


@given(
    keys=st.lists(
        st.integers(min_value=0, max_value=40).flatmap(
            lambda length: st.lists(
                st.binary(min_size=length, max_size=length), min_size=1, max_size=9
            )
        ),
        max_size=6,
    )
)
def test_key_digests_of_runs_of_one_length_are_the_python_digests(
    keys: list[list[bytes]],
) -> None:
    """Runs of keys of one length (four at a time in the engine) and the keys between them
    have the pure-Python reference's digests."""
    flat = [key for run in keys for key in run]
    ends = [0]
    for key in flat:
        ends.append(ends[-1] + len(key))
    offsets = struct.pack(f"={len(ends)}i", *ends)
    digests = key_digests(offsets, b"".join(flat), len(flat), SECRET)
    assert digests == b"".join(siphash128(key, SECRET) for key in flat)


@needs_native
def test_key_digests_refuse_offsets_outside_the_data() -> None:
    assert _native is not None
    with pytest.raises(ValueError, match="key 0: offsets"):
        _native.digest_keys(struct.pack("=2i", 0, 9), b"short", 1, SECRET)
    with pytest.raises(ValueError, match="cannot hold 3 rows"):
        _native.digest_keys(struct.pack("=2i", 0, 1), b"x", 3, SECRET)


@given(
    pairs=st.lists(st.tuples(st.binary(max_size=6), st.integers(0, 2**40)), max_size=50),
    native=st.booleans(),
)
def test_put_digests_is_put_digest_in_order(pairs: list[tuple[bytes, int]], native: bool) -> None:
    """One call for a column of (digest, offset) pairs leaves the table, size and latest
    offset that put_digest one pair at a time leaves (repeated keys: the last offset wins)."""
    memory = 24 * max(2 * len(pairs), 2)
    bulk = SkimpyOffsetMap(memory, 1.0, native=native, secret=SECRET)
    single = SkimpyOffsetMap(memory, 1.0, native=False, secret=SECRET)
    digests = [single.digest(key) for key, _offset in pairs]
    for digest, (_key, offset) in zip(digests, pairs, strict=True):
        single.put_digest(digest, offset)
    offsets = struct.pack(f"={len(pairs)}q", *(offset for _key, offset in pairs))
    bulk.put_digests(b"".join(digests), offsets)
    assert bytes(bulk._table) == bytes(single._table)
    assert bulk.size == single.size
    if pairs:
        assert bulk.latest_offset == single.latest_offset == pairs[-1][1]


@needs_native
def test_put_digests_into_a_full_map_is_a_bug() -> None:
    full = SkimpyOffsetMap(24 * 2, 1.0, secret=SECRET)
    digests = b"".join(full.digest(bytes([i])) for i in range(3))
    with pytest.raises(AssertionError, match="full offset map"):
        full.put_digests(digests, struct.pack("=3q", 1, 2, 3))


@needs_native
def test_python_map_never_uses_the_extension() -> None:
    batch = _keys_batch([b"a"])
    assert SkimpyOffsetMap(1024, native=False).put_batch_keys(batch.buffer, None, 0) is None
    assert (
        SkimpyOffsetMap(1024, native=False).filter_batch_records(batch.buffer, None, 0, 0) is None
    )


# -- declined inputs: the reference runs and raises its own error -----------------------------


def _corruptions() -> Iterator[tuple[str, bytes]]:
    good = bytearray(_keys_batch([b"a", b"b"]).buffer)
    short = bytes(good[:-1])
    yield "truncated records", short
    long_length = bytearray(good)
    long_length[layout.RECORDS_OFFSET] = 0x7E  # first record claims 63 bytes
    yield "record length past the batch", bytes(long_length)
    count = bytearray(good)
    count[layout.RECORDS_COUNT_OFFSET + 3] = 3
    yield "one record more than present", bytes(count)
    yield (
        "non-ASCII header key",
        RecordBatch(
            build_batch([NewRecord(key=b"k", value=b"v", headers=(("clé", b"x"),))])
        ).buffer,
    )


@needs_native
@pytest.mark.parametrize(("what", "data"), list(_corruptions()), ids=lambda x: str(x)[:30])
def test_declined_batches_change_nothing(what: str, data: bytes) -> None:
    offset_map = SkimpyOffsetMap(24 * 16)
    offset_map.put(b"z", 0)
    before = bytes(offset_map._table)
    assert offset_map.put_batch_keys(data, None, 0) is None, what
    assert offset_map.filter_batch_records(data, None, START_MS, START_MS) is None, what
    assert bytes(offset_map._table) == before
    assert offset_map.size == 1


@needs_native
def test_filtered_batch_is_rebuild_batch_byte_for_byte() -> None:
    """A LogAppendTime batch with a delete horizon already stamped, a tombstone past it, a
    header and a removed first record: the native rebuild equals rebuild_batch's."""
    records = [
        NewRecord(key=b"a", value=b"1", timestamp=START_MS - 5, headers=(("h", None),)),
        NewRecord(key=b"b", value=None, timestamp=START_MS + 7),
        NewRecord(key=b"c", value=b"3" * 200, timestamp=START_MS, headers=(("k", b"v"),)),
        NewRecord(key=None, value=b"4", timestamp=START_MS + 9),
        NewRecord(key=b"a", value=b"5", timestamp=START_MS - 1),
    ]
    for horizon in (None, START_MS + 10):
        for timestamp_type in TimestampType:
            batch = RecordBatch(
                build_batch(
                    records,
                    base_offset=100,
                    timestamp_type=timestamp_type,
                    log_append_time=START_MS,
                    delete_horizon_ms=horizon,
                    producer_id=7,
                    producer_epoch=1,
                    base_sequence=3,
                    partition_leader_epoch=4,
                )
            )
            offset_map = SkimpyOffsetMap(24 * 64)
            offset_map.put(b"a", 104)
            offset_map.put(b"b", 101)
            offset_map.put(b"c", 102)
            offset_map.update_latest_offset(104)
            now = START_MS + 20
            fast = offset_map.filter_batch_records(batch.buffer, None, now, now + 1000)
            assert fast is not None and fast.rebuilt is not None
            kept = [r for r in batch.records() if r.offset in (102, 104)]
            if horizon is None:
                kept.insert(0, batch.records()[1])  # the tombstone stays, horizon set now
            expected = rebuild_batch(
                batch, kept, delete_horizon_ms=now + 1000 if horizon is None else horizon
            )
            assert fast.rebuilt == expected, (horizon, timestamp_type)
            assert fast.invalid == 1
            assert fast.max_timestamp == RecordBatch(expected).max_timestamp
