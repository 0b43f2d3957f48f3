"""The log cleaner: compaction by key with Kafka's rules (Kafka's ``Cleaner``, ``LogCleaner``,
``LogCleanerManager``, ``SkimpyOffsetMap``, ``CleanerStats``, ``Throttler``).

What belongs here: choosing the filthiest log and the cleaning states (:mod:`.manager`), the
threads (:mod:`.log_cleaner`), one round over one log (:mod:`.cleaner`), the offset map
(:mod:`.offset_map`), the round's figures (:mod:`.stats`) and the shared I/O budget
(:mod:`.throttler`). The broker-level settings are :class:`storagecore.config.CleanerConfig`.
What must not: record framing (that is :mod:`storagecore.records`) or the swap protocol (that is
the log's); this package decides what to keep and asks the log to swap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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

# Each name is imported from its module on first use (PEP 562), so that importing one module of
# the package (``storagecore.config`` for the operator and the CLI's parser, say) does not
# import all of it. tests/integration/test_cli_startup.py checks what a command loads.
_MODULE_OF: dict[str, str] = {
    "Cleaner": "storagecore.cleaner.cleaner",
    "CleanRequest": "storagecore.cleaner.cleaner",
    "dirty_segments": "storagecore.cleaner.cleaner",
    "group_segments_by_size": "storagecore.cleaner.grouping",
    "LogCleaner": "storagecore.cleaner.log_cleaner",
    "LogCleanerManager": "storagecore.cleaner.manager",
    "SkimpyOffsetMap": "storagecore.cleaner.offset_map",
    "CleanerStats": "storagecore.cleaner.stats",
    "Throttler": "storagecore.cleaner.throttler",
    "CleanedTransactionMetadata": "storagecore.cleaner.transactions",
}


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'storagecore.cleaner' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
