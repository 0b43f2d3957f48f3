"""Sparse segment indexes (Kafka's OffsetIndex and TimeIndex), mapped while written."""

from storagecore.index.base import MAPPED
from storagecore.index.offset_index import OffsetIndex, OffsetPosition
from storagecore.index.time_index import TimeIndex, TimestampOffset

__all__ = ["MAPPED", "OffsetIndex", "OffsetPosition", "TimeIndex", "TimestampOffset"]
