"""Stand-in for the cleaner's output, shared by the swap tests: new ``.cleaned`` segments that
keep every other batch of the segments they replace, at the same offsets."""

from __future__ import annotations

from pathlib import Path

from storagecore import Log
from storagecore.segment import LogSegment


def cleaned_copy(
    directory: Path, olds: list[LogSegment], suffix: str, *, close: bool = True
) -> list[LogSegment]:
    """One new segment per old one, keeping batches 0, 2, 4, ... of it."""
    new_segments = []
    for old in olds:
        new = LogSegment.open(
            directory,
            old.base_offset,
            index_interval_bytes=64,
            max_index_size_bytes=4096,
            now_ms=0,
            suffix=suffix,
        )
        for i, (_, kept) in enumerate(old.log.batches()):
            if i % 2 == 0:
                new.append(
                    kept.last_offset, kept.max_timestamp, kept.last_offset, bytes(kept.buffer)
                )
        new.on_become_inactive_segment()
        new.flush()
        if close:
            new.close()
        new_segments.append(new)
    return new_segments


def offsets_after_swap(log: Log, olds: list[LogSegment]) -> list[int]:
    """The offsets the log holds once ``cleaned_copy(olds)`` replaced ``olds``."""
    kept: list[int] = []
    for old in olds:
        for i, (_, batch) in enumerate(old.log.batches()):
            if i % 2 == 0:
                kept += list(range(batch.base_offset, batch.next_offset))
    return kept + [r.offset for r in log.records(olds[-1].next_offset())]
