"""One cleaning round's figures (Kafka's ``CleanerStats``) and Kafka's INFO stats line.

Filled in by :class:`storagecore.cleaner.cleaner.Cleaner`; read by the log cleaner threads, the
CLI and the worker's status. Pure data: no I/O.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Final

MIB: Final = 1 << 20


@dataclasses.dataclass(slots=True)
class CleanerStats:
    """One round over one log (Kafka's ``CleanerStats``), as data."""

    topic_partition: str = ""
    first_dirty_offset: int = 0
    end_offset: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages: int = 0
    keys_in_map: int = 0
    map_slots: int = 0
    batches_copied_verbatim: int = 0
    batches_rebuilt: int = 0
    segments_replaced: int = 0
    groups: int = 0
    map_full: bool = False
    next_delete_horizon_ms: int | None = None
    """Earliest horizon of a tombstone or marker kept by this round: cleaning again after it
    removes them even if nothing new is dirty (Kafka waits for the dirty ratio, §8.8)."""
    start_s: float = dataclasses.field(default_factory=time.monotonic)
    map_complete_s: float = 0.0
    end_s: float = 0.0

    @property
    def buffer_utilization(self) -> float:
        return self.keys_in_map / self.map_slots if self.map_slots else 0.0

    @property
    def elapsed_s(self) -> float:
        return max(self.end_s - self.start_s, 1e-9)

    @property
    def elapsed_indexing_s(self) -> float:
        return max(self.map_complete_s - self.start_s, 0.0)

    @property
    def records_per_second(self) -> float:
        return self.messages_read / self.elapsed_s

    @property
    def mb_per_second(self) -> float:
        return self.bytes_read / MIB / self.elapsed_s

    @property
    def size_reduction(self) -> float:
        return 1 - self.bytes_written / self.bytes_read if self.bytes_read else 0.0

    @property
    def message_reduction(self) -> float:
        return 1 - self.messages_written / self.messages_read if self.messages_read else 0.0

    def as_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("start_s", "map_complete_s", "end_s")
        }
        result.update(
            duration_seconds=round(self.elapsed_s, 6),
            indexing_seconds=round(self.elapsed_indexing_s, 6),
            buffer_utilization=round(self.buffer_utilization, 6),
            records_per_second=round(self.records_per_second, 1),
            mb_per_second=round(self.mb_per_second, 3),
            size_reduction=round(self.size_reduction, 6),
            message_reduction=round(self.message_reduction, 6),
        )
        return result

    def stats_line(self, thread_id: int) -> str:
        """Kafka's INFO line after each clean (MB = 2^20 bytes; "Mb/sec" is Kafka's spelling)."""
        elapsed = self.elapsed_s
        indexing = min(self.elapsed_indexing_s, elapsed)
        cleaning = max(elapsed - indexing, 1e-9)
        read_mb = self.bytes_read / MIB
        map_mb = self.map_bytes_read / MIB
        written_mb = self.bytes_written / MIB
        return (
            f"\n\tLog cleaner thread {thread_id} cleaned log {self.topic_partition} "
            f"(dirty section = [{self.first_dirty_offset}, {self.end_offset}])\n"
            f"\t{read_mb:.1f} MB of log processed in {elapsed:.1f} seconds "
            f"({read_mb / elapsed:.1f} MB/sec).\n"
            f"\tIndexed {map_mb:.1f} MB in {indexing:.1f} seconds "
            f"({map_mb / max(indexing, 1e-9):.1f} Mb/sec, {100 * indexing / elapsed:.1f}% of total "
            f"time)\n"
            f"\tBuffer utilization: {100 * self.buffer_utilization:.1f}%\n"
            f"\tCleaned {read_mb:.1f} MB in {cleaning:.1f} seconds "
            f"({read_mb / cleaning:.1f} Mb/sec, {100 * cleaning / elapsed:.1f}% of total time)\n"
            f"\tStart size: {read_mb:.1f} MB ({self.messages_read} messages)\n"
            f"\tEnd size: {written_mb:.1f} MB ({self.messages_written} messages)\n"
            f"\t{100 * self.size_reduction:.1f}% size reduction "
            f"({100 * self.message_reduction:.1f}% fewer messages)\n"
        )
