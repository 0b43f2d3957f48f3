"""The producers of one partition and their snapshot files (Kafka's ``ProducerStateManager``,
with ``UnifiedLog.rebuildProducerState``).

The manager maps producer IDs to :class:`ProducerStateEntry` (epoch, coordinator epoch, open
transaction, last five batches) and knows up to which offset the map reflects the log
(:attr:`map_end_offset`). The Log checks every append of a producer against it and updates it
after writing (:meth:`prepare_append`, :meth:`complete_append`); a retry of one of a
producer's last five batches is answered with that batch's offsets, not appended again.

Snapshot files (:mod:`storagecore.producer_state.snapshot`) let a restart skip most of the log.
When they are written and deleted, as in Kafka:

* at every roll, named after the new segment's base offset (:meth:`on_roll`), and at a clean
  shutdown, named after the log end offset (:meth:`take_snapshot` from ``Log.close``); each is
  written to ``.snapshot.tmp``, fsynced and renamed;
* with their segment: deleting or replacing a segment deletes the snapshot at its base offset;
* when loading: ``.snapshot.tmp`` files, snapshots at no segment's base offset (except the
  newest one above the last segment's base: the clean shutdown's), snapshots beyond the log
  end (after a truncation) and at or below the log start offset are deleted; a corrupt one is
  reported, deleted, and the next older one is tried.

The load (:func:`rebuild_producer_state`) mirrors those steps: it reads the newest valid
snapshot at or below the log end, drops producers expired by ``producer.id.expiration.ms``,
replays every batch after the snapshot (keeping each producer's last five batches), writes
snapshots at the bases of the last two segments it replays and at the log end. Without any
snapshot it replays the log from its start offset (Kafka skips the replay after a clean
shutdown without snapshots, its upgrade shortcut; log dirs written before Logkeeper wrote
snapshots have none, and their producers must survive the upgrade).

Not thread-safe: the owning Log holds its lock around every call.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final

from storagecore import files
from storagecore.clock import Clock
from storagecore.config import TopicPartition
from storagecore.errors import CorruptSnapshotError
from storagecore.index.transaction_index import AbortedTxn, TransactionIndex
from storagecore.log_info import LogAppendInfo
from storagecore.log_validator import AppendOrigin, ValidatedRecords
from storagecore.producer_state import snapshot
from storagecore.producer_state.append_info import CompletedTxn, ProducerAppendInfo
from storagecore.producer_state.entry import BatchMetadata, ProducerLastBatch, ProducerStateEntry
from storagecore.records import layout
from storagecore.records.batch import RecordBatch
from storagecore.segment import LogSegment

logger = logging.getLogger(__name__)

PRODUCER_ID_EXPIRATION_MS_DEFAULT: Final = 86_400_000
"""Kafka's ``producer.id.expiration.ms`` default (one day)."""

_PRODUCER_ID: Final = struct.Struct(">q")
_LENGTH: Final = struct.Struct(">i")


@dataclasses.dataclass(slots=True)
class PendingAppend:
    """The producer checks of one append, to apply once it is written; or the original
    append of a duplicate, which is not written at all."""

    infos: dict[int, ProducerAppendInfo]
    completed: list[CompletedTxn]
    duplicate: BatchMetadata | None = None

    def duplicate_info(self, log_start_offset: int) -> LogAppendInfo:
        """What the append of a duplicate answers: the original batch's offsets (Kafka
        answers no log append time for a duplicate)."""
        original = self.duplicate
        assert original is not None, "not a duplicate"
        return LogAppendInfo(
            first_offset=original.first_offset,
            last_offset=original.last_offset,
            max_timestamp=original.timestamp,
            shallow_offset_of_max_timestamp=original.last_offset,
            log_append_time=layout.NO_TIMESTAMP,
            log_start_offset=log_start_offset,
            record_count=original.offset_delta + 1,
            valid_bytes=0,
            duplicate=True,
        )


class ProducerStateManager:
    # The dict and weak references the class had without __slots__, and what the native
    # common case of Log.append writes at its offset (storagecore/records/_log_append.c).
    __slots__ = ("__dict__", "__weakref__", "map_end_offset")

    def __init__(
        self,
        directory: Path,
        tp: TopicPartition,
        clock: Clock,
        *,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
    ) -> None:
        self.directory = directory
        self.tp = tp
        self.clock = clock
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.prefix = f"[ProducerStateManager partition={tp}]"
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0
        """The map reflects every batch below this offset."""
        self.last_snap_offset = 0
        # Invariant: _snapshot_offsets is sorted and lists exactly the .snapshot files this
        # manager knows of in the directory.
        self._snapshot_offsets: list[int] = []
        self._load_snapshot_offsets()

    def __repr__(self) -> str:
        return f"ProducerStateManager({self.tp}, {len(self.producers)} producers)"

    # -- queries -------------------------------------------------------------------------------
    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    @property
    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshot_offsets)

    @property
    def latest_snapshot_offset(self) -> int | None:
        return self._snapshot_offsets[-1] if self._snapshot_offsets else None

    @property
    def is_empty(self) -> bool:
        return not self.producers

    def open_transactions(self) -> int:
        """Producers with a transaction open on this partition."""
        return sum(1 for e in self.producers.values() if e.current_txn_first_offset is not None)

    def last_records_of_active_producers(
        self, now_ms: int, expiration_ms: int | None = None
    ) -> dict[int, ProducerLastBatch]:
        """Each producer's last data batch and epoch, for the cleaner to keep (Kafka's
        ``lastRecordsOfActiveProducers``): the producers not expired by
        ``producer.id.expiration.ms`` (one with an open transaction never expires)."""
        expiration = self.producer_id_expiration_ms if expiration_ms is None else expiration_ms
        found: dict[int, ProducerLastBatch] = {}
        for pid, entry in self.producers.items():
            if (
                entry.current_txn_first_offset is None
                and entry.last_timestamp < now_ms - expiration
            ):
                continue
            last = entry.batches[-1] if entry.batches else None
            found[pid] = ProducerLastBatch(
                None if last is None else last.last_offset,
                entry.producer_epoch,
                entry.last_timestamp,
                -1 if last is None else last.first_sequence,
                -1 if last is None else last.last_sequence,
                -1 if last is None else last.first_offset,
            )
        return found

    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest open transaction (Kafka's ``firstUnstableOffset``),
        None when every transaction is decided."""
        return min(
            (
                e.current_txn_first_offset
                for e in self.producers.values()
                if e.current_txn_first_offset is not None
            ),
            default=None,
        )

    # -- the append path -----------------------------------------------------------------------
    def prepare_append(
        self, validated: ValidatedRecords, origin: AppendOrigin
    ) -> PendingAppend | None:
        """Check the batches of an append (offsets assigned, not yet written). None when no
        batch has a producer ID (the common case costs one read per batch); a PendingAppend
        with ``duplicate`` set when a client's batch repeats one of its producer's last five.
        Raises a :class:`~storagecore.errors.ProducerStateError` for a batch to refuse."""
        buffer, batch_count = validated.buffer, validated.batch_count
        if not any(
            _PRODUCER_ID.unpack_from(buffer, position + layout.PRODUCER_ID_OFFSET)[0]
            != layout.NO_PRODUCER_ID
            for position in _batch_positions(buffer, batch_count)
        ):
            return None
        pending = PendingAppend({}, [])
        for position in _batch_positions(buffer, batch_count):
            size = (
                layout.LOG_OVERHEAD
                + _LENGTH.unpack_from(buffer, position + layout.LENGTH_OFFSET)[0]
            )
            batch = RecordBatch(memoryview(buffer)[position : position + size])
            if not batch.has_producer_id:
                continue
            if origin is AppendOrigin.CLIENT:
                entry = self.producers.get(batch.producer_id)
                found = (
                    None
                    if entry is None
                    else entry.find_duplicate_batch(
                        batch.producer_epoch, batch.base_sequence, batch.last_sequence
                    )
                )
                if found is not None:
                    return PendingAppend({}, [], found)
            completed = self._update_producers(batch, pending.infos, origin)
            if completed is not None:
                pending.completed.append(completed)
        return pending

    def complete_append(self, pending: PendingAppend | None, next_offset: int) -> None:
        """Apply a written append's producer updates; the map now reaches ``next_offset``."""
        if pending is not None:
            for info in pending.infos.values():
                self.update(info)
        self.map_end_offset = next_offset

    def aborted_txns(self, pending: PendingAppend | None) -> list[AbortedTxn]:
        """The transactions an append's ABORT markers complete, as the ``.txnindex`` of the
        segment it goes to records them; called before :meth:`complete_append`. Each one's
        last stable offset is the first offset of the earliest transaction of another producer
        still open after the markers before it (Kafka's ``lastStableOffset(completedTxn)``),
        else the offset after its marker."""
        if pending is None or not pending.completed:
            return []
        ongoing = {
            pid: entry.current_txn_first_offset
            for pid, entry in self.producers.items()
            if entry.current_txn_first_offset is not None
        }
        aborted: list[AbortedTxn] = []
        for txn in pending.completed:
            ongoing.pop(txn.producer_id, None)
            if txn.is_aborted:
                lso = min(ongoing.values(), default=txn.last_offset + 1)
                aborted.append(AbortedTxn(txn.first_offset, txn.last_offset, txn.producer_id, lso))
        return aborted

    def _update_producers(
        self, batch: RecordBatch, infos: dict[int, ProducerAppendInfo], origin: AppendOrigin
    ) -> CompletedTxn | None:
        info = infos.get(batch.producer_id)
        if info is None:
            info = infos[batch.producer_id] = self.prepare_update(batch.producer_id, origin)
        return info.append(batch)

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        current = self.producers.get(producer_id) or ProducerStateEntry(producer_id)
        return ProducerAppendInfo(str(self.tp), producer_id, current, origin)

    def update(self, info: ProducerAppendInfo) -> None:
        current = self.producers.get(info.producer_id)
        if current is None:
            self.producers[info.producer_id] = info.updated
        else:
            current.update(info.updated)

    def replay(
        self, batches: Iterable[RecordBatch], txn_index: TransactionIndex | None = None
    ) -> None:
        """Apply batches read back from the log, in offset order, without refusing any
        (Kafka's ``loadProducersFromRecords``). The batches may leave out those without a
        producer (``LogSegment.producer_batches`` skips them natively), so the map end offset
        only follows them here: callers set it to where the replay ends. With ``txn_index``
        (a segment's recovery, Kafka's ``LogSegment.recover``) each transaction an ABORT marker
        completes is appended to it."""
        if txn_index is not None:
            for batch in batches:
                pending = PendingAppend({}, [])
                if batch.has_producer_id:
                    completed = self._update_producers(
                        batch, pending.infos, AppendOrigin.REPLICATION
                    )
                    if completed is not None:
                        pending.completed.append(completed)
                txn_index.append_all(self.aborted_txns(pending))
                self.complete_append(pending, max(self.map_end_offset, batch.next_offset))
            return
        infos: dict[int, ProducerAppendInfo] = {}
        for batch in batches:
            if batch.has_producer_id:
                self._update_producers(batch, infos, AppendOrigin.REPLICATION)
            self.map_end_offset = max(self.map_end_offset, batch.next_offset)
        for info in infos.values():
            self.update(info)

    # -- roll, log start, expiration -----------------------------------------------------------
    def on_roll(
        self, segments: Sequence[LogSegment], new_base_offset: int, sync: bool = True
    ) -> None:
        """After a roll: catch up with batches the append path did not see (a bulk append's),
        forget expired producers, and snapshot at the new segment's base offset (with
        ``sync=False`` not fsynced: the roll's scheduled flush does it, storagecore.roll_flush).

        Kafka forgets expired producers every ``producer.id.expiration.check.interval.ms`` (ten
        minutes); here it happens at each roll and each load, which bounds the memory of a
        partition's producers the same way without a timer of its own.
        """
        self.catch_up(segments, new_base_offset)
        self.remove_expired_producers(self.clock.milliseconds())
        self.take_snapshot(sync=sync)

    def catch_up(self, segments: Sequence[LogSegment], end_offset: int) -> None:
        """Replay what the append path did not see (a bulk append's batches) up to
        ``end_offset``; the map then ends there."""
        if self.map_end_offset < end_offset:
            self.replay(_batches_between(segments, self.map_end_offset, end_offset))
        self.map_end_offset = end_offset

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self.map_end_offset = max(self.map_end_offset, log_start_offset)
        latest = self.latest_snapshot_offset
        self.last_snap_offset = log_start_offset if latest is None else latest

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers silent for ``producer.id.expiration.ms`` without an open
        transaction; how many."""
        expired = [pid for pid, e in self.producers.items() if self._is_expired(e, now_ms)]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    # -- snapshot files ------------------------------------------------------------------------
    def take_snapshot(self, *, sync: bool = True) -> Path | None:
        """Write a snapshot at :attr:`map_end_offset` unless one exists there already (with
        ``sync=False`` without fsync: see :func:`snapshot.write_snapshot`)."""
        if self.map_end_offset <= self.last_snap_offset:
            return None
        path = snapshot.snapshot_file(self.directory, self.map_end_offset)
        snapshot.write_snapshot(path, self.producers.values(), sync=sync)
        logger.info(
            "%s Wrote producer snapshot at offset %d with %d producer ids",
            self.prefix,
            self.map_end_offset,
            len(self.producers),
        )
        if self.map_end_offset not in self._snapshot_offsets:
            bisect.insort(self._snapshot_offsets, self.map_end_offset)
        self.last_snap_offset = self.map_end_offset
        return path

    def delete_snapshots(self, offsets: Iterable[int]) -> None:
        """Delete the snapshots at these offsets (the base offsets of deleted segments)."""
        for offset in offsets:
            self._delete_snapshot(offset)

    def delete_snapshots_of_replaced(
        self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment]
    ) -> None:
        """After a swap: delete the snapshots of replaced segments whose base offset no new
        segment has (Kafka keeps a snapshot whose offset is still a segment's base)."""
        new_bases = {segment.base_offset for segment in new_segments}
        self.delete_snapshots(s.base_offset for s in old_segments if s.base_offset not in new_bases)

    def _delete_snapshot(self, offset: int) -> None:
        position = bisect.bisect_left(self._snapshot_offsets, offset)
        if position < len(self._snapshot_offsets) and self._snapshot_offsets[position] == offset:
            del self._snapshot_offsets[position]
            snapshot.snapshot_file(self.directory, offset).unlink(missing_ok=True)

    def _load_snapshot_offsets(self) -> None:
        offsets: list[int] = []
        # Names first, a Path only for what is kept or deleted: a log dir of many segments
        # lists three files per segment, and a Path per name was a sixth of a clean load.
        with os.scandir(self.directory) as entries:
            for entry in entries:
                name = entry.name
                if name.endswith(files.SNAPSHOT_TMP_SUFFIX):
                    logger.warning(
                        "%s Deleting %s, a snapshot whose write did not finish", self.prefix, name
                    )
                    (self.directory / name).unlink()
                elif (
                    name.endswith(files.SNAPSHOT_SUFFIX)
                    and snapshot.is_snapshot_file_name(name)
                    and entry.is_file()
                ):
                    offsets.append(files.offset_from_file_name(name))
        self._snapshot_offsets = sorted(offsets)

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Delete snapshots at no segment's base offset, keeping the newest of them if it lies
        above every segment base (the snapshot of a clean shutdown, at the log end)."""
        bases = set(segment_base_offsets)
        strays = [offset for offset in self._snapshot_offsets if offset not in bases]
        if not strays:
            return
        keep = strays[-1] if bases and strays[-1] > max(bases) else None
        for offset in strays:
            if offset != keep:
                logger.info(
                    "%s Deleting snapshot %d, at no segment's base offset", self.prefix, offset
                )
                self._delete_snapshot(offset)

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Drop snapshots outside ``(log start, log end]`` and, unless the map already ends at
        the log end, reload the map from the newest valid snapshot."""
        for offset in list(self._snapshot_offsets):
            if offset > log_end_offset or offset <= log_start_offset:
                self._delete_snapshot(offset)
        if log_end_offset != self.map_end_offset:
            self.producers.clear()
            self._load_from_snapshot(log_start_offset, now_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget every producer and snapshot; the map starts over at ``offset``."""
        self.producers.clear()
        self.delete_snapshots(list(self._snapshot_offsets))
        self.last_snap_offset = 0
        self.map_end_offset = offset

    def _load_from_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        while self._snapshot_offsets:
            offset = self._snapshot_offsets[-1]
            path = snapshot.snapshot_file(self.directory, offset)
            try:
                entries = snapshot.read_snapshot(path)
            except (CorruptSnapshotError, FileNotFoundError) as exc:
                logger.warning(
                    "%s Failed to load producer snapshot %s: %s; trying an older one",
                    self.prefix,
                    path,
                    exc,
                )
                self._delete_snapshot(offset)
                continue
            logger.info("%s Loading producer state from snapshot %s", self.prefix, path)
            for entry in entries:
                if not self._is_expired(entry, now_ms):
                    self.producers[entry.producer_id] = entry
            self.last_snap_offset = self.map_end_offset = offset
            return
        self.last_snap_offset = self.map_end_offset = log_start_offset


def rebuild_producer_state(
    manager: ProducerStateManager,
    segments: Sequence[LogSegment],
    *,
    log_start_offset: int,
    last_offset: int,
    now_ms: int,
) -> None:
    """Load the producers of the log's ``[log start, last_offset)`` (Kafka's
    ``rebuildProducerState``): the newest valid snapshot, then the batches after it."""
    bases = [segment.base_offset for segment in segments]
    offsets_to_snapshot = set(bases[-2:]) | {last_offset}
    manager.truncate_and_reload(log_start_offset, last_offset, now_ms)
    if last_offset > manager.map_end_offset:
        for position in range(
            max(bisect.bisect_right(bases, manager.map_end_offset) - 1, 0), len(segments)
        ):
            segment = segments[position]
            if segment.base_offset >= last_offset:
                break
            start = max(segment.base_offset, manager.map_end_offset, log_start_offset)
            manager.map_end_offset = start
            if segment.base_offset in offsets_to_snapshot:
                manager.take_snapshot()
            manager.replay(
                batch
                for batch in segment.producer_batches(start)
                if batch.base_offset < last_offset and batch.last_offset >= start
            )
    manager.map_end_offset = last_offset
    manager.take_snapshot()


def _batch_positions(buffer: bytes | bytearray | memoryview, batch_count: int) -> Iterator[int]:
    position = 0
    for _ in range(batch_count):
        yield position
        position += (
            layout.LOG_OVERHEAD + _LENGTH.unpack_from(buffer, position + layout.LENGTH_OFFSET)[0]
        )
    assert position == len(buffer), f"{batch_count} batches end at {position}, not {len(buffer)}"


def _batches_between(segments: Sequence[LogSegment], start: int, end: int) -> Iterator[RecordBatch]:
    for segment in segments:
        if segment.next_offset() <= start or segment.base_offset >= end:
            continue
        for batch in segment.producer_batches(start):
            if batch.base_offset >= end:
                break
            if batch.last_offset >= start:
                yield batch
