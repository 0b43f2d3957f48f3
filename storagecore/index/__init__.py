"""Sparse, memory-mapped segment indexes (Kafka's OffsetIndex and TimeIndex)."""

from storagecore.index.offset_index import OffsetIndex, OffsetPosition
from storagecore.index.time_index import TimeIndex, TimestampOffset

__all__ = ["OffsetIndex", "OffsetPosition", "TimeIndex", "TimestampOffset"]
