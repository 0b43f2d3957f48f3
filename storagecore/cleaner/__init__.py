"""The log cleaner: compaction by key with Kafka's rules (Kafka's ``Cleaner``, ``LogCleaner``,
``LogCleanerManager``, ``SkimpyOffsetMap``, ``CleanerStats``, ``Throttler``).

What belongs here: choosing the filthiest log and the cleaning states (:mod:`.manager`), the
threads (:mod:`.log_cleaner`), one round over one log (:mod:`.cleaner`), the offset map
(:mod:`.offset_map`), the round's figures (:mod:`.stats`) and the shared I/O budget
(:mod:`.throttler`). The broker-level settings are :class:`storagecore.config.CleanerConfig`.
What must not: record framing (that is :mod:`storagecore.records`) or the swap protocol (that is
the log's); this package decides what to keep and asks the log to swap.
"""

from storagecore.cleaner.cleaner import (
    Cleaner,
    CleanRequest,
    dirty_segments,
)
from storagecore.cleaner.grouping import group_segments_by_size
from storagecore.cleaner.log_cleaner import LogCleaner
from storagecore.cleaner.manager import LogCleanerManager
from storagecore.cleaner.offset_map import SkimpyOffsetMap
from storagecore.cleaner.stats import CleanerStats
from storagecore.cleaner.throttler import Throttler
from storagecore.cleaner.transactions import CleanedTransactionMetadata

__all__ = [
    "CleanRequest",
    "CleanedTransactionMetadata",
    "Cleaner",
    "CleanerStats",
    "LogCleaner",
    "LogCleanerManager",
    "SkimpyOffsetMap",
    "Throttler",
    "dirty_segments",
    "group_segments_by_size",
]
