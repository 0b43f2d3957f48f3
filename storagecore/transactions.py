"""Producer and transaction state of a log, derived from its batch headers.

Kafka keeps this state in memory (``ProducerStateManager``), snapshots it to ``.snapshot`` files
and records every aborted transaction in the ``.txnindex`` of the segment holding its marker
(so does Logkeeper: :mod:`storagecore.index.transaction_index`). Here it is derived from the
log itself, which holds the same facts: a producer's transactional
data batches open its transaction, its next COMMIT or ABORT marker closes it. One header walk
gives what the cleaner and the cleanable range need:

* the **aborted transactions** (producer, first offset, marker offset, last stable offset),
  Kafka's ``AbortedTxn``, as the ``.txnindex`` files hold them (what the segment recovery
  rebuilds a lost or corrupt file from: :mod:`storagecore.aborted_transactions`);
* the **open transactions**, whose first offset bounds the last stable offset: nothing at or
  after it may be cleaned until the transaction is decided;
* each producer's **last batch** (last data offset, epoch, last timestamp), which the cleaner
  keeps, possibly empty, so that the producer's sequence state survives compaction.

The walk reads headers only (plus the one record of each control batch) and is incremental:
:meth:`TransactionState.extend` continues from where the previous walk stopped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from storagecore.errors import CorruptRecordError
from storagecore.index.transaction_index import AbortedTxn
from storagecore.producer_state.entry import ProducerLastBatch
from storagecore.records import layout
from storagecore.records.batch import ControlType, RecordBatch

if TYPE_CHECKING:
    from storagecore.segment import LogSegment

__all__ = ["AbortedTxn", "ProducerLastBatch", "TransactionState", "control_type_of", "extend_over"]


@dataclasses.dataclass(slots=True)
class TransactionState:
    aborted: list[AbortedTxn] = dataclasses.field(default_factory=list)
    open_first_offsets: dict[int, int] = dataclasses.field(default_factory=dict)
    producers: dict[int, ProducerLastBatch] = dataclasses.field(default_factory=dict)
    next_offset: int = 0
    """Offset after the last batch walked (where :meth:`extend` continues)."""

    def copy(self) -> TransactionState:
        return TransactionState(
            list(self.aborted),
            dict(self.open_first_offsets),
            dict(self.producers),
            self.next_offset,
        )

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest undecided transaction, None when all are decided."""
        return min(self.open_first_offsets.values(), default=None)

    def active_producers(self, now_ms: int, expiration_ms: int) -> dict[int, ProducerLastBatch]:
        """Producers not expired by ``producer.id.expiration.ms`` (a producer with an open
        transaction never expires)."""
        return {
            pid: last
            for pid, last in self.producers.items()
            if pid in self.open_first_offsets or last.last_timestamp >= now_ms - expiration_ms
        }

    def extend(self, batches: Iterable[RecordBatch]) -> None:
        """Walk further batches, in offset order, from :attr:`next_offset` on."""
        for batch in batches:
            if batch.last_offset < self.next_offset:
                continue
            self.next_offset = batch.next_offset
            pid = batch.producer_id
            if pid == layout.NO_PRODUCER_ID:
                continue
            previous = self.producers.get(pid)
            if batch.is_control:
                control_type = control_type_of(batch)
                if control_type in (ControlType.ABORT, ControlType.COMMIT):
                    first = self.open_first_offsets.pop(pid, None)
                    if first is not None and control_type is ControlType.ABORT:
                        # The LSO Kafka records: the earliest other open transaction's start.
                        lso = min(self.open_first_offsets.values(), default=batch.next_offset)
                        self.aborted.append(AbortedTxn(first, batch.last_offset, pid, lso))
                self.producers[pid] = ProducerLastBatch(
                    previous.last_data_offset if previous is not None else None,
                    batch.producer_epoch,
                    batch.max_timestamp,
                    previous.first_sequence if previous is not None else -1,
                    previous.last_sequence if previous is not None else -1,
                    previous.first_offset if previous is not None else -1,
                )
            else:
                if batch.is_transactional and pid not in self.open_first_offsets:
                    self.open_first_offsets[pid] = batch.base_offset
                self.producers[pid] = ProducerLastBatch(
                    batch.last_offset,
                    batch.producer_epoch,
                    batch.max_timestamp,
                    batch.base_sequence,
                    batch.last_sequence,
                    batch.base_offset,
                )


def extend_over(state: TransactionState | None, segments: Sequence[LogSegment]) -> TransactionState:
    """``state`` (None: a new one) extended over what ``segments`` hold beyond it."""
    state = state if state is not None else TransactionState()
    for segment in segments:
        next_offset = segment.next_offset()
        if next_offset > state.next_offset:
            state.extend(segment.producer_batches(state.next_offset))
            # The walk yields producer batches only: what follows the last is walked.
            state.next_offset = max(state.next_offset, next_offset)
    return state


def control_type_of(batch: RecordBatch) -> ControlType | None:
    """The type of a control batch's marker, or None for an emptied control batch."""
    if batch.records_count == 0:
        return None
    records = batch.records()
    key = records[0].key
    if key is None or len(key) < layout.CONTROL_RECORD_KEY.size:
        raise CorruptRecordError(
            f"control batch at offset {batch.base_offset} has no valid control record key"
        )
    _version, type_id = layout.CONTROL_RECORD_KEY.unpack_from(key, 0)
    try:
        return ControlType(type_id)
    except ValueError:
        return ControlType.UNKNOWN
