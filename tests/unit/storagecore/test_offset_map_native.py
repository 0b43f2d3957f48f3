"""The cleaner's native per-record path against its pure-Python reference.

``storagecore.cleaner._native`` takes over the per-record work of a cleaning round (key
digests, map probes and puts, retention decisions, re-encoding of kept records, the rebuilt
batch's header and CRC). The reference is the Python code of
:mod:`storagecore.cleaner.offset_map` and
:mod:`storagecore.cleaner`. Here the same logs are cleaned both ways, round after round with
small maps (rounds that stop mid-batch), and every file and every counter must be identical;
the pieces (MD5, CRC-32C, the table after puts, declined inputs) are checked on their own.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import struct
import tempfile
import unittest.mock
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import crc32c as crc32c_package
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storagecore import (
    Compression,
    Log,
    LogConfig,
    ManualClock,
    NewRecord,
    RecordBatch,
    TimestampType,
    build_batch,
)
from storagecore.cleaner import Cleaner, CleanerStats, CleanRequest, regions
from storagecore.cleaner.offset_map import (
    IMPLEMENTATION,
    SkimpyOffsetMap,
    key_digest,
    key_digests,
)
from storagecore.cleaner.siphash import siphash128
from storagecore.errors import CorruptRecordError
from storagecore.native import load_extension
from storagecore.records import layout
from storagecore.records.memory_records_builder import rebuild_batch

# None when not built (test_expected_implementation_is_loaded then fails) or disabled by
# STORAGECORE_NO_EXTENSIONS (the second CI run, where these tests skip).
_native = load_extension("storagecore.cleaner._native")
needs_native = pytest.mark.skipif(_native is None, reason="native speed-up not loaded")
START_MS = 1_700_000_000_000
DELETE_RETENTION_MS = 5_000
SECRET = bytes(range(16))


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


# -- whole cleaning rounds, both ways ---------------------------------------------------------

KEYS = [None, b"a", b"b", b"c", b"d", b"e", b"key-" + b"x" * 60, b"key-" + b"y" * 70]


@dataclasses.dataclass(frozen=True)
class Append:
    keys: list[bytes | None]
    tombstones: list[bool]
    codec: Compression
    header: tuple[tuple[str, bytes | None], ...]
    producer: bool
    advance_ms: int


appends = st.builds(
    Append,
    keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=12),
    tombstones=st.lists(st.booleans(), min_size=12, max_size=12),
    codec=st.sampled_from(list(Compression)),
    header=st.sampled_from([(), (("h", b"v"),), (("n", None),), (("ü", b"x"),)]),
    producer=st.booleans(),
    advance_ms=st.integers(min_value=0, max_value=3_000),
)


def _append_all(log: Log, clock: ManualClock, plan: list[Append]) -> None:
    sequence = 0
    for step in plan:
        clock.advance(step.advance_ms)
        now = clock.milliseconds()
        records = [
            NewRecord(
                key=key,
                value=None if tombstone and key is not None else b"value-%d" % index,
                timestamp=now - index,
                headers=step.header,
            )
            for index, (key, tombstone) in enumerate(zip(step.keys, step.tombstones, strict=False))
        ]
        producer = (
            {"producer_id": 42, "producer_epoch": 0, "base_sequence": sequence}
            if step.producer
            else {}
        )
        log.append(build_batch(records, compression=step.codec, **producer))  # type: ignore[arg-type]
        if step.producer:  # the producer's sequences follow on (the log checks them)
            sequence += len(records)


def _files(directory: Path) -> dict[str, bytes]:
    return {
        path.name: path.read_bytes()
        for path in sorted(directory.iterdir())
        if path.suffix in (".log", ".index", ".timeindex")
    }


def _counters(stats: CleanerStats) -> dict[str, object]:
    fields = dataclasses.asdict(stats)
    for timing in ("start_s", "map_complete_s", "end_s"):
        fields.pop(timing)
    return fields


@needs_native
@settings(max_examples=40, deadline=None)
@given(
    plan=st.lists(appends, min_size=1, max_size=14),
    # 4096 slots: room after the probed prefix, so the filter reads the map pass's notes of
    # key positions (SkimpyOffsetMap.clear) instead of digesting keys again.
    map_slots=st.one_of(st.integers(min_value=3, max_value=40), st.just(4096)),
    log_append_time=st.booleans(),
    seed=st.integers(min_value=0, max_value=2**16),
    region_bytes=st.sampled_from([64, 300, 1000, regions.REGION_BYTES]),
)
def test_cleaning_rounds_write_the_same_bytes(
    plan: list[Append], map_slots: int, log_append_time: bool, seed: int, region_bytes: int
) -> None:
    """Native and reference rounds leave the same files, indexes included, and counters;
    small regions make the engine's output chunks continue across region calls and around
    the batches it leaves to the per-batch path."""
    with unittest.mock.patch.object(regions, "REGION_BYTES", region_bytes):
        _clean_both_ways(plan, map_slots, log_append_time, seed)


def _clean_both_ways(plan: list[Append], map_slots: int, log_append_time: bool, seed: int) -> None:
    config = LogConfig(
        cleanup_policy=("compact",),
        segment_bytes=random.Random(seed).choice([2048, 4096, 1 << 20]),
        index_interval_bytes=200,
        delete_retention_ms=DELETE_RETENTION_MS,
        message_timestamp_type=("LogAppendTime" if log_append_time else "CreateTime"),
    )
    root = Path(tempfile.mkdtemp())
    logs: list[tuple[Log, ManualClock, Cleaner]] = []
    try:
        for name, native in (("native", True), ("python", False)):
            clock = ManualClock(START_MS)
            # Null keys reach a compacted log only if it was not compacted when they were
            # written (a compacted topic rejects them): append under delete, then switch.
            log = Log.open(
                root / name / "t-0", dataclasses.replace(config, cleanup_policy=("delete",)), clock
            )
            _append_all(log, clock, plan)
            log.roll()
            log.update_config(config)
            # One secret for both: the probe counts compared below depend on the digests.
            offset_map = SkimpyOffsetMap(24 * map_slots, native=native, secret=SECRET)
            cleaner = Cleaner(offset_map=offset_map)
            logs.append((log, clock, cleaner))
        # Rounds until clean, then again once every horizon has passed (tombstones go).
        for later_ms in (0, DELETE_RETENTION_MS + 1):
            for _, clock, _ in logs:
                clock.advance(later_ms)
            first_dirty = [0, 0]
            for _ in range(200):
                results = []
                for index, (log, _, cleaner) in enumerate(logs):
                    end = log.active_segment.base_offset
                    stats = cleaner.clean(CleanRequest(log, first_dirty[index], end))
                    first_dirty[index] = stats.end_offset
                    results.append((_counters(stats), _files(log.directory)))
                assert results[0] == results[1]
                native_map, python_map = logs[0][2].offset_map, logs[1][2].offset_map
                assert (native_map.lookups, native_map.probes) == (
                    python_map.lookups,
                    python_map.probes,
                )
                if first_dirty[0] >= logs[0][0].active_segment.base_offset:
                    break
    finally:
        for log, _, _ in logs:
            log.close()
        shutil.rmtree(root, ignore_errors=True)


class _Counting:
    """Wraps the extension module and counts the batches its calls took (not declined)."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module
        self.answered: dict[str, int] = {
            "put_keys": 0,
            "filter_records": 0,
            "map_region": 0,
            "filter_region": 0,
        }

    def __getattr__(self, name: str) -> object:
        function = getattr(self._module, name)

        def call(*args: object) -> object:
            result = function(*args)
            if name in ("map_region", "filter_region"):
                self.answered[name] += result[4]  # type: ignore[index]
            elif name in self.answered and result is not None:
                self.answered[name] += 1
            return result

        return call


def _keyed_log(directory: Path, codecs: list[Compression], *, roll: bool = True) -> Log:
    log = Log.open(directory, LogConfig(cleanup_policy=("compact",)), ManualClock(START_MS))
    for round_, codec in enumerate(codecs):
        log.append(
            build_batch(
                [NewRecord(key=b"k%d" % (i % 7), value=b"v%d" % round_) for i in range(10)],
                compression=codec,
            )
        )
    if roll:
        log.roll()
    return log


@needs_native
@pytest.mark.parametrize(
    ("codec", "expected"),
    [
        # The region calls take every batch, no per-batch call runs; a compressed batch costs
        # one codec call per pass (and one more when rebuilt), never one per record.
        (codec, {"map_region": 20, "filter_region": 20})
        for codec in Compression
    ],
)
def test_native_path_takes_every_plain_data_batch(
    tmp_path: Path, codec: Compression, expected: dict[str, int]
) -> None:
    """The differential test above would pass if the extension declined everything: here it
    must answer for every batch of a log of ordinary keyed records."""
    assert _native is not None
    log = _keyed_log(tmp_path / "t-0", [codec] * 20)
    offset_map = SkimpyOffsetMap(24 * 1024)
    counting = _Counting(_native)
    offset_map._native = counting  # type: ignore[assignment]
    stats = Cleaner(offset_map=offset_map).clean(
        CleanRequest(log, 0, log.active_segment.base_offset)
    )
    assert {k: v for k, v in counting.answered.items() if v} == expected
    assert stats.messages_written == 7
    log.close()


@needs_native
def test_a_region_stops_at_the_first_batch_it_does_not_take(tmp_path: Path) -> None:
    """Plain batches (uncompressed and compressed), then a transactional one: the first call
    takes the leading plain batches and stops at the transactional one; a truncated last batch
    is left (STOP_END)."""
    codecs = [Compression.NONE, Compression.GZIP, Compression.NONE]
    log = _keyed_log(tmp_path / "t-0", codecs, roll=False)
    log.append(
        build_batch(
            [NewRecord(key=b"k%d" % i, value=b"t") for i in range(10)],
            producer_id=1,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )
    )
    data = log.segments[0].log.read(0, log.segments[0].log.size_bytes)
    sizes = [batch.size_bytes for _position, batch in log.segments[0].log.batches()]
    offset_map = SkimpyOffsetMap(24 * 64, secret=SECRET)
    mapped = offset_map.map_region(data, 0)
    assert mapped is not None
    assert (mapped.consumed_bytes, mapped.batches, mapped.stop) == (sum(sizes[:3]), 3, 1)
    assert mapped.last_offset == 29 and offset_map.latest_offset == 29
    # Only the plain part, cut inside its third batch: two batches, then the incomplete rest.
    cut = data[: sizes[0] + sizes[1] + 20]
    again = SkimpyOffsetMap(24 * 64, secret=SECRET).map_region(cut, 0)
    assert again is not None
    assert (again.consumed_bytes, again.batches, again.stop) == (sizes[0] + sizes[1], 2, 0)
    log.close()


@needs_native
def test_a_corrupt_batch_in_a_region_fails_the_clean_naming_file_and_position(
    tmp_path: Path,
) -> None:
    """The engine stops at a batch whose CRC does not match; the per-batch path raises the
    reference's error with the file and position, and nothing is rewritten."""
    log = _keyed_log(tmp_path / "t-0", [Compression.NONE] * 4)
    segment = log.segments[0]
    sizes = [batch.size_bytes for _position, batch in segment.log.batches()]
    position = sizes[0] + sizes[1]
    path = segment.log.path
    # Flipped under the open log (as a disk would): the loader would truncate it on a reload.
    with path.open("r+b") as file:
        file.seek(position + 70)
        byte = file.read(1)
        file.seek(position + 70)
        file.write(bytes([byte[0] ^ 0xFF]))
    before = path.read_bytes()
    with pytest.raises(CorruptRecordError, match=f"at position {position}: .*CRC mismatch"):
        Cleaner(offset_map=SkimpyOffsetMap(24 * 64)).clean(
            CleanRequest(log, 0, log.active_segment.base_offset)
        )
    assert log.segments[0].log.path.read_bytes() == before
    log.close()


def _recrc(data: bytearray, position: int) -> None:
    """A batch at ``position`` whose bytes were changed, given a matching CRC again."""
    size = layout.LOG_OVERHEAD + int.from_bytes(data[position + 8 : position + 12], "big")
    crc = crc32c_package.crc32c(bytes(data[position + layout.ATTRIBUTES_OFFSET : position + size]))
    data[position + layout.CRC_OFFSET : position + layout.CRC_OFFSET + 4] = crc.to_bytes(4, "big")


@needs_native
@pytest.mark.parametrize("native", [True, False])
def test_a_compressed_batch_that_does_not_decompress_fails_the_clean_naming_it(
    tmp_path: Path, native: bool
) -> None:
    """A gzip batch whose CRC matches but whose payload is not gzip: the region call's codec
    fails, the engine leaves the batch to the per-batch path, which raises the reference's
    error with file and position; the reference alone gives the same error."""
    log = _keyed_log(tmp_path / "t-0", [Compression.GZIP] * 3)
    segment = log.segments[0]
    sizes = [batch.size_bytes for _position, batch in segment.log.batches()]
    position = sizes[0]
    path = segment.log.path
    data = bytearray(path.read_bytes())
    start = position + layout.RECORD_BATCH_OVERHEAD
    data[start : start + 10] = b"not gzip!!"
    _recrc(data, position)
    path.write_bytes(data)
    offset_map = SkimpyOffsetMap(24 * 64)
    if not native:
        offset_map._native = None
    with pytest.raises(CorruptRecordError, match=f"at position {position}: .*gzip"):
        Cleaner(offset_map=offset_map).clean(CleanRequest(log, 0, log.active_segment.base_offset))
    assert log.segments[0].log.path.read_bytes() == data
    log.close()


@needs_native
@pytest.mark.parametrize("call", ["map_region", "filter_region"])
def test_an_interrupt_inside_a_codec_call_propagates(tmp_path: Path, call: str) -> None:
    """A KeyboardInterrupt raised while the engine waits on a codec is not swallowed as a
    batch to decline: it leaves the region call as it was raised."""
    assert _native is not None
    log = _keyed_log(tmp_path / "t-0", [Compression.LZ4] * 2)
    data = log.segments[0].log.read(0, log.segments[0].log.size_bytes)

    def interrupted(_payload: memoryview) -> bytes:
        raise KeyboardInterrupt

    codecs = (None, None, None, interrupted, None)
    offset_map = SkimpyOffsetMap(24 * 64, secret=SECRET)
    with pytest.raises(KeyboardInterrupt):
        if call == "map_region":
            _native.map_region(
                offset_map._table, offset_map.slots, 0, offset_map.capacity, SECRET, data, 0,
                -1, codecs, bytearray(), 0,
            )  # fmt: skip
        else:
            _native.filter_region(
                offset_map._table, offset_map.slots, 100, SECRET, data, START_MS, START_MS,
                1000, b"", codecs, codecs, (4096, 0, -1, -1, -1), b"", 0,
            )  # fmt: skip
    log.close()
