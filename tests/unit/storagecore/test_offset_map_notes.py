"""The map pass's notes of key positions, which the filter pass reads instead of digesting
each key again (SkimpyOffsetMap.clear, storagecore/cleaner/_cleaner_batch.h): the same files,
decisions and counters as the reference, which digests every key. The differential rounds of
test_offset_map_native_rounds (test_cleaning_rounds_write_the_same_bytes, with a 4096-slot
map) run them too."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from storagecore import Compression, Log, LogConfig, ManualClock, NewRecord, build_batch
from storagecore.cleaner import Cleaner, CleanRequest
from storagecore.cleaner.offset_map import SkimpyOffsetMap
from tests.unit.storagecore.helpers.native_cleaner import (
    SECRET,
    START_MS,
    _counters,
    _files,
    needs_native,
)


@needs_native
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_filter_reads_the_map_pass_notes_of_key_positions(
    tmp_path: Path, codec: Compression
) -> None:
    """With room in the budget after the probed prefix, the map pass notes where each key went
    and the filter pass reads its slot from there instead of digesting the key: the same files,
    and the same lookup and probe counts as the reference (which digests every key). A note
    that pointed at a wrong slot would keep or drop the wrong records (the differential test
    test_cleaning_rounds_write_the_same_bytes runs both ways too)."""
    logs = []
    for name, native in (("native", True), ("python", False)):
        log = Log.open(
            tmp_path / name / "t-0", LogConfig(cleanup_policy=("compact",)), ManualClock(START_MS)
        )
        rng = random.Random(3)
        for _ in range(40):
            keys = [b"key-%d" % rng.randrange(300) for _ in range(50)]
            log.append(
                build_batch([NewRecord(key=k, value=b"v" * 20) for k in keys], compression=codec)
            )
        log.roll()
        offset_map = SkimpyOffsetMap(24 * 100_000, native=native, secret=SECRET)
        stats = Cleaner(offset_map=offset_map).clean(
            CleanRequest(log, 0, log.active_segment.base_offset)
        )
        logs.append((log, offset_map, stats))
    (native_log, native_map, native_stats), (python_log, python_map, python_stats) = logs
    assert native_map.notes_positions and not python_map.notes_positions
    assert _counters(native_stats) == _counters(python_stats)
    assert _files(native_log.directory) == _files(python_log.directory)
    assert (native_map.lookups, native_map.probes) == (python_map.lookups, python_map.probes)
    # 2,000 records, 300 keys: most records were superseded, and the filter found them so.
    assert 0 < native_stats.messages_written <= 300 < native_stats.messages_read
    for log, _, _ in logs:
        log.close()
