"""The native engine's region calls (map_region, filter_region): they take every plain data
batch of a log, stop at the first batch they do not take, and leave corrupt batches, payloads
that do not decompress and interrupts to the per-batch path, which fails the clean with the
reference's error naming file and position."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import crc32c as crc32c_package
import pytest

from storagecore import Compression, Log, LogConfig, ManualClock, NewRecord, build_batch
from storagecore.cleaner import Cleaner, CleanRequest
from storagecore.cleaner.offset_map import SkimpyOffsetMap
from storagecore.errors import CorruptRecordError
from storagecore.records import layout
from tests.unit.storagecore.helpers.native_cleaner import SECRET, START_MS, _native, needs_native


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
                1000, b"", codecs, codecs, (4096, 0, -1, -1, -1), b"", 0, 0,
            )  # fmt: skip
    log.close()
