"""The transactions of one partition's log as its readers and its cleaner see them: the last
stable offset and open transactions (from the producer state), the aborted transactions (from
the segments' ``.txnindex`` files), the producers' last batches (from a walk of batch headers,
for the cleaner) and the write of an append whose ABORT markers complete transactions.

Owned by :class:`storagecore.log.Log`, which holds its lock around every call; the pieces are
:mod:`storagecore.aborted_transactions`, :mod:`storagecore.transactions` and the producer state.

What must not be here: the segment list's protocols (:mod:`storagecore.local_log`) or the
checks of an append (the producer state's).
"""

from __future__ import annotations

import os

from storagecore.aborted_transactions import (
    checked_txn_index,
    collect_aborted_transactions,
    index_unindexed_segments,
    index_written_aborts,
)
from storagecore.index.transaction_index import AbortedTxn
from storagecore.local_log import LocalLog
from storagecore.log_validator import ValidatedRecords
from storagecore.producer_state import ProducerStateManager
from storagecore.producer_state.entry import ProducerLastBatch
from storagecore.producer_state.manager import PendingAppend
from storagecore.segment import LogSegment
from storagecore.transactions import TransactionState, extend_over


class LogTransactions:
    def __init__(self, local: LocalLog, producer_state: ProducerStateManager) -> None:
        self._local = local
        self.producer_state = producer_state
        # The header walk, extended as the log grows; None after segments were removed or
        # replaced (forget()), when it starts over on next use.
        self._walk: TransactionState | None = None

    def forget(self) -> None:
        """Segments were removed, replaced or bulk-appended: the walk starts over."""
        self._walk = None

    @property
    def walked(self) -> bool:
        """Whether a header walk is held (tests: a read_committed fetch needs none)."""
        return self._walk is not None

    def state(self) -> TransactionState:
        """Producer and transaction state of the whole log, derived by walking batch headers
        (:mod:`storagecore.transactions`); the walk continues from where the last one
        stopped."""
        with self._local.io(f"read producer state of {self._local.tp}"):
            state = self._walk = extend_over(self._walk, self._local.segments)
            return state

    def last_records_of_active_producers(
        self, now_ms: int, expiration_ms: int
    ) -> dict[int, ProducerLastBatch]:
        """What the cleaner keeps of each producer (Kafka's ``lastRecordsOfActiveProducers``),
        from the producer state (caught up with a bulk append first): no walk of the log."""
        with self._local.io(f"read producer state of {self._local.tp}"):
            self.producer_state.catch_up(self._local.segments, self._local.log_end_offset)
            return self.producer_state.last_records_of_active_producers(now_ms, expiration_ms)

    def last_stable_offset(self, high_watermark: int) -> int:
        """The first offset of the earliest undecided transaction, else the high watermark:
        from the producer state, which the append path keeps current (no walk per call)."""
        first_unstable = self.producer_state.first_unstable_offset()
        return high_watermark if first_unstable is None else min(first_unstable, high_watermark)

    def aborted(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Kafka's ``collectAbortedTransactions`` over the ``.txnindex`` files."""
        with self._local.io(f"read the transaction index of {self._local.tp}"):
            return collect_aborted_transactions(self._local.segments, start_offset, upper_offset)

    def append(
        self, segment: LogSegment, validated: ValidatedRecords, producers: PendingAppend | None
    ) -> None:
        """Write ``validated`` to ``segment`` (the active one, after any roll) and index the
        transactions its ABORT markers complete in the segment's ``.txnindex``, with Kafka's
        last stable offset at that time. The index's descriptor is had, and its entries
        checked, before anything is written: a failure leaves both files as they were."""
        aborted = self.producer_state.aborted_txns(producers)
        txn_fd = None
        if aborted:
            txn_fd = checked_txn_index(self._local.segments, segment).open_for_append()
        try:
            segment.append(
                validated.last_offset,
                validated.max_timestamp,
                validated.shallow_offset_of_max_timestamp,
                validated.buffer,
            )
            if txn_fd is not None:
                segment.txn_index.append_all(aborted, txn_fd)
        finally:
            if txn_fd is not None:
                os.close(txn_fd)

    def index_unindexed_segments(self) -> int:
        """:func:`storagecore.aborted_transactions.index_unindexed_segments` (the upgrade)."""
        with self._local.io(f"write the transaction indexes of {self._local.tp}"):
            return index_unindexed_segments(self._local.segments)

    def bulk_appended(self, first_offset: int) -> None:
        """Batches from ``first_offset`` on were written past the append path."""
        index_written_aborts(self._local.segments, first_offset)
        self._walk = None
