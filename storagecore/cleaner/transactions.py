"""Kafka's ``CleanedTransactionMetadata``: which transactional batches and markers a cleaning
pass may discard, carried across the groups of one round.

Used by :mod:`storagecore.cleaner.cleaner` (both passes) and the Spark ``compact`` job. Pure
bookkeeping over the aborted-transaction list of the log's transaction indexes: no I/O.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Sequence

from storagecore.records.batch import ControlType, RecordBatch
from storagecore.transactions import AbortedTxn


@dataclasses.dataclass(slots=True)
class _OngoingAborted:
    txn: AbortedTxn
    observed_batch: bool = False


class CleanedTransactionMetadata:
    """Which transactional batches and markers a pass may discard.

    Aborted transactions wait in a heap by first offset and become "ongoing" when the pass
    reaches their first offset. Aborted data is discarded at once; an ABORT marker may go only
    once no batch of its transaction is left (on a later pass), a COMMIT marker only once none
    of its transaction's batches is seen. A kept marker survives further until its horizon.
    One instance carries the state across all groups of a round (KAFKA-8351).
    """

    def __init__(self, aborted: Sequence[AbortedTxn] = ()) -> None:
        self._heap: list[AbortedTxn] = list(aborted)
        heapq.heapify(self._heap)
        self._ongoing_aborted: dict[int, _OngoingAborted] = {}
        self._ongoing_committed: set[int] = set()
        self.retained_aborted: list[AbortedTxn] = []

    def on_plain_batches(self, last_offset: int) -> None:
        """A run of batches that are neither transactional nor control batches, ending at
        ``last_offset``, was passed (by the C engine's region calls): the same as
        :meth:`on_data_batch` for each of them."""
        self._consume_up_to(last_offset)

    def _consume_up_to(self, offset: int) -> None:
        while self._heap and self._heap[0].first_offset <= offset:
            txn = heapq.heappop(self._heap)
            self._ongoing_aborted.setdefault(txn.producer_id, _OngoingAborted(txn))

    def on_control_batch(self, batch: RecordBatch, control_type: ControlType | None) -> bool:
        """True when the marker's transaction has no data left here (it may be discarded)."""
        self._consume_up_to(batch.last_offset)
        if control_type is None:
            return True  # an emptied control batch, already cleaned
        pid = batch.producer_id
        if control_type is ControlType.ABORT:
            ongoing = self._ongoing_aborted.pop(pid, None)
            if ongoing is not None and ongoing.observed_batch:
                self.retained_aborted.append(ongoing.txn)
                return False
            return True
        if control_type is ControlType.COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_data_batch(self, batch: RecordBatch) -> bool:
        """True when the batch belongs to an aborted transaction (discard its records)."""
        self._consume_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(batch.producer_id)
        if ongoing is not None:
            ongoing.observed_batch = True
            return True
        self._ongoing_committed.add(batch.producer_id)
        return False
