"""The transaction coordinator of the worker (Kafka's ``TransactionCoordinator`` for
transaction version 1, on a single node).

Every transactional id maps to a partition of ``__transaction_state`` (Kafka's hash) and this
worker coordinates all of them. The requests, in a transaction's life:

1. **InitProducerId** with a ``transactional.id``: a new id gets a producer id and epoch 0; a
   known one gets its epoch bumped (every older producer of the id is a zombie from then on:
   PRODUCER_FENCED, INVALID_PRODUCER_EPOCH on its writes). An ongoing transaction of the id is
   aborted first, its markers written with the bumped epoch. When the epoch would pass
   ``Short.MAX_VALUE`` the id gets a new producer id (Kafka's rule).
2. **AddPartitionsToTxn** / **AddOffsetsToTxn**: partitions (for offsets: the group's
   ``__consumer_offsets`` partition) join the transaction; the first one starts its timer.
3. Produce with the ``transactional_id`` (checked by :meth:`TransactionCoordinator.verify`:
   KIP-890 part 1, the partition must be in the ongoing transaction of that producer and
   epoch) and **TxnOffsetCommit** (offsets held until the marker, :mod:`.txn_offsets`).
4. **EndTxn**: PrepareCommit/PrepareAbort is written to ``__transaction_state``, then a COMMIT
   or ABORT marker to every partition of the transaction, then CompleteCommit/CompleteAbort.

Crash protocol (each step is a record in ``__transaction_state`` before the next begins):
  1. Prepare* written: the decision is durable; markers may be partly written.
  2. markers written (a marker appended twice is harmless: the second finds no open
     transaction of the producer and changes nothing);
  3. Complete* written.
At start :meth:`load` reads the topic back (last record per id wins, tombstones remove) and
:meth:`complete_pending` finishes every Prepare* (steps 2 and 3 again). An Ongoing transaction
stays open until its client ends it or its timeout aborts it (:meth:`abort_expired`, run
periodically): the last stable offset of its partitions cannot freeze.

Requests are served one at a time (one asyncio lock): each writes at most a few small records.
Blocking log I/O goes through ``write``, which the server runs in a thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from storagecore.config import TopicPartition
from storagecore.errors import StorageError
from storagecore.records.batch import ControlType, NewRecord, iter_complete_batches
from storagecore.records.memory_records_builder import build_batch, build_control_batch
from storageworker.kafka.groups import GroupCoordinator
from storageworker.kafka.offset_records import (
    OFFSETS_TOPIC,
    CommittedOffset,
    offset_key,
    offset_value,
    offsets_partition,
)
from storageworker.kafka.transaction_state import (
    EPOCH_MAX,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TRANSACTION_STATE_TOPIC,
    TransactionMetadata,
    TxnState,
    key_bytes,
    parse_record,
    partition_for,
    value_bytes,
)
from storageworker.kafka.wire import ProtocolError

logger = logging.getLogger(__name__)

NONE: Final = 0
INVALID_REQUEST: Final = 42
UNKNOWN_TOPIC_OR_PARTITION: Final = 3
COORDINATOR_NOT_AVAILABLE: Final = 15
ILLEGAL_GENERATION: Final = 22
UNKNOWN_MEMBER_ID: Final = 25
INVALID_PRODUCER_EPOCH: Final = 47
INVALID_TXN_STATE: Final = 48
INVALID_PRODUCER_ID_MAPPING: Final = 49
INVALID_TRANSACTION_TIMEOUT: Final = 50
CONCURRENT_TRANSACTIONS: Final = 51
OPERATION_NOT_ATTEMPTED: Final = 55
KAFKA_STORAGE_ERROR: Final = 56
PRODUCER_FENCED: Final = 90

#: Kafka's ``transaction.max.timeout.ms`` default.
TRANSACTION_MAX_TIMEOUT_MS: Final = 900_000
#: Kafka's ``transactional.id.expiration.ms`` default (7 days).
TRANSACTIONAL_ID_EXPIRATION_MS: Final = 604_800_000

#: (topic-partition, records, as the coordinator (markers) or not) → base offset appended
Write = Callable[[TopicPartition, bytes, bool], Awaitable[int]]


@dataclasses.dataclass
class TxnCounters:
    committed: int = 0
    aborted: int = 0
    aborted_by_timeout: int = 0
    fenced_producers: int = 0
    expired_ids: int = 0
    markers_written: int = 0


class TransactionCoordinator:
    def __init__(  # noqa: PLR0917 - its collaborators, wired once by the server
        self,
        write: Write,
        served: Callable[[], dict[str, int]],
        next_producer_id: Callable[[], int],
        groups: GroupCoordinator,
        state_partitions: int,
        clock_ms: Callable[[], int],
        *,
        max_timeout_ms: int = TRANSACTION_MAX_TIMEOUT_MS,
        id_expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS,
    ) -> None:
        self.write = write
        self.served = served
        self.next_producer_id = next_producer_id
        self.groups = groups
        self.state_partitions = state_partitions
        self.clock_ms = clock_ms
        self.max_timeout_ms = max_timeout_ms
        self.id_expiration_ms = id_expiration_ms
        # Invariant: a transactional id's entry is what its last record in
        # __transaction_state says (the coordinator writes first, then changes the entry).
        self.transactions: dict[str, TransactionMetadata] = {}
        self.counters = TxnCounters()
        self._lock = asyncio.Lock()

    # -- loading ---------------------------------------------------------------------------------
    def load(self, records: bytes, tp: TopicPartition) -> int:
        """Apply one read of ``__transaction_state`` (offset order); returns records applied.
        A record that is not Kafka's is skipped with a warning naming its offset."""
        applied = 0
        for _position, batch in iter_complete_batches(records):
            if batch.is_control:
                continue
            for record in batch.records():
                if record.key is None:
                    continue
                try:
                    txn_id, meta = parse_record(
                        record.key, record.value, f"{tp} offset {record.offset}"
                    )
                except ProtocolError as exc:
                    logger.warning("Skipped a transaction log record: %s", exc)
                    continue
                if meta is None:
                    self.transactions.pop(txn_id, None)
                else:
                    self.transactions[txn_id] = meta
                applied += 1
        return applied

    async def complete_pending(self) -> int:
        """Finish every transaction left in PrepareCommit/PrepareAbort (a crash between the
        decision and its markers): write the markers and the Complete state again."""
        done = 0
        async with self._lock:
            for meta in list(self.transactions.values()):
                if meta.state.is_preparing:
                    await self._complete(meta, meta.state is TxnState.PREPARE_COMMIT)
                    done += 1
        return done

    # -- InitProducerId ----------------------------------------------------------------------
    async def init_producer_id(self, data: dict[str, Any], version: int) -> dict[str, Any]:
        """Kafka's ``handleInitProducerId`` / ``prepareInitProducerIdTransit``."""
        txn_id: str = data["transactional_id"]
        timeout_ms: int = data["transaction_timeout_ms"]
        failed: dict[str, Any] = {"producer_id": NO_PRODUCER_ID, "producer_epoch": -1}
        if not txn_id:
            return {**failed, "error_code": INVALID_REQUEST}
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return {**failed, "error_code": INVALID_TRANSACTION_TIMEOUT}
        expected: tuple[int, int] | None = (data["producer_id"], data["producer_epoch"])
        if expected is not None and expected[0] == NO_PRODUCER_ID:
            expected = None  # a new producer (v0-2 never name one)
        async with self._lock:
            now = self.clock_ms()
            meta = self.transactions.get(txn_id)
            if meta is None:
                meta = TransactionMetadata(
                    txn_id, self.next_producer_id(), NO_PRODUCER_EPOCH, timeout_ms,
                    TxnState.EMPTY, last_update_ms=now,
                )  # fmt: skip
            if expected is not None and not (
                meta.producer_epoch == NO_PRODUCER_EPOCH
                or expected[0] == meta.producer_id
                or (expected[0] == meta.last_producer_id and expected[1] >= EPOCH_MAX - 1)
            ):
                return {**failed, "error_code": _fenced(version, 4)}
            if meta.state.is_preparing:
                return {**failed, "error_code": CONCURRENT_TRANSACTIONS}  # the client retries
            if meta.state is TxnState.ONGOING:
                # A new instance of the producer: the old one's transaction is aborted with a
                # bumped epoch (its markers fence the zombie on every partition). Kafka then
                # answers CONCURRENT_TRANSACTIONS and the client's retry bumps again; here the
                # abort is done before answering, and the bump below is that retry's.
                self.counters.fenced_producers += 1
                fenced = self._bumped(meta, now)
                fenced.state = TxnState.PREPARE_ABORT
                error = await self._persist(fenced)
                if error:
                    return {**failed, "error_code": error}
                if not await self._complete(fenced, committed=False):
                    return {**failed, "error_code": CONCURRENT_TRANSACTIONS}
                meta = self.transactions[txn_id]
            nxt = self._next_epoch(meta, expected, now)
            if nxt is None:
                return {**failed, "error_code": _fenced(version, 4)}
            nxt.state, nxt.timeout_ms, nxt.partitions, nxt.start_ms = (
                TxnState.EMPTY, timeout_ms, set(), -1,
            )  # fmt: skip
            error = await self._persist(nxt)
            if error:
                return {**failed, "error_code": error}
            return {**failed, "error_code": NONE, "producer_id": nxt.producer_id,
                    "producer_epoch": nxt.producer_epoch}  # fmt: skip

    def _next_epoch(
        self, meta: TransactionMetadata, expected: tuple[int, int] | None, now: int
    ) -> TransactionMetadata | None:
        """Kafka's ``prepareIncrementProducerEpoch`` (or ``prepareProducerIdRotation`` when
        the epoch is exhausted); None when ``expected`` names an epoch to fence."""
        current = meta.producer_epoch
        if current >= EPOCH_MAX - 1 and (expected is None or expected[1] == current):
            return self._bumped(meta, now)  # a new producer id
        out = meta.copy()
        out.last_update_ms = now
        if expected is None:
            out.producer_epoch, out.last_producer_epoch = current + 1, NO_PRODUCER_EPOCH
        elif current == NO_PRODUCER_EPOCH or expected[1] == current:
            out.producer_epoch, out.last_producer_epoch = current + 1, current
        elif expected[1] == meta.last_producer_epoch:
            pass  # a retry of a bump whose answer was lost: the same epoch again
        else:
            return None
        return out

    def _bumped(self, meta: TransactionMetadata, now: int) -> TransactionMetadata:
        """The next epoch of ``meta``, or a new producer id at epoch 0 when exhausted."""
        out = meta.copy()
        out.last_producer_id, out.last_producer_epoch = meta.producer_id, meta.producer_epoch
        if meta.producer_epoch >= EPOCH_MAX - 1:
            out.producer_id, out.producer_epoch = self.next_producer_id(), 0
        else:
            out.producer_epoch = meta.producer_epoch + 1
        out.last_update_ms = now
        return out

    # -- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------
    async def add_partitions(self, request: dict[str, Any], version: int) -> dict[str, Any]:
        data = {  # the client's versions (0-3) name the fields "v3_and_below_*"
            "transactional_id": request["v3_and_below_transactional_id"],
            "producer_id": request["v3_and_below_producer_id"],
            "producer_epoch": request["v3_and_below_producer_epoch"],
        }
        wanted = [
            TopicPartition(topic["name"], index)
            for topic in request["v3_and_below_topics"]
            for index in topic["partitions"]
        ]
        served = self.served()
        unknown = {tp for tp in wanted if not 0 <= tp.partition < served.get(tp.topic, 0)}
        if unknown:
            errors = {tp: UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else OPERATION_NOT_ATTEMPTED
                      for tp in wanted}  # fmt: skip
        else:
            error = await self._add(data, wanted, version, 2)
            errors = dict.fromkeys(wanted, error)
        by_topic: dict[str, list[dict[str, int]]] = {}
        for tp, code in errors.items():
            by_topic.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "partition_error_code": code}
            )
        return {"results_by_topic_v3_and_below": [
            {"name": name, "results_by_partition": parts} for name, parts in by_topic.items()
        ]}  # fmt: skip

    async def add_offsets(self, data: dict[str, Any], version: int) -> dict[str, Any]:
        tp = TopicPartition(
            OFFSETS_TOPIC, offsets_partition(data["group_id"], self.groups.offsets_partitions)
        )
        return {"error_code": await self._add(data, [tp], version, 2)}

    async def _add(
        self, data: dict[str, Any], wanted: list[TopicPartition], version: int, fenced_from: int
    ) -> int:
        async with self._lock:
            meta = self.transactions.get(data["transactional_id"])
            error = self._check_producer(meta, data, version, fenced_from)
            if error or meta is None:
                return error or INVALID_PRODUCER_ID_MAPPING
            if meta.state.is_preparing:
                return CONCURRENT_TRANSACTIONS
            if meta.state is TxnState.ONGOING and meta.partitions.issuperset(wanted):
                return NONE
            now = self.clock_ms()
            updated = meta.copy()
            if meta.state is not TxnState.ONGOING:
                updated.partitions, updated.start_ms = set(), now
            updated.state, updated.last_update_ms = TxnState.ONGOING, now
            updated.partitions.update(wanted)
            return await self._persist(updated)

    def _check_producer(
        self, meta: TransactionMetadata | None, data: dict[str, Any], version: int, since: int
    ) -> int:
        if meta is None or meta.producer_id != data["producer_id"]:
            return INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != data["producer_epoch"]:
            return _fenced(version, since)
        return NONE

    # -- Produce verification (KIP-890 part 1) -------------------------------------------------
    def verify(
        self, transactional_id: str, producer_id: int, epoch: int, tp: TopicPartition
    ) -> int:
        """NONE when a transactional batch of ``producer_id``/``epoch`` may be appended to
        ``tp``: its transaction is ongoing and holds ``tp``. Kafka answers a batch sent
        before AddPartitionsToTxn (a hanging transaction's cause) with INVALID_TXN_STATE."""
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        if epoch < meta.producer_epoch:
            return INVALID_PRODUCER_EPOCH
        if meta.state is not TxnState.ONGOING or tp not in meta.partitions:
            return INVALID_TXN_STATE
        return NONE

    # -- TxnOffsetCommit ---------------------------------------------------------------------
    async def txn_offset_commit(self, data: dict[str, Any], version: int) -> dict[str, Any]:
        group_id: str = data["group_id"]
        tp = TopicPartition(
            OFFSETS_TOPIC, offsets_partition(group_id, self.groups.offsets_partitions)
        )
        served = self.served()
        now = self.clock_ms()
        async with self._lock:
            meta = self.transactions.get(data["transactional_id"])
            error = self._check_producer(meta, data, version, 99)
            if (
                not error
                and meta is not None
                and (meta.state is not TxnState.ONGOING or tp not in meta.partitions)
            ):
                error = INVALID_TXN_STATE  # AddOffsetsToTxn first (KIP-890 part 1)
            if not error:
                error = self._check_member(group_id, data)
            accepted: dict[tuple[str, int], CommittedOffset] = {}
            answers = []
            for topic in data["topics"]:
                parts = []
                for p in topic["partitions"]:
                    code = error
                    if not code and not 0 <= p["partition_index"] < served.get(topic["name"], 0):
                        code = UNKNOWN_TOPIC_OR_PARTITION
                    if not code:
                        accepted[(topic["name"], p["partition_index"])] = CommittedOffset(
                            p["committed_offset"], p["committed_leader_epoch"],
                            p["committed_metadata"] or "", now,
                        )  # fmt: skip
                    parts.append({"partition_index": p["partition_index"], "error_code": code})
                answers.append({"name": topic["name"], "partitions": parts})
            if accepted:
                batch = build_batch(
                    [NewRecord(offset_key(group_id, t, i),
                               offset_value(c.offset, c.leader_epoch, c.metadata, c.commit_ms),
                               now)
                     for (t, i), c in accepted.items()],
                    producer_id=data["producer_id"], producer_epoch=data["producer_epoch"],
                    base_sequence=0, is_transactional=True,
                )  # fmt: skip
                try:
                    await self.write(tp, batch, True)
                except StorageError as exc:
                    logger.warning(
                        "Cannot store the transactional offsets of %s: %s", group_id, exc
                    )
                    for answer in answers:
                        for part in answer["partitions"]:
                            part["error_code"] = part["error_code"] or COORDINATOR_NOT_AVAILABLE
                else:
                    self.groups.txn_offsets.add(data["producer_id"], group_id, accepted)
            return {"topics": answers}

    def _check_member(self, group_id: str, data: dict[str, Any]) -> int:
        """v3+: a member of a group with members must name its current generation."""
        group = self.groups.groups.get(group_id)
        if group is None or not group.members or data["generation_id"] < 0:
            return NONE
        if data["member_id"] not in group.members:
            return UNKNOWN_MEMBER_ID
        if data["generation_id"] != group.generation:
            return ILLEGAL_GENERATION
        return NONE

    # -- EndTxn ------------------------------------------------------------------------------
    async def end_txn(self, data: dict[str, Any], version: int) -> dict[str, Any]:
        committed: bool = data["committed"]
        async with self._lock:
            meta = self.transactions.get(data["transactional_id"])
            error = self._check_producer(meta, data, version, 2)
            if error or meta is None:
                return {"error_code": error or INVALID_PRODUCER_ID_MAPPING}
            state = meta.state
            if state is TxnState.ONGOING:
                prepared = meta.copy()
                prepared.state = TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT
                prepared.last_update_ms = self.clock_ms()
                error = await self._persist(prepared)
                if error:
                    return {"error_code": error}
                await self._complete(prepared, committed)
                return {"error_code": NONE}
            if state.is_preparing:
                return {"error_code": CONCURRENT_TRANSACTIONS}
            # A retry of an EndTxn already done answers the same; anything else is invalid.
            done = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
            return {"error_code": NONE if state is done else INVALID_TXN_STATE}

    # -- markers and completion ----------------------------------------------------------------
    async def _complete(self, prepared: TransactionMetadata, committed: bool) -> bool:
        """Write the markers of a prepared transaction, then its Complete state. A marker that
        cannot be written leaves the transaction prepared: :meth:`complete_pending` (run
        periodically) tries again, as Kafka's marker channel retries."""
        control = ControlType.COMMIT if committed else ControlType.ABORT
        now = self.clock_ms()
        served = self.served()
        for tp in sorted(prepared.partitions, key=lambda tp: (tp.topic, tp.partition)):
            if not 0 <= tp.partition < served.get(tp.topic, 0):
                logger.warning(
                    "Transaction %r: %s is gone, no %s marker written",
                    prepared.transactional_id, tp, control.name,
                )  # fmt: skip
                continue
            marker = build_control_batch(
                control, producer_id=prepared.producer_id,
                producer_epoch=prepared.producer_epoch, coordinator_epoch=0, timestamp=now,
            )  # fmt: skip
            try:
                await self.write(tp, marker, True)
            except StorageError as exc:
                logger.warning(
                    "Transaction %r: the %s marker to %s failed, retried later: %s",
                    prepared.transactional_id, control.name, tp, exc,
                )  # fmt: skip
                return False
            self.counters.markers_written += 1
            if tp.topic == OFFSETS_TOPIC:
                self.groups.txn_offsets.complete(
                    prepared.producer_id, committed, self.groups.offsets
                )
        complete = prepared.copy()
        complete.state = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
        complete.last_update_ms = self.clock_ms()
        if await self._persist(complete):
            return False
        if committed:
            self.counters.committed += 1
        else:
            self.counters.aborted += 1
        return True

    async def _persist(self, meta: TransactionMetadata, *, tombstone: bool = False) -> int:
        """Write ``meta``'s record, then make it the id's entry. NONE or the error code."""
        tp = TopicPartition(
            TRANSACTION_STATE_TOPIC, partition_for(meta.transactional_id, self.state_partitions)
        )
        value = None if tombstone else value_bytes(meta)
        batch = build_batch(
            [NewRecord(key_bytes(meta.transactional_id), value, meta.last_update_ms)]
        )
        try:
            await self.write(tp, batch, False)
        except StorageError as exc:
            logger.warning(
                "Cannot write the state of transaction %r to %s: %s",
                meta.transactional_id, tp, exc,
            )  # fmt: skip
            return KAFKA_STORAGE_ERROR if "full" not in str(exc) else COORDINATOR_NOT_AVAILABLE
        if tombstone:
            self.transactions.pop(meta.transactional_id, None)
        else:
            self.transactions[meta.transactional_id] = meta
        return NONE

    # -- timers ------------------------------------------------------------------------------
    async def abort_expired(self) -> int:
        """Abort every ongoing transaction past its timeout, fencing its producer with a
        bumped epoch (Kafka's ``abortTimedOutTransactions``); finish stuck Prepare* states;
        remove transactional ids idle past ``transactional.id.expiration.ms``."""
        aborted = 0
        await self.complete_pending()
        async with self._lock:
            now = self.clock_ms()
            for meta in list(self.transactions.values()):
                if meta.expired(now):
                    fenced = self._bumped(meta, now)
                    fenced.state = TxnState.PREPARE_ABORT
                    if await self._persist(fenced):
                        continue
                    logger.info(
                        "Transaction %r of producer %d timed out after %d ms: aborted",
                        meta.transactional_id, meta.producer_id, meta.timeout_ms,
                    )  # fmt: skip
                    await self._complete(fenced, committed=False)
                    self.counters.aborted_by_timeout += 1
                    aborted += 1
                elif meta.state.is_complete and now - meta.last_update_ms > self.id_expiration_ms:
                    gone = meta.copy()
                    gone.last_update_ms = now
                    if not await self._persist(gone, tombstone=True):
                        self.counters.expired_ids += 1
        return aborted

    # -- status ------------------------------------------------------------------------------
    def open_transactions(self) -> dict[TopicPartition, int]:
        """Partition → transactions open on it (Ongoing or being completed). Called from the
        HTTP thread too: it reads a copy of the entries (entries are replaced, not changed)."""
        out: dict[TopicPartition, int] = {}
        for meta in list(self.transactions.values()):
            if meta.state is TxnState.ONGOING or meta.state.is_preparing:
                for tp in meta.partitions:
                    out[tp] = out.get(tp, 0) + 1
        return out

    def status(self) -> dict[str, Any]:
        states: dict[str, int] = {}
        for meta in list(self.transactions.values()):
            states[meta.state.name] = states.get(meta.state.name, 0) + 1
        return {
            "transactional_ids": len(self.transactions),
            "states": states,
            "open_by_partition": {str(tp): n for tp, n in sorted(self.open_transactions().items())},
            **dataclasses.asdict(self.counters),
        }

    def describe(self, ids: Iterable[str] | None = None) -> list[TransactionMetadata]:
        wanted = self.transactions.keys() if ids is None else ids
        return [self.transactions[i].copy() for i in wanted if i in self.transactions]


def _fenced(version: int, since: int) -> int:
    """PRODUCER_FENCED from the version that knows it, INVALID_PRODUCER_EPOCH before."""
    return PRODUCER_FENCED if version >= since else INVALID_PRODUCER_EPOCH


__all__ = ["NO_PRODUCER_EPOCH", "TransactionCoordinator", "TxnCounters"]
