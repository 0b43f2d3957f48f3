"""One producer's state in one partition (Kafka's ``ProducerStateEntry`` and ``BatchMetadata``).

A producer is known by its ID; the entry keeps its current epoch, the epoch of the last
transaction coordinator that wrote a marker for it, the first offset of its open transaction,
and the metadata of its last :data:`BATCHES_KEPT` data batches, oldest first. The batches are
what makes a retried produce request a *duplicate*: a batch of the current epoch with the same
first and last sequence as one of them was appended already, at that batch's offsets.

Who uses it: :mod:`storagecore.producer_state.append_info` validates appends against an entry,
:mod:`storagecore.producer_state.manager` keeps the entries of a partition and
:mod:`storagecore.producer_state.snapshot` writes and reads them. Pure values: no I/O.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Final

from storagecore.records import layout

BATCHES_KEPT: Final = 5
"""Kafka's ``NUM_BATCHES_TO_RETAIN``: at most five batches of a producer may be in flight
(``max.in.flight.requests.per.connection`` <= 5 with idempotence), so the last five are the
ones a retry can repeat."""

SEQUENCE_MODULUS: Final = layout.INT32_MAX + 1
"""Sequences wrap from 2^31 - 1 to 0."""


@dataclasses.dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What an appended data batch leaves behind: its last sequence and last offset, the offset
    delta between its first and last record (the same as between its first and last sequence),
    and its max timestamp. The first sequence and first offset derive from them, as in Kafka."""

    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int

    def __post_init__(self) -> None:
        assert self.offset_delta >= 0, f"negative offset delta in {self}"

    @property
    def first_sequence(self) -> int:
        return (self.last_sequence - self.offset_delta) % SEQUENCE_MODULUS

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclasses.dataclass(slots=True)
class ProducerStateEntry:
    """The state of one producer ID. ``batches`` is ordered by sequence, oldest first."""

    producer_id: int
    producer_epoch: int = layout.NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = layout.NO_TIMESTAMP
    current_txn_first_offset: int | None = None
    """First offset of the producer's open transaction; None when it has none."""
    batches: collections.deque[BatchMetadata] = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=BATCHES_KEPT)
    )

    # Invariant: len(batches) <= BATCHES_KEPT (the deque's maxlen drops the oldest).

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else layout.NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
            collections.deque(self.batches, maxlen=BATCHES_KEPT),
        )

    def empty_copy(self) -> ProducerStateEntry:
        """The same producer, epochs and transaction, without batches: what an append starts
        from (Kafka's ``withProducerIdAndBatchMetadata(id, empty)``)."""
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
        )

    def maybe_update_producer_epoch(self, epoch: int) -> bool:
        """A new epoch forgets the batches of the old one; True when the epoch changed."""
        if epoch == self.producer_epoch:
            return False
        self.batches.clear()
        self.producer_epoch = epoch
        return True

    def add_batch(self, epoch: int, batch: BatchMetadata) -> None:
        self.maybe_update_producer_epoch(epoch)
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp

    def update(self, newer: ProducerStateEntry) -> None:
        """Take over what an append produced (``newer`` holds only the append's batches)."""
        self.maybe_update_producer_epoch(newer.producer_epoch)
        self.batches.extend(newer.batches)
        self.coordinator_epoch = newer.coordinator_epoch
        self.current_txn_first_offset = newer.current_txn_first_offset
        self.last_timestamp = newer.last_timestamp

    def end_transaction(self, epoch: int, coordinator_epoch: int, timestamp: int) -> None:
        """A COMMIT or ABORT marker: the transaction is decided; the marker is no data batch."""
        self.maybe_update_producer_epoch(epoch)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = None
        self.last_timestamp = timestamp

    def find_duplicate_batch(
        self, epoch: int, first_sequence: int, last_sequence: int
    ) -> BatchMetadata | None:
        """The retained batch of this epoch with exactly this sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_sequence == first_sequence and batch.last_sequence == last_sequence:
                return batch
        return None


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerLastBatch:
    """What Kafka's ``lastRecordsOfActiveProducers`` returns for one producer."""

    last_data_offset: int | None
    """Last offset of the producer's last data batch; None if it only wrote markers."""
    producer_epoch: int
    last_timestamp: int
    first_sequence: int = -1
    """Base sequence of the producer's last data batch (-1: none, or only markers)."""
    last_sequence: int = -1
    first_offset: int = -1
    """Base offset of the producer's last data batch."""
