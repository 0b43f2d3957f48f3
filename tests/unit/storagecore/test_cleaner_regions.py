"""SegmentWalk (storagecore/cleaner/regions.py): the pages behind its cursor leave the resident
set a region at a time, and what was read before that still reads the same."""

from __future__ import annotations

import mmap
import re
from pathlib import Path

from storagecore import Compression, Log, LogConfig, ManualClock, NewRecord, build_batch
from storagecore.cleaner.regions import REGION_BYTES, SegmentWalk
from tests.conftest import START_MS


def _resident_kib_of(path: Path) -> int:
    """Resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total = 0
    current = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            current = line.endswith(str(path))
        elif current and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def test_a_walk_keeps_about_one_region_of_the_segment_resident(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(cleanup_policy=("compact",)), ManualClock(START_MS))
    value = bytes(range(256)) * 40
    for n in range(800):  # ~8 MiB in one segment
        log.append(
            build_batch(
                [NewRecord(key=b"k%d" % n, value=value, timestamp=START_MS)],
                compression=Compression.NONE,
            )
        )
    log.roll()
    segment = log.segments[0]
    assert segment.log.size_bytes > 6 * REGION_BYTES
    walk = SegmentWalk(log.tp, segment, 0)
    first = walk.next_batch()
    assert first is not None
    _, first_batch = first
    kept = bytes(first_batch.buffer)
    peak_kib = 0
    batches = 1
    while walk.next_batch() is not None:
        batches += 1
        if batches % 50 == 0:
            peak_kib = max(peak_kib, _resident_kib_of(segment.log.path))
    assert batches == 800
    # A region behind the cursor and the one being read, give or take a page.
    assert 0 < peak_kib * 1024 <= 2 * REGION_BYTES + 2 * mmap.PAGESIZE
    # A view taken before its pages were dropped reads the same bytes.
    assert bytes(first_batch.buffer) == kept
    first_batch.validate()
    log.close()
