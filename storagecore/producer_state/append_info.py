"""The checks and updates of one producer's batches in one append (Kafka's
``ProducerAppendInfo``).

An append (a produce request's batches for one partition, or batches replayed from the log)
starts from the producer's current entry and a fresh copy without batches; every batch of
that producer is checked against what came before it (the current entry, then the earlier
batches of the same append) and added to the copy. Nothing changes the manager's state until
:meth:`storagecore.producer_state.manager.ProducerStateManager.update` takes the copy, after
the append was written. The checks depend on who appends (:class:`AppendOrigin`):

* a **client**: an epoch older than the current one is fenced (INVALID_PRODUCER_EPOCH); a new
  epoch must start at sequence 0 unless the producer had no epoch; within an epoch, the first
  sequence must follow the last one (modulo 2^31), except for a producer the partition does
  not know (never seen, or expired), which may start anywhere: otherwise
  OUT_OF_ORDER_SEQUENCE_NUMBER;
* the **coordinator** (transaction markers, offset commits): the epoch check only;
* **replication** (the log replaying its own batches, bulk loads): no check refuses anything.

A plain (non-transactional) batch of a producer whose transaction is open is refused
(INVALID_TXN_STATE) whatever the origin, as in Kafka; a replay logs it and goes on.
Duplicates (retries of one of the last five batches) are found by the caller before the
append is checked (:meth:`ProducerStateEntry.find_duplicate_batch`).
"""

from __future__ import annotations

import dataclasses
import logging

from storagecore.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from storagecore.log_validator import AppendOrigin
from storagecore.producer_state.entry import BatchMetadata, ProducerStateEntry
from storagecore.records import layout
from storagecore.records.batch import ControlType, RecordBatch

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction decided by a marker at ``last_offset`` (Kafka's ``CompletedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (
        next_sequence == 0 and last_sequence == layout.INT32_MAX
    )


class ProducerAppendInfo:
    def __init__(
        self, where: str, producer_id: int, current: ProducerStateEntry, origin: AppendOrigin
    ) -> None:
        assert producer_id != layout.NO_PRODUCER_ID, f"{where}: no producer id"
        assert current.producer_id == producer_id, f"{where}: entry of {current.producer_id}"
        self.where = where
        self.producer_id = producer_id
        self.current = current
        self.origin = origin
        self.updated = current.empty_copy()
        #: First offsets of the transactions this append opened.
        self.started_transactions: list[int] = []

    def append(self, batch: RecordBatch) -> CompletedTxn | None:
        """Check and record one batch of this producer (its offsets already assigned)."""
        if batch.is_control:
            if batch.records_count == 0:
                return None  # a marker emptied by the cleaner: its transaction is long decided
            record = batch.records()[0]
            if record.key is None or len(record.key) < layout.CONTROL_RECORD_KEY.size:
                raise CorruptRecordError(
                    f"{self.where}: control batch at offset {batch.base_offset} has no valid "
                    "control record key"
                )
            _version, control_type = layout.CONTROL_RECORD_KEY.unpack_from(record.key, 0)
            if control_type not in (ControlType.ABORT, ControlType.COMMIT):
                return None
            value = record.value or b""
            if len(value) < layout.END_TXN_MARKER_VALUE.size:
                raise CorruptRecordError(
                    f"{self.where}: transaction marker at offset {batch.base_offset} has a "
                    f"{len(value)}-byte value"
                )
            _version, coordinator_epoch = layout.END_TXN_MARKER_VALUE.unpack_from(value, 0)
            return self.append_end_txn_marker(
                batch.producer_epoch,
                coordinator_epoch,
                batch.base_offset,
                record.timestamp,
                aborted=control_type == ControlType.ABORT,
            )
        self.append_data_batch(
            batch.producer_epoch,
            batch.base_sequence,
            batch.last_sequence,
            batch.max_timestamp,
            batch.base_offset,
            batch.last_offset,
            transactional=batch.is_transactional,
        )
        return None

    def append_data_batch(  # noqa: PLR0917 - a batch header's fields, as Kafka's
        self,
        epoch: int,
        first_sequence: int,
        last_sequence: int,
        timestamp: int,
        first_offset: int,
        last_offset: int,
        *,
        transactional: bool,
    ) -> None:
        self._check_epoch(epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_sequence, first_offset)
        self.updated.add_batch(
            epoch,
            BatchMetadata(last_sequence, last_offset, last_offset - first_offset, timestamp),
        )
        if self.updated.current_txn_first_offset is not None and not transactional:
            message = (
                f"{self.where}: producer {self.producer_id} wrote a non-transactional batch at "
                f"offset {first_offset} while its transaction from offset "
                f"{self.updated.current_txn_first_offset} is open"
            )
            if self.origin is AppendOrigin.REPLICATION:
                logger.warning("%s", message)
            else:
                raise InvalidTxnStateError(message)
        elif self.updated.current_txn_first_offset is None and transactional:
            self.updated.current_txn_first_offset = first_offset
            self.started_transactions.append(first_offset)

    def append_end_txn_marker(
        self, epoch: int, coordinator_epoch: int, offset: int, timestamp: int, *, aborted: bool
    ) -> CompletedTxn | None:
        self._check_epoch(epoch, offset)
        first = self.updated.current_txn_first_offset
        # A marker without data opened nothing: it moves no stable offset, indexes nothing.
        completed = (
            None if first is None else CompletedTxn(self.producer_id, first, offset, aborted)
        )
        self.updated.end_transaction(epoch, coordinator_epoch, timestamp)
        return completed

    def _check_epoch(self, epoch: int, offset: int) -> None:
        if epoch >= self.updated.producer_epoch:
            return
        message = (
            f"{self.where}: producer {self.producer_id} epoch {epoch} at offset {offset} is "
            f"older than its current epoch {self.updated.producer_epoch}"
        )
        if self.origin is AppendOrigin.REPLICATION:
            logger.warning("%s", message)
        else:
            raise InvalidProducerEpochError(message)

    def _check_sequence(self, epoch: int, first_sequence: int, offset: int) -> None:
        updated = self.updated
        if epoch != updated.producer_epoch:
            if first_sequence != 0 and updated.producer_epoch != layout.NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"{self.where}: producer {self.producer_id} starts epoch {epoch} at "
                    f"sequence {first_sequence} (offset {offset}), not 0; its current epoch is "
                    f"{updated.producer_epoch}"
                )
            return
        if not updated.is_empty:
            last_sequence = updated.last_sequence
        elif epoch == self.current.producer_epoch:
            last_sequence = self.current.last_sequence
        else:
            last_sequence = layout.NO_SEQUENCE
        # A producer without an epoch here (unknown, expired, or all its batches deleted by
        # retention or DeleteRecords) may start at any sequence.
        if self.current.producer_epoch == layout.NO_PRODUCER_EPOCH:
            return
        if not in_sequence(last_sequence, first_sequence):
            raise OutOfOrderSequenceError(
                f"{self.where}: producer {self.producer_id} epoch {epoch} sent sequence "
                f"{first_sequence} (offset {offset}), expected {last_sequence + 1}"
            )
