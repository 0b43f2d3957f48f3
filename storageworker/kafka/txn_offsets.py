"""Offsets committed inside transactions (TxnOffsetCommit), held back until the transaction's
marker reaches ``__consumer_offsets`` (Kafka's ``pendingTransactionalOffsetCommits``).

The records are written at once, in a transactional batch of the producer; a COMMIT marker
makes them the group's committed offsets, an ABORT marker drops them. The same rule applies
when ``__consumer_offsets`` is read back at start (:meth:`PendingTxnOffsets.load_batch`), so an
aborted transaction's offsets never come back after a restart.
"""

from __future__ import annotations

import logging

from storagecore.config import TopicPartition
from storagecore.records.batch import ControlType, RecordBatch
from storagecore.transactions import control_type_of
from storageworker.kafka.offset_records import CommittedOffset, batch_offset_commits

logger = logging.getLogger(__name__)

#: group → (topic, partition) → offset
GroupOffsets = dict[str, dict[tuple[str, int], CommittedOffset]]


class PendingTxnOffsets:
    def __init__(self) -> None:
        #: producer id → the offsets its open transaction committed
        self.by_producer: dict[int, GroupOffsets] = {}

    def add(
        self, producer_id: int, group: str, offsets: dict[tuple[str, int], CommittedOffset]
    ) -> None:
        self.by_producer.setdefault(producer_id, {}).setdefault(group, {}).update(offsets)

    def complete(self, producer_id: int, committed: bool, store: GroupOffsets) -> int:
        """Apply (commit) or drop (abort) the producer's pending offsets; returns how many."""
        pending = self.by_producer.pop(producer_id, {})
        count = 0
        for group, offsets in pending.items():
            count += len(offsets)
            if committed:
                store.setdefault(group, {}).update(offsets)
        return count

    def pending_keys(self, group: str) -> set[tuple[str, int]]:
        """The (topic, partition) of ``group`` an undecided transaction has committed."""
        return {key for offsets in self.by_producer.values() for key in offsets.get(group, {})}

    def pending_groups(self) -> dict[str, int]:
        """Group → offsets awaiting a marker (for the status page)."""
        out: dict[str, int] = {}
        for offsets in self.by_producer.values():
            for group, items in offsets.items():
                out[group] = out.get(group, 0) + len(items)
        return out

    def load_batch(self, batch: RecordBatch, tp: TopicPartition, store: GroupOffsets) -> int:
        """A transactional batch of ``__consumer_offsets`` read back at start: data is held
        as pending, a marker completes it. Returns the records applied or held."""
        if batch.is_control:
            control = control_type_of(batch)
            if control in (ControlType.COMMIT, ControlType.ABORT):
                self.complete(batch.producer_id, control is ControlType.COMMIT, store)
            return 0
        held = 0
        for group, topic, partition, committed in batch_offset_commits(batch, tp):
            if committed is None:
                continue
            self.add(batch.producer_id, group, {(topic, partition): committed})
            held += 1
        return held
