"""The cleaner's key → last offset map with a fixed memory budget (Kafka's ``SkimpyOffsetMap``).

One flat table (a private anonymous ``mmap``) of ``memory_bytes // 24`` slots, allocated once:
memory use is at most the configured dedupe buffer whatever the number of keys (DESIGN
invariant 4). A slot holds the
16-byte digest of a key and the offset (int64, big-endian); an all-zero slot is empty. Keys are
compared by digest only.

The digest is SipHash-1-3-128 (:mod:`storagecore.cleaner.siphash`) keyed with a secret drawn
at random for every round (:meth:`SkimpyOffsetMap.clear`), where Kafka uses unkeyed MD5: a
producer cannot craft two keys whose digests collide (and so make the cleaner drop another
key's latest record) without knowing the secret, and SipHash is several times faster than MD5
on short keys. A Spark job shares one secret between its executors (``secret=``).
docs/offset-map.md has the reasoning and the odds.

Probing is Kafka's: attempt ``i`` reads the int32 (big-endian) at byte ``min(i, 12)`` of the
digest and adds ``max(0, i - 12)``; ``slot = abs(probe) % slots`` with Java's int overflow and
``abs(Integer.MIN_VALUE) == 0``. So the first 13 attempts use successive windows of the digest,
then probing is linear.

The map never grows and never fails a caller that respects :attr:`capacity`: the cleaner stops
mapping when ``size`` reaches ``slots * load_factor`` and cleans up to the last offset it
mapped, continuing in a later round.

The per-record work of a cleaning round has a C engine, ``storagecore.cleaner._native``: whole
regions of plain batches (:meth:`SkimpyOffsetMap.map_region`, :meth:`~SkimpyOffsetMap.
filter_region`) and single batches (:meth:`~SkimpyOffsetMap.put_batch_keys`,
:meth:`~SkimpyOffsetMap.filter_batch_records`). They return None when the extension is not
loaded or declines the input; the cleaner then runs its pure-Python reference. Both paths leave
the same table and write the same bytes.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import mmap
import os
import struct
from collections.abc import Callable, Mapping
from typing import Final, NamedTuple

from storagecore.cleaner.siphash import C_ROUNDS, D_ROUNDS, SECRET_BYTES, siphash128
from storagecore.native import load_extension
from storagecore.records import codecs
from storagecore.records.codecs import Compression

_NATIVE = load_extension("storagecore.cleaner._native")
#: "c" or "python": which implementation of the per-record work this process uses.
IMPLEMENTATION: Final[str] = "python" if _NATIVE is None else "c"

HASH_BYTES: Final = 16
OFFSET: Final = struct.Struct(">q")
ENTRY_BYTES: Final = HASH_BYTES + OFFSET.size
_INT32: Final = struct.Struct(">i")
_EMPTY: Final = bytes(ENTRY_BYTES)
#: The fewest slots a round sized by :meth:`SkimpyOffsetMap.clear` probes.
_MIN_PROBED_SLOTS: Final = 1024
#: Bytes per offset of a round's key positions (a native uint32; see SkimpyOffsetMap.clear).
_POSITION_BYTES: Final = 4
#: The engine's "no positions" (it writes into the buffer it is given, so a writable one).
_NO_POSITIONS: Final = memoryview(bytearray())
assert ENTRY_BYTES == 24

Codec = Callable[[memoryview], bytes]
#: The region calls' codecs by codec id (0, none, unused): the reference's own functions, so a
#: batch the engine rebuilds is compressed to the same bytes as one the reference rebuilds.
DECOMPRESSORS: Final[tuple[Codec | None, ...]] = tuple(
    None if codec is Compression.NONE else functools.partial(codecs.decompress, codec)
    for codec in sorted(Compression, key=int)
)
COMPRESSORS: Final[tuple[Codec | None, ...]] = tuple(
    None if codec is Compression.NONE else functools.partial(codecs.compress, codec)
    for codec in sorted(Compression, key=int)
)


def key_digest(key: bytes | bytearray | memoryview, secret: bytes) -> bytes:
    """The map's digest of ``key`` under ``secret`` (the C engine computes the same)."""
    if _NATIVE is not None:
        return bytes(_NATIVE.siphash(key, secret, C_ROUNDS, D_ROUNDS))
    return siphash128(key, secret)


def key_digests(
    offsets: bytes | bytearray | memoryview,
    data: bytes | bytearray | memoryview,
    rows: int,
    secret: bytes,
) -> bytes:
    """The digests (16 bytes each, in order) of the ``rows`` items of an Arrow binary column
    (``offsets``: rows + 1 native int32 into ``data``, as the columnar decoder returns them);
    a null item is digested as the empty key (its validity is the caller's to apply). One
    call per column, no Python per key when the extension is built."""
    if _NATIVE is not None:
        return bytes(_NATIVE.digest_keys(offsets, data, rows, secret))
    ends = memoryview(offsets).cast("B").cast("i")
    view = memoryview(data).cast("B")
    return b"".join(siphash128(view[ends[i] : ends[i + 1]], secret) for i in range(rows))


def new_secret() -> bytes:
    """A fresh digest secret (one per cleaning round, or one per Spark job)."""
    return os.urandom(SECRET_BYTES)


@dataclasses.dataclass(frozen=True, slots=True)
class FilteredRecords:
    """The cleaner's record-level decisions over one data batch (native path)."""

    kept: int
    #: Records dropped for having no key (Kafka's invalid messages).
    invalid: int
    #: Whether a kept record is a tombstone.
    contains_tombstones: bool
    #: None when nothing was kept or when the batch is copied as it is (all kept, no horizon
    #: to stamp). Otherwise the rebuilt batch, whole, for an uncompressed batch; for a
    #: compressed one, the kept records uncompressed and encoded against
    #: :attr:`base_timestamp`, for
    #: :func:`~storagecore.records.memory_records_builder.rebuild_batch_from_payload`.
    rebuilt: bytes | None
    #: Max timestamp of the rebuilt batch.
    max_timestamp: int
    base_timestamp: int


class SkimpyOffsetMap:
    def __init__(
        self,
        memory_bytes: int,
        load_factor: float = 0.9,
        *,
        native: bool = True,
        secret: bytes | None = None,
    ) -> None:
        """``native=False`` keeps this map on the pure-Python reference even where the
        extension is loaded (the differential tests clean the same log both ways). ``secret``
        fixes the digest secret (a Spark job's, or a test's); by default every :meth:`clear`
        draws a new one."""
        if secret is not None and len(secret) != SECRET_BYTES:
            raise ValueError(f"offset map secret of {len(secret)} bytes (expected {SECRET_BYTES})")
        slots = memory_bytes // ENTRY_BYTES
        if slots < 1 or not 0 < load_factor <= 1:
            raise ValueError(
                f"offset map of {memory_bytes} bytes with load factor {load_factor} holds no key"
            )
        # Kafka requires slots * load factor > 1: a map that holds a single key makes no progress.
        if int(slots * load_factor) < 1:
            raise ValueError(f"offset map of {memory_bytes} bytes is too small to make progress")
        #: Slots the memory budget holds (what :attr:`utilization` is measured against).
        self.budget_slots = slots
        #: Slots probed this round: the budget, or fewer when :meth:`clear` was told how many
        #: keys the round can put at most (see there).
        self.slots = slots
        self.load_factor = load_factor
        self._native = _NATIVE if native else None
        # Anonymous memory: the kernel hands out zeroed pages as the probes first touch them, so
        # a round over few keys neither pays for zeroing nor holds the whole budget resident.
        # (Private: MADV_DONTNEED zeroes private anonymous pages, not shared ones.)
        self._table = mmap.mmap(
            -1, slots * ENTRY_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        )
        # Transparent huge pages where the kernel allows them (THP "madvise" mode): the probes
        # land at random over the whole table, and 2 MiB pages spare them most TLB misses
        # (the standard log's map pass, measured: 96-115 ms on a bytearray after 50 ms of
        # zeroing it; 96 ms on huge pages, faulting them in included; a second pass over the
        # filled map 86-107 ms against 79 ms).
        self._table.madvise(mmap.MADV_HUGEPAGE)
        # The probed prefix of the table, as the engine takes it.
        self._probed = memoryview(self._table)
        # The round's key positions (native uint32 per offset from _positions_start, written
        # by map_region, read by filter_region; storagecore/cleaner/_cleaner_batch.h): the
        # part of the budget after the probed prefix, when clear() was told the round's offsets
        # and they fit there; else empty (the filter digests every key again).
        self._positions = _NO_POSITIONS
        self._positions_start = 0
        self._fixed_secret = secret
        self.secret = secret if secret is not None else new_secret()
        self.size = 0
        self.latest_offset = -1
        self.lookups = 0
        self.probes = 0
        #: This round's batches that filter_region took without reading their records: all
        #: dropped for later ones, as the map pass's notes showed (C engine only).
        self.unread_batches = 0
        # A new secret per round: what collided under the last one (by chance) does not again.
        self.secret = self._fixed_secret if self._fixed_secret is not None else new_secret()

    @property
    def memory_bytes(self) -> int:
        return len(self._table)

    @property
    def notes_positions(self) -> bool:
        """Whether this round's :meth:`map_region` notes key positions for
        :meth:`filter_region` (see :meth:`clear`)."""
        return len(self._positions) > 0

    @property
    def capacity(self) -> int:
        """How many keys the cleaner puts before it treats the map as full."""
        return int(self.slots * self.load_factor)

    @property
    def utilization(self) -> float:
        """Share of the memory budget's slots in use (Kafka's figure)."""
        return self.size / self.budget_slots

    def _slot(self, digest: bytes, attempt: int) -> int:
        window = min(attempt, HASH_BYTES - 4)
        probe = _INT32.unpack_from(digest, window)[0] + max(0, attempt - HASH_BYTES + 4)
        probe = (probe + 2**31) % 2**32 - 2**31  # Java int arithmetic wraps
        magnitude = 0 if probe == -(2**31) else abs(probe)
        return magnitude % self.slots

    def _find(self, digest: bytes) -> tuple[int, bool]:
        """Position of ``digest``'s slot, or of the first empty slot on its probe path; (-1,
        False) when neither exists (a full map). The linear tail of the probe sequence visits
        every slot within ``slots`` attempts, so the search always ends (Kafka's get would loop
        forever on a full map)."""
        table = self._table
        self.lookups += 1
        for attempt in range(self.slots + HASH_BYTES):
            position = self._slot(digest, attempt) * ENTRY_BYTES
            self.probes += 1
            if table[position : position + HASH_BYTES] == digest:
                return position, True
            if table[position : position + ENTRY_BYTES] == _EMPTY:
                return position, False
        return -1, False

    def put_digest(self, digest: bytes, offset: int) -> None:
        assert len(digest) == HASH_BYTES
        position, found = self._find(digest)
        if not found:
            if position < 0 or self.size >= self.slots:
                raise AssertionError("put into a full offset map")
            self._table[position : position + HASH_BYTES] = digest
            self.size += 1
        OFFSET.pack_into(self._table, position + HASH_BYTES, offset)
        self.latest_offset = offset

    def put_digests(
        self, digests: bytes | bytearray | memoryview, offsets: bytes | bytearray | memoryview
    ) -> None:
        """:meth:`put_digest` of each 16-byte digest of ``digests`` with the native int64 of
        ``offsets`` at the same index, in order (one call for a column of them)."""
        count = len(digests) // HASH_BYTES
        values = memoryview(offsets).cast("B").cast("q")
        assert len(digests) == count * HASH_BYTES and len(values) == count, (count, len(values))
        if count == 0:
            return
        if self._native is None:
            view = memoryview(digests)
            for i in range(count):
                self.put_digest(bytes(view[i * HASH_BYTES : (i + 1) * HASH_BYTES]), values[i])
            return
        size, lookups, probes = self._native.put_digests(
            self._probed, self.slots, self.size, digests, offsets
        )
        self.size = size
        self.latest_offset = values[count - 1]
        self.lookups += lookups
        self.probes += probes

    def get_digest(self, digest: bytes) -> int:
        """The offset stored for ``digest``, or -1."""
        position, found = self._find(digest)
        return OFFSET.unpack_from(self._table, position + HASH_BYTES)[0] if found else -1

    def digest(self, key: bytes | bytearray | memoryview) -> bytes:
        """``key``'s digest under this map's secret (by the engine this map runs on)."""
        if self._native is not None:
            return bytes(self._native.siphash(key, self.secret, C_ROUNDS, D_ROUNDS))
        return siphash128(key, self.secret)

    def put(self, key: bytes, offset: int) -> None:
        self.put_digest(self.digest(key), offset)

    def get(self, key: bytes) -> int:
        return self.get_digest(self.digest(key))

    # -- native fast paths (None: not available here, run the reference) -------------------
    def put_batch_keys(
        self, batch: bytes | bytearray | memoryview, payload: bytes | None, start: int
    ) -> tuple[int, bool] | None:
        """Put the key of every record of one validated data batch whose offset is at least
        ``start``, stopping before a put once :attr:`capacity` keys are held. ``payload`` is
        the decompressed records of a compressed batch, None for an uncompressed one. Returns
        (records walked, whether the map became full), or None without changing anything."""
        if self._native is None:
            return None
        result = self._native.put_keys(
            self._probed, self.slots, self.size, self.capacity, self.secret, batch, payload, start
        )
        return self._took_puts(result)

    def _took_puts(
        self, result: tuple[int, int, int, int, bool, int, int] | None
    ) -> tuple[int, bool] | None:
        """A native put pass's result taken into this map: (bytes walked, map full), or None
        when the native pass declined (the caller falls back to the Python path)."""
        if result is None:
            return None
        size, puts, last_put, walked, full, lookups, probes = result
        self.size = size
        if puts:
            self.latest_offset = last_put
        self.lookups += lookups
        self.probes += probes
        return walked, full

    def filter_batch_records(
        self,
        batch: bytes | bytearray | memoryview,
        payload: bytes | None,
        now_ms: int,
        new_horizon_ms: int,
    ) -> FilteredRecords | None:
        """The cleaner's shouldRetainRecord over one validated data batch and what
        ``rebuild_batch`` would write (see :class:`FilteredRecords`); None when not available
        or declined."""
        if self._native is None:
            return None
        result = self._native.filter_records(
            self._probed,
            self.slots,
            self.secret,
            self.latest_offset,
            batch,
            payload,
            now_ms,
            new_horizon_ms,
        )
        if result is None:
            return None
        kept, invalid, tombstones, rebuilt, max_timestamp, base_timestamp, lookups, probes = result
        self.lookups += lookups
        self.probes += probes
        return FilteredRecords(kept, invalid, tombstones, rebuilt, max_timestamp, base_timestamp)

    def put_legacy_keys(
        self,
        data: bytes | bytearray | memoryview,
        wrapper_magic: int,
        wrapper_offset: int,
        start: int,
    ) -> tuple[int, bool] | None:
        """:meth:`put_batch_keys` for a legacy message set (a plain entry, wrapper_magic -1, or
        a wrapper's decompressed inner messages): (walked, full), or None when not available
        or the set is refused (nothing changed; the reference raises)."""
        if self._native is None:
            return None
        result = self._native.put_legacy_keys(
            self._probed, self.slots, self.size, self.capacity, self.secret, data,
            wrapper_magic, wrapper_offset, start,
        )  # fmt: skip
        return self._took_puts(result)

    def filter_legacy_records(
        self,
        data: bytes | bytearray | memoryview,
        wrapper_magic: int,
        wrapper_offset: int,
        retain_deletes: bool,
    ) -> tuple[bytes, int] | None:
        """The cleaner's legacy shouldRetainRecord for each message of a legacy message set:
        (a byte per message, 1 to keep; keyless messages dropped), or None as above."""
        if self._native is None:
            return None
        result = self._native.filter_legacy_records(
            self._probed, self.slots, self.secret, self.latest_offset, data, wrapper_magic,
            wrapper_offset, retain_deletes,
        )  # fmt: skip
        if result is None:
            return None
        kept, invalid, lookups, probes = result
        self.lookups += lookups
        self.probes += probes
        return kept, invalid

    @property
    def native(self) -> bool:
        """Whether this map runs the C engine."""
        return self._native is not None

    def map_region(self, region: bytes | bytearray | memoryview, start: int) -> MappedRegion | None:
        """build_offset_map over the leading plain batches of ``region`` (see
        storagecore/cleaner/_native.c; compressed ones are decompressed with
        :data:`DECOMPRESSORS`, one call per batch): keys at offsets >= ``start`` are put, and
        :attr:`latest_offset` follows as the reference moves it. None without the engine."""
        if self._native is None:
            return None
        size, latest, walked, consumed, batches, stop, lookups, probes, last_offset = (
            self._native.map_region(
                self._probed,
                self.slots,
                self.size,
                self.capacity,
                self.secret,
                region,
                start,
                self.latest_offset,
                DECOMPRESSORS,
                self._positions,
                self._positions_start,
            )
        )
        self.size = size
        self.latest_offset = latest
        self.lookups += lookups
        self.probes += probes
        return MappedRegion(consumed, batches, walked, RegionStop(stop), last_offset)

    def filter_region(
        self,
        region: bytes | bytearray | memoryview,
        now_ms: int,
        new_horizon_ms: int,
        upper_bound: int,
        producers: bytes,
        *,
        chunk: OutputChunk,
        checked_bytes: int = 0,
    ) -> FilteredRegion | None:
        """The cleaner's filter over the leading plain batches of ``region``; ``producers``
        from :func:`producer_pairs`; ``chunk``: the state of the output chunk the region's
        output continues (see :class:`OutputChunk`); ``checked_bytes``: how many bytes from the
        start of ``region`` this round's :meth:`map_region` calls took from the same file
        (:class:`~storagecore.cleaner.regions.CheckedSpans`), whose checks are not repeated.
        None without the engine."""
        if self._native is None:
            return None
        (output, chunks, after, consumed, batches, read, written, invalid, verbatim, rebuilt,
         horizon, stop, lookups, probes, last_offset, unread) = self._native.filter_region(
            self._probed, self.slots, self.latest_offset, self.secret, region, now_ms,
            new_horizon_ms, upper_bound, producers, DECOMPRESSORS, COMPRESSORS, chunk,
            self._positions, self._positions_start, checked_bytes,
        )  # fmt: skip
        self.lookups += lookups
        self.probes += probes
        self.unread_batches += unread
        return FilteredRegion(
            output, chunks, OutputChunk(*after), consumed, batches, read, written, invalid,
            verbatim, rebuilt, horizon, RegionStop(stop), last_offset,
        )  # fmt: skip

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def clear(self, max_keys: int | None = None, first_offset: int | None = None) -> None:
        """Empty the map for a new round. ``max_keys``: the round puts at most that many keys
        (the offsets it can walk: a round never puts more keys than records). The probes then
        cover just enough slots that :attr:`capacity` exceeds it, when that is fewer than the
        budget's: the round ends exactly where it would over the whole table (the map cannot
        fill first), while touching, zeroing and keeping resident only that prefix (the
        standard log's 2M offsets: 53 MB of a 128 MB buffer). :attr:`utilization` stays
        measured against the budget.

        ``first_offset`` (with ``max_keys``): the round's offsets are ``[first_offset,
        first_offset + max_keys)``. When 4 bytes per offset fit in the budget after the probed
        prefix (the standard log: 8 MB more), :meth:`map_region` notes there where it put each
        record's key, and :meth:`filter_region` reads the key's slot from the note instead of
        digesting the key again (same decisions and counters; the standard log's clean under
        callgrind: 1,162 -> 998 instructions per record), and takes a batch whose records the
        notes show all superseded without reading its records (:attr:`unread_batches`; the
        standard log's filter pass: 90-120 -> 54-71 ms). Memory use stays within the
        budget."""
        # The pages go back to the kernel and read as zeros again (a private anonymous
        # mapping): no table-sized memset, and the map's resident memory is what it used.
        if self.size:
            self._table.madvise(mmap.MADV_DONTNEED)
        slots = self.budget_slots
        if max_keys is not None:
            # int(slots * load_factor) > max_keys, with room for float rounding.
            needed = math.ceil((max(max_keys, 0) + 1) / self.load_factor) + 1
            slots = min(slots, max(needed, _MIN_PROBED_SLOTS))
        if slots != self.slots:
            self.slots = slots
            self._probed = memoryview(self._table)[: slots * ENTRY_BYTES]
        self._positions = _NO_POSITIONS
        if max_keys is not None and first_offset is not None and self._native is not None:
            begin = slots * ENTRY_BYTES
            end = begin + max(max_keys, 0) * _POSITION_BYTES
            if max_keys > 0 and end <= len(self._table):
                self._positions = memoryview(self._table)[begin:end]
                self._positions_start = first_offset
        self.size = 0
        self.latest_offset = -1
        self.lookups = 0
        self.probes = 0
        self.unread_batches = 0
        # A new secret per round: what collided under the last one (by chance) does not again.
        self.secret = self._fixed_secret if self._fixed_secret is not None else new_secret()


class RegionStop(enum.IntEnum):
    """Why a region call returned (the C engine's STOP_* values)."""

    END = 0
    """Every complete batch of the region was taken; what is left is an incomplete batch."""
    BATCH = 1
    """The batch after the consumed bytes is for the per-batch path."""
    FULL = 2
    """The map filled inside the last batch taken."""


@dataclasses.dataclass(frozen=True, slots=True)
class MappedRegion:
    """What :meth:`SkimpyOffsetMap.map_region` took."""

    consumed_bytes: int
    batches: int
    walked: int
    """Records walked (in the batch where the map filled, up to where it did)."""
    stop: RegionStop
    last_offset: int
    """Last offset of the last whole batch taken, -1 when none."""


class OutputChunk(NamedTuple):
    """The cleaned output's chunk being filled: one LogSegment.append each when complete, so
    that the cleaned segment's offset index is as dense as one written by appends."""

    flush_bytes: int
    """A chunk is complete when it holds at least this many bytes (>= 1)."""
    pending: int
    """Bytes in the chunk so far."""
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    """Last offset of the batch that first reached ``max_timestamp`` (-1: no batch yet)."""


@dataclasses.dataclass(frozen=True, slots=True)
class FilteredRegion:
    """What :meth:`SkimpyOffsetMap.filter_region` took and wrote."""

    output: bytes
    #: Per chunk completed inside ``output``: int64 quads (end position in output, last offset,
    #: max timestamp, offset of max timestamp) in native byte order (:data:`CHUNK_END`).
    chunks: bytes
    #: The chunk after ``output``, whose bytes after the last complete chunk are pending.
    chunk: OutputChunk
    consumed_bytes: int
    batches: int
    messages_read: int
    messages_written: int
    invalid: int
    batches_copied_verbatim: int
    batches_rebuilt: int
    next_delete_horizon_ms: int | None
    stop: RegionStop
    last_offset: int


#: One complete chunk of a region's output (see :attr:`FilteredRegion.chunks`).
CHUNK_END: Final = struct.Struct("=qqqq")
_PAIR: Final = struct.Struct("=qq")


def producer_pairs(last_data_offsets: Mapping[int, int]) -> bytes:
    """Producer id → last data offset, packed as the C engine's filter_region takes them."""
    return b"".join(_PAIR.pack(pid, offset) for pid, offset in sorted(last_data_offsets.items()))
