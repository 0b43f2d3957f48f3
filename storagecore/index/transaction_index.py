"""One segment's ``.txnindex``: the aborted transactions whose ABORT marker lies in the segment
(Kafka's ``TransactionIndex`` and ``AbortedTxn``).

A read_committed fetch takes the aborted transactions it must filter from these files
(:func:`storagecore.aborted_transactions.collect_aborted_transactions`), the cleaner the ones it
drops, and the cleaner writes the ones whose markers it keeps into the cleaned segment's file.

The file is Kafka's: 34-byte big-endian entries, append-only, not preallocated, created on the
first entry (a segment without aborted transactions has none). Nothing holds a descriptor: an
append opens, writes and closes (the open-files bound of storagecore.file_cache holds for
these files without their taking a slot), a read reads the whole file once and keeps its
entries (a few per segment: each is one aborted transaction).

What must not be here: deciding what to index (the producer state knows which transaction an
ABORT marker completes and the last stable offset at that time), or rebuilding a file from the
log (:mod:`storagecore.aborted_transactions`).
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import os
import struct
from pathlib import Path
from typing import Final

from storagecore import durability
from storagecore.errors import CorruptIndexError

logger = logging.getLogger(__name__)

ENTRY: Final = struct.Struct(">hqqqq")
"""version int16 (0), producerId int64, firstOffset int64, lastOffset int64 (the marker's),
lastStableOffset int64 (the partition's LSO when the transaction was aborted)."""
VERSION: Final = 0
assert ENTRY.size == 34, "Kafka's AbortedTxn.TOTAL_SIZE"


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class AbortedTxn:
    """A transaction decided aborted: its data lies in ``[first_offset, last_offset)`` and its
    ABORT marker at ``last_offset``; ``last_stable_offset`` is the first offset of the earliest
    other transaction still open when it was aborted (``last_offset + 1`` when none was),
    which lets a search stop (Kafka's ``AbortedTxn``). Ordered by first offset."""

    first_offset: int
    last_offset: int
    producer_id: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ENTRY.pack(
            VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    """What one segment's index gives a search (Kafka's ``TxnIndexSearchResult``): the
    matching transactions, and whether later segments cannot hold more (``complete``)."""

    aborted: list[AbortedTxn]
    complete: bool


def decode_entries(data: bytes, path: Path, base_offset: int) -> list[AbortedTxn]:
    """The entries of a ``.txnindex`` file's bytes, checked as Kafka's ``sanityCheck`` does
    (and more: the version, and last offsets that strictly increase). Raises
    :class:`CorruptIndexError` naming the file and the entry."""
    if len(data) % ENTRY.size:
        raise CorruptIndexError(
            f"{path}: size {len(data)} is not a multiple of the entry size {ENTRY.size} "
            f"(a torn append)"
        )
    entries: list[AbortedTxn] = []
    previous_last = base_offset - 1
    for position in range(0, len(data), ENTRY.size):
        version, producer_id, first, last, lso = ENTRY.unpack_from(data, position)
        if version != VERSION:
            raise CorruptIndexError(
                f"{path}: entry at position {position} has version {version}, expected {VERSION}"
            )
        if last <= previous_last or first > last:
            raise CorruptIndexError(
                f"{path}: entry at position {position} (producer {producer_id}, offsets "
                f"{first}..{last}) is out of order or below the segment base {base_offset}"
            )
        entries.append(AbortedTxn(first, last, producer_id, lso))
        previous_last = last
    return entries


class TransactionIndex:
    """The ``.txnindex`` file of the segment at ``base_offset``."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        # The file's entries, read on first use; None until then.
        # Invariant: when not None, equal to the file's content (every change writes both).
        self._entries: list[AbortedTxn] | None = None
        self._dirty = False

    def __repr__(self) -> str:
        return f"TransactionIndex({self.path})"

    # -- reading -------------------------------------------------------------------------------
    def entries(self) -> list[AbortedTxn]:
        """Every entry, in marker order. Raises :class:`CorruptIndexError` for a file that
        fails its check (the caller rebuilds it: :meth:`rewrite`)."""
        entries = self._entries
        if entries is None:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            entries = self._entries = decode_entries(data, self.path, self.base_offset)
        return entries

    def sanity_check(self) -> None:
        """Read and check the file now (Kafka's ``TransactionIndex.sanityCheck``)."""
        self._entries = None
        self.entries()

    @property
    def last_offset(self) -> int | None:
        entries = self.entries()
        return entries[-1].last_offset if entries else None

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """The transactions whose marker is at or after ``fetch_offset`` and whose data begins
        before ``upper_bound_offset``; complete once an entry's last stable offset reaches the
        upper bound: every transaction aborted later began at or after it (Kafka's
        ``collectAbortedTxns``)."""
        found: list[AbortedTxn] = []
        for txn in self.entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    # -- writing -------------------------------------------------------------------------------
    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; its marker must follow every entry's (Kafka refuses otherwise)."""
        self.append_all([txn])

    def open_for_append(self) -> int:
        """A descriptor for :meth:`append_all` (the append path takes it before writing the
        marker to the log: running out of descriptors then fails the append with nothing
        written). The caller closes it."""
        return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def append_all(self, txns: list[AbortedTxn], fd: int | None = None) -> None:
        """Add entries with one write, on ``fd`` (from :meth:`open_for_append`, left open) or
        on a descriptor of its own (open-write-close)."""
        if not txns:
            return
        entries = self.entries()
        last = entries[-1].last_offset if entries else self.base_offset - 1
        for txn in txns:
            assert txn.last_offset > last and txn.first_offset <= txn.last_offset, (
                f"{self.path}: aborted transaction {txn} does not follow the last entry's marker "
                f"at {last}"
            )
            last = txn.last_offset
        view = memoryview(b"".join(txn.encode() for txn in txns))
        own_fd = self.open_for_append() if fd is None else None
        target = own_fd if fd is None else fd
        assert target is not None
        try:
            while view:
                view = view[os.write(target, view) :]
        finally:
            if own_fd is not None:
                os.close(own_fd)
        entries.extend(txns)
        self._dirty = True

    def rewrite(self, txns: list[AbortedTxn]) -> None:
        """Replace the file's content by ``txns`` (a rebuild after a failed check or a
        recovery); no file when there are none."""
        self.reset()
        self.append_all(txns)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset`` (Kafka's ``truncateTo``)."""
        entries = self.entries()
        keep = bisect.bisect_left([txn.last_offset for txn in entries], offset)
        if keep == len(entries):
            return
        if keep == 0:
            self.reset()
            return
        os.truncate(self.path, keep * ENTRY.size)
        del entries[keep:]
        self._dirty = True

    def reset(self) -> None:
        """No entries: the file is removed (it is created again by the next append)."""
        self.path.unlink(missing_ok=True)
        self._entries = []
        self._dirty = False

    def flush(self) -> None:
        """fsync what was appended since the last flush."""
        if not self._dirty:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._dirty = False
            return
        try:
            durability.fsync_fd(fd)
        finally:
            os.close(fd)
        self._dirty = False

    def rename_to(self, target: Path) -> None:
        """Follow the segment's rename (``.cleaned``, ``.swap``, ``.deleted``); no file, no
        rename."""
        if self.path.exists():
            durability.rename(self.path, target)
        self.path = target

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = None
        self._dirty = False

    def drop_entries(self) -> None:
        """Forget the entries read (they are read again on next use)."""
        if not self._dirty:
            self._entries = None
