"""Corrupt input to the cleaner (Kafka LogCleanerTest, kafka-log-layer.md §10 items 18, 19): a
bad magic and a declared size past the end of a sealed segment fail the round, naming the file
and position, and change nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storagecore import CorruptRecordError, ManualClock
from storagecore.records import layout
from tests.unit.storagecore.helpers.cleaning import open_log, put_many, run_round


# -- 18, 19: corrupt input ------------------------------------------------------------------------
def test_corrupt_magic_raises_and_changes_nothing(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"k%d" % (i % 3), b"v") for i in range(30)])
    log.roll()
    first = log.segments[0]
    with open(first.log.path, "r+b") as handle:
        handle.seek(layout.MAGIC_OFFSET)
        handle.write(b"\x07")
    before = sorted(p.name for p in log.directory.iterdir())
    with pytest.raises(CorruptRecordError, match=r"t-0: .*00000000000000000000\.log at position 0"):
        run_round(log)
    assert sorted(p.name for p in log.directory.iterdir()) == before


def test_declared_size_past_the_end_of_a_sealed_segment(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"k%d" % (i % 3), b"v") for i in range(30)])
    log.roll()
    first = log.segments[0]
    size = first.size_bytes
    os.truncate(first.log.path, size - 5)
    first.log.size_bytes = size - 5  # as the file handle would see it after the damage
    with pytest.raises(CorruptRecordError, match="do not form a complete batch"):
        run_round(log)
