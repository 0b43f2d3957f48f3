"""The aborted transactions of a log, from its segments' ``.txnindex`` files (Kafka's
``LocalLog.collectAbortedTransactions``), and the rebuild of a file that fails its check.

Called by :class:`storagecore.log.Log` (read_committed fetches, the cleaner's round), by the
loader's recovery and by the append path. The files themselves are
:mod:`storagecore.index.transaction_index`'s; what goes into them on append is the producer
state's (:meth:`storagecore.producer_state.ProducerStateManager.aborted_txns`).

What must not be here: the file format, or the producer checks of an append.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence

from storagecore.errors import CorruptIndexError
from storagecore.index.transaction_index import AbortedTxn, TransactionIndex
from storagecore.records.batch import ControlType
from storagecore.segment import LogSegment
from storagecore.transactions import TransactionState, control_type_of

logger = logging.getLogger(__name__)


def collect_aborted_transactions(
    segments: Sequence[LogSegment], start_offset: int, upper_bound_offset: int
) -> list[AbortedTxn]:
    """The aborted transactions whose marker is at or after ``start_offset`` and whose data
    begins before ``upper_bound_offset``, in first-offset order: the indexes of the segment
    holding ``start_offset`` and of the following ones, until an entry's last stable offset
    shows that no later transaction can qualify (Kafka's ``collectAbortedTransactions``).
    A marker at or after ``start_offset`` is in that segment or a later one."""
    bases = [segment.base_offset for segment in segments]
    first = max(bisect.bisect_right(bases, start_offset) - 1, 0)
    found: list[AbortedTxn] = []
    for segment in segments[first:]:
        result = checked_txn_index(segments, segment).collect(start_offset, upper_bound_offset)
        found.extend(result.aborted)
        if result.complete:
            break
    found.sort()
    return found


def checked_txn_index(segments: Sequence[LogSegment], segment: LogSegment) -> TransactionIndex:
    """``segment``'s transaction index with its entries read; a file that fails its check is
    rebuilt from the log first (a warning names the file and what was wrong)."""
    index = segment.txn_index
    try:
        index.entries()
    except CorruptIndexError as exc:
        logger.warning("%s; rebuilding it from the log", exc)
        rebuild_txn_index(segments, segment)
    return index


def rebuild_txn_index(segments: Sequence[LogSegment], segment: LogSegment) -> list[AbortedTxn]:
    """Write ``segment``'s transaction index anew from the log (:func:`rebuild_txn_indexes`)."""
    return rebuild_txn_indexes(segments, [segment])[0]


def rebuild_txn_indexes(
    segments: Sequence[LogSegment], targets: Sequence[LogSegment]
) -> list[list[AbortedTxn]]:
    """Write the transaction indexes of ``targets`` (some of ``segments``) anew from one header
    walk of the log up to the last target's end: :class:`~storagecore.transactions.
    TransactionState` finds the transactions open at each target's base, whose first offsets
    may lie in earlier segments. The walk starts at the first segment: a transaction whose data
    began in a segment already deleted is not found, as the producer state that Kafka's
    recovery uses would have expired it with those segments. Rare (a file that failed its check,
    a bulk append of ABORT markers): the loader's recovery rebuilds from its producer state."""
    last_base = max(target.base_offset for target in targets)
    state = TransactionState()
    for each in segments:
        if each.base_offset > last_base:
            break
        state.extend(each.producer_batches(state.next_offset))
        state.next_offset = max(state.next_offset, each.next_offset())
    rebuilt: list[list[AbortedTxn]] = []
    for target in targets:
        end = target.next_offset()
        entries = [t for t in state.aborted if target.base_offset <= t.last_offset < end]
        target.txn_index.rewrite(entries)
        if entries or len(targets) == 1:
            logger.info(
                "Rebuilt %s from the log: %d aborted transactions",
                target.txn_index.path,
                len(entries),
            )
        rebuilt.append(entries)
    return rebuilt


def index_unindexed_segments(segments: Sequence[LogSegment]) -> int:
    """Write the ``.txnindex`` of every segment that has none and whose markers complete
    aborted transactions (a log written by a Logkeeper that wrote no transaction indexes:
    the upgrade, run once per log dir by :class:`storagecore.log_manager.LogManager`). A
    segment with a file keeps it. Returns how many files were written."""
    targets = [segment for segment in segments if not segment.txn_index_path().exists()]
    if not targets:
        return 0
    return sum(1 for entries in rebuild_txn_indexes(segments, targets) if entries)


def index_written_aborts(segments: Sequence[LogSegment], from_offset: int) -> int:
    """After batches from ``from_offset`` on were written past the append path (a bulk
    append): index the transactions their ABORT markers complete. The new batches are looked
    at for ABORT markers first (batches without a producer are skipped natively), so a bulk
    append without any costs no walk. Returns how many segments were rebuilt."""
    targets = [
        segment
        for segment in segments
        if segment.next_offset() > from_offset
        and any(
            batch.is_control and control_type_of(batch) is ControlType.ABORT
            for batch in segment.producer_batches(max(from_offset, segment.base_offset))
        )
    ]
    if targets:
        rebuild_txn_indexes(segments, targets)
    return len(targets)
