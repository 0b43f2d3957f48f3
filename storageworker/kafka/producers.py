"""Idempotent producers: producer IDs, and sequence checks before an append.

Kafka's ``ProducerStateManager`` rules for one partition, applied to a batch that carries a
producer ID (an idempotent producer's batch):

* an epoch older than the producer's current one is fenced: INVALID_PRODUCER_EPOCH;
* a batch whose (first, last) sequence equals one of the producer's last five batches is a
  retry of an append that already happened: it is acknowledged with the original offsets and
  not appended again;
* a new epoch must start at sequence 0; within an epoch, the first sequence must follow the
  last one (modulo 2^31): otherwise OUT_OF_ORDER_SEQUENCE_NUMBER;
* a producer the partition does not know (never seen, or its batches deleted) may start at any
  sequence, as in Kafka.

After a restart the state is rebuilt from the log (each producer's last batch, which the cleaner
keeps for exactly this reason), so a retry of the last acknowledged batch is still recognised.
The check and the append run under the partition's lock: two retries of one batch on two
connections cannot both append.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Final

from storagecore.records.batch import RecordBatch
from storagecore.transactions import TransactionState

BATCHES_KEPT: Final = 5
"""Kafka's ``NUM_BATCHES_TO_RETAIN``: retries of the last five batches are recognised."""
SEQUENCE_MODULUS: Final = 1 << 31


class SequenceError(Exception):
    """A batch that must not be appended; ``code`` is the Kafka error code to answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


INVALID_PRODUCER_EPOCH: Final = 47
OUT_OF_ORDER_SEQUENCE_NUMBER: Final = 45


@dataclasses.dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclasses.dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: collections.deque[BatchMetadata]


class PartitionProducers:
    """The idempotent producers of one partition."""

    def __init__(self, state: TransactionState) -> None:
        self.lock = threading.Lock()
        self.entries: dict[int, ProducerEntry] = {}
        for pid, last in state.producers.items():
            batches: collections.deque[BatchMetadata] = collections.deque(maxlen=BATCHES_KEPT)
            if last.last_data_offset is not None and last.first_sequence >= 0:
                batches.append(
                    BatchMetadata(
                        last.first_sequence,
                        last.last_sequence,
                        last.first_offset,
                        last.last_data_offset,
                        last.last_timestamp,
                    )
                )
            self.entries[pid] = ProducerEntry(last.producer_epoch, batches)

    def check(self, batch: RecordBatch, where: str) -> BatchMetadata | None:
        """The original append of a duplicate, None for a batch to append; SequenceError for
        a batch to refuse. Call with :attr:`lock` held, and :meth:`record` after appending."""
        pid, epoch = batch.producer_id, batch.producer_epoch
        first, last = batch.base_sequence, batch.last_sequence
        entry = self.entries.get(pid)
        if entry is None:
            return None
        if epoch < entry.epoch:
            raise SequenceError(
                INVALID_PRODUCER_EPOCH,
                f"{where}: producer {pid} epoch {epoch} is older than its current epoch "
                f"{entry.epoch}",
            )
        if epoch > entry.epoch:
            if first != 0:
                raise SequenceError(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"{where}: producer {pid} starts epoch {epoch} at sequence {first}, not 0",
                )
            return None
        for known in entry.batches:
            if known.first_sequence == first and known.last_sequence == last:
                return known
        if entry.batches:
            expected = (entry.batches[-1].last_sequence + 1) % SEQUENCE_MODULUS
            if first != expected:
                raise SequenceError(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"{where}: producer {pid} epoch {epoch} sent sequence {first}, "
                    f"expected {expected}",
                )
        return None

    def record(self, batch: RecordBatch, first_offset: int, timestamp: int) -> None:
        pid, epoch = batch.producer_id, batch.producer_epoch
        entry = self.entries.get(pid)
        if entry is None or epoch != entry.epoch:
            entry = ProducerEntry(epoch, collections.deque(maxlen=BATCHES_KEPT))
            self.entries[pid] = entry
        entry.batches.append(
            BatchMetadata(
                batch.base_sequence,
                batch.last_sequence,
                first_offset,
                first_offset + batch.last_offset_delta,
                timestamp,
            )
        )


class ProducerIds:
    """Producer IDs unique across restarts without stored state: the wall clock in ms
    shifted left by 10 bits, strictly increasing within the process (1024 IDs per ms)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def next(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, int(time.time() * 1000) << 10)
            return self._last
