"""``Log.read(region_min_bytes=...)``: a fetch as a file region (the worker's sendfile path)
holds the same bytes as the copying read, and keeps them after the segment is cleaned away
or deleted by retention (the region owns a duplicate descriptor of the old file)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storagecore import Log, LogConfig, ManualClock, files
from tests.conftest import START_MS, batch
from tests.integration.storagecore.helpers.cleaning import cleaned_copy

pytestmark = pytest.mark.integration

CONFIG = LogConfig(
    segment_bytes=4096, index_interval_bytes=64, segment_index_bytes=4096, file_delete_delay_ms=0
)


def setup_log(directory: Path, clock: ManualClock) -> Log:
    log = Log.open(directory, CONFIG, clock)
    for i in range(60):
        log.append(batch(3, value_size=40, start_ms=START_MS + i, key_prefix=f"b{i}"))
    return log


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_region_holds_the_read_bytes_and_outlives_the_segment(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = setup_log(tmp_path / "t-0", clock)
    fds = open_fds()
    for offset in (0, 7, 61, 150):
        copied = log.read(offset, 3000)
        region_read = log.read(offset, 3000, region_min_bytes=1)
        assert region_read.records == b"" and region_read.region is not None
        assert region_read.size_bytes == len(copied.records) > 0
        assert region_read.region.read() == copied.records
        assert region_read._replace(records=b"", region=None) == copied._replace(records=b"")
        region_read.region.close()
    # Below the threshold, and at the log end, reads stay bytes.
    small = log.read(0, 3000, region_min_bytes=1 << 20)
    assert small.region is None and small.records
    end = log.read(log.log_end_offset, 3000, region_min_bytes=1)
    assert end.region is None and end.records == b""
    assert open_fds() == fds  # every region closed its descriptor
    # A region cut before the first segments are cleaned away and then deleted by retention.
    first = log.read(0, 3000, region_min_bytes=1)
    expected = log.read(0, 3000).records
    assert first.region is not None
    olds = log.segments[:2]
    log.replace_segments(cleaned_copy(log.directory, olds, files.CLEANED_SUFFIX), olds)
    log.maybe_increment_log_start_offset(log.segments[3].base_offset, "test")
    log.delete_old_segments()
    log.delete_expired_files(force=True)
    assert not (log.directory / (files.filename_prefix(0) + files.LOG_SUFFIX + ".deleted")).exists()
    assert first.region.read() == expected
    first.region.close()
    first.region.close()  # idempotent
    log.close()
