"""Open file descriptors of segment files, bounded: a least-recently-used cache of open files.

Kafka keeps one descriptor per segment (its index files are mapped lazily and closed once
mapped), so its open files grow with the data and brokers run with limits of 100,000 and more.
Here the files of every segment (``.log``, ``.index``, ``.timeindex``) are opened on demand
through one :class:`FileCache` per :class:`~storagecore.log_manager.LogManager`, bounded by
``max_open_files`` as RocksDB's ``max_open_files`` bounds its table cache: the active segments
and the recently read ones stay open, the least recently used idle file is closed when another
must open. A closed file reopens on its next use (by path: a rename updates it).

Who uses a descriptor pins it (:meth:`CachedFile.acquire` / :meth:`CachedFile.release`, or
:meth:`CachedFile.pinned`) for the duration of the system calls, never longer: a pinned file is
never closed under its user. When every open file is pinned the cache goes over its bound rather
than wait (``overflows`` counts it); pins last one system call or one native call.

One exception, for the append: an active segment's files are *held* (:meth:`FileCache.hold_all`,
:meth:`storagecore.segment_files.SegmentFiles.hold_files`), a pin that lasts until the segment
stops being active or closes, so that an append does not pin and unpin its ``.log`` under the
cache's lock every time (1.5 us of a 20 us append of 16 KiB here). At most a quarter of the bound
is held (:func:`max_held_files`): past that, appends pin per call as before, and the cache
always has three quarters of its bound for everything else. Closing a held file releases its
hold first.

Running out of descriptors (EMFILE, ENFILE) or of kernel memory (ENOMEM) while opening is not a
disk failure (:func:`is_resource_exhausted`): the cache sheds half of its idle files and tries
once more; if that fails too the error goes to the caller, which fails that request only
(:class:`~storagecore.errors.ResourceExhaustedError`), never the directory.

:class:`OpenFile` is the same interface over one descriptor kept open for the object's life
(tools, the pipeline, tests: whatever is opened without a cache).

Thread-safe. The cache's lock is held for the bookkeeping and for the ``open``/``close`` calls
themselves (microseconds), never for reads or writes.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, NamedTuple

logger = logging.getLogger(__name__)

RESOURCE_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})
#: Default bound when the settings give none: this share of the process's soft RLIMIT_NOFILE,
SOFT_LIMIT_SHARE: Final = 0.5
#: at most this many (a container's usual limit is 1,048,576; Kafka's recommendation 100,000),
MAX_OPEN_FILES_CAP: Final = 16_384
#: and at least this many.
MAX_OPEN_FILES_MIN: Final = 16
#: Share of the idle open files that one shed closes.
SHED_SHARE: Final = 0.5
#: At most 1 / this of ``max_open_files`` are held for appends (:meth:`FileCache.hold_all`).
HELD_SHARE_DIVISOR: Final = 4


def is_resource_exhausted(exc: BaseException) -> bool:
    """An OSError that says the process or the system ran out of descriptors or memory, not
    that the disk failed: the request that hit it fails, the directory stays online."""
    return isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS


def default_max_open_files(soft_limit: int | None = None) -> int:
    """Half the process's soft open-files limit, at most :data:`MAX_OPEN_FILES_CAP`: the other
    half stays for client connections, checkpoints, snapshots and the cleaner's mappings."""
    if soft_limit is None:
        import resource  # noqa: PLC0415 - POSIX only, and only when no bound is given

        soft_limit, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft_limit == resource.RLIM_INFINITY:
            return MAX_OPEN_FILES_CAP
    return max(MAX_OPEN_FILES_MIN, min(int(soft_limit * SOFT_LIMIT_SHARE), MAX_OPEN_FILES_CAP))


def max_held_files(max_open_files: int) -> int:
    """How many of the cache's files the active segments may hold open for appends."""
    return max(1, max_open_files // HELD_SHARE_DIVISOR)


def open_fd(path: Path, flags: int) -> int:
    return os.open(path, flags, 0o644)


class CacheStats(NamedTuple):
    max_open_files: int
    open_files: int
    """Descriptors the cache holds open now."""
    pinned_files: int
    held_files: int
    """Of the pinned files, those the active segments hold for appends."""
    hits: int
    """Uses that found the file open."""
    misses: int
    """Uses that had to open it."""
    evictions: int
    """Idle files closed to make room."""
    sheds: int
    """Times EMFILE, ENFILE or ENOMEM made the cache close half its idle files."""
    overflows: int
    """Opens past the bound because every open file was pinned."""
    resource_errors: int
    """Opens that failed with EMFILE, ENFILE or ENOMEM even after shedding."""


class FileCache:
    """At most ``max_open_files`` descriptors of :class:`CachedFile` open at once."""

    def __init__(self, max_open_files: int) -> None:
        if max_open_files < MAX_OPEN_FILES_MIN:
            raise ValueError(
                f"max open files must be at least {MAX_OPEN_FILES_MIN}, got {max_open_files}"
            )
        self.max_open_files = max_open_files
        self._lock = threading.Lock()
        # Invariant: exactly the files with fd >= 0, least recently used first.
        self._open: collections.OrderedDict[CachedFile, None] = collections.OrderedDict()
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.sheds = 0
        self.overflows = 0
        self.resource_errors = 0
        self.held_files = 0

    def file(
        self,
        path: Path,
        flags: int,
        *,
        create: bool = False,
        on_close: Callable[[], None] | None = None,
    ) -> CachedFile:
        """A handle on ``path``; with ``create`` it is opened (``O_CREAT``) at once, so that
        the file exists when this returns; else nothing is opened until the first use."""
        handle = CachedFile(self, path, flags & ~os.O_CREAT, on_close)
        if create:
            with self._lock:
                self._open_locked(handle, flags | os.O_CREAT)
        return handle

    def stats(self) -> CacheStats:
        with self._lock:
            pinned = sum(1 for f in self._open if f.users)
            return CacheStats(
                self.max_open_files,
                len(self._open),
                pinned,
                self.held_files,
                self.hits,
                self.misses,
                self.evictions,
                self.sheds,
                self.overflows,
                self.resource_errors,
            )

    def set_max_open_files(self, max_open_files: int) -> None:
        if max_open_files < MAX_OPEN_FILES_MIN:
            raise ValueError(
                f"max open files must be at least {MAX_OPEN_FILES_MIN}, got {max_open_files}"
            )
        with self._lock:
            self.max_open_files = max_open_files
            self._evict_locked(len(self._open) - max_open_files)

    def shed(self, share: float = SHED_SHARE) -> int:
        """Close ``share`` of the idle open files (after EMFILE/ENFILE/ENOMEM outside the
        cache, so that the retried operation finds descriptors); the number closed."""
        with self._lock:
            return self._shed_locked(share)

    # -- internals (the lock held) -----------------------------------------------------------
    def _shed_locked(self, share: float) -> int:
        self.sheds += 1
        idle = sum(1 for f in self._open if not f.users)
        return self._evict_locked(max(1, int(idle * share)))

    def _evict_locked(self, count: int) -> int:
        if count <= 0:
            return 0
        # The least recently used idle files, found from the front of the LRU order: the walk
        # stops after ``count`` of them (plus the pinned ones before them), instead of copying
        # the whole order per eviction (at a bound of 2,048 that copy made every miss of a full
        # cache cost ~0.3 ms: a /metrics scrape of 2,000 partitions spent 10 s in it).
        victims: list[CachedFile] = []
        for handle in self._open:
            if not handle.users:
                victims.append(handle)
                if len(victims) >= count:
                    break
        for victim in victims:
            self._close_locked(victim)
        self.evictions += len(victims)
        return len(victims)

    def _close_locked(self, handle: CachedFile) -> None:
        fd, handle.fd = handle.fd, -1
        self._open.pop(handle, None)
        if handle.on_close is not None:
            handle.on_close()
        try:
            os.close(fd)
        except OSError as exc:
            logger.warning("Closing %s failed: %s", handle.path, exc)

    def _open_locked(self, handle: CachedFile, flags: int) -> None:
        if len(self._open) >= self.max_open_files and not self._evict_locked(
            len(self._open) - self.max_open_files + 1
        ):
            self.overflows += 1
        try:
            fd = open_fd(handle.path, flags)
        except OSError as exc:
            if not is_resource_exhausted(exc):
                raise
            shed = self._shed_locked(SHED_SHARE)
            logger.warning(
                "Opening %s failed (%s): closed %d idle files and trying again",
                handle.path,
                exc.strerror,
                shed,
            )
            try:
                fd = open_fd(handle.path, flags)
            except OSError as again:
                if is_resource_exhausted(again):
                    self.resource_errors += 1
                raise
        handle.fd = fd
        self._open[handle] = None

    def _acquire(self, handle: CachedFile) -> int:
        with self._lock:
            self._acquire_locked(handle)
            return handle.fd

    def _acquire_locked(self, handle: CachedFile) -> None:
        """Open ``handle`` if it is not (a miss) and count one more user of it."""
        if handle.closed:
            raise ValueError(f"{handle.path}: the file is closed")
        if handle.fd >= 0:
            self.hits += 1
            self._open.move_to_end(handle)
        else:
            self.misses += 1
            self._open_locked(handle, handle.flags)
        handle.users += 1

    def acquire_all(self, handles: tuple[CachedFile, ...]) -> None:
        """:meth:`CachedFile.acquire` of each, under one acquisition of the lock (the append
        path pins a segment's three files at once); all or none."""
        with self._lock:
            self._acquire_all_locked(handles)

    def _acquire_all_locked(self, handles: tuple[CachedFile, ...]) -> None:
        done = 0
        try:
            for handle in handles:
                self._acquire_locked(handle)
                done += 1
        except BaseException:
            for handle in handles[:done]:
                handle.users -= 1
            raise

    def hold_all(self, handles: tuple[CachedFile, ...]) -> bool:
        """Pin each of ``handles`` (opening it if need be) until :meth:`release_held`: an
        active segment's files, held for its appends. False, with nothing pinned, when that
        would hold more than :func:`max_held_files`; all or none."""
        with self._lock:
            todo = tuple(handle for handle in handles if not handle.held)
            if self.held_files + len(todo) > max_held_files(self.max_open_files):
                return False
            self._acquire_all_locked(todo)
            for handle in todo:
                handle.held = True
            self.held_files += len(todo)
            return True

    def release_held(self, handles: tuple[CachedFile, ...]) -> None:
        """Undo :meth:`hold_all` for those of ``handles`` still held."""
        with self._lock:
            for handle in handles:
                self._release_held_locked(handle)

    def _release_held_locked(self, handle: CachedFile) -> None:
        if handle.held:
            handle.held = False
            handle.users -= 1
            self.held_files -= 1

    def release_all(self, handles: tuple[CachedFile, ...]) -> None:
        with self._lock:
            for handle in handles:
                assert handle.users > 0, f"{handle.path}: released more often than acquired"
                handle.users -= 1

    def _release(self, handle: CachedFile) -> None:
        with self._lock:
            assert handle.users > 0, f"{handle.path}: released more often than acquired"
            handle.users -= 1

    def _forget(self, handle: CachedFile) -> None:
        with self._lock:
            self._release_held_locked(handle)  # closing a held file ends its hold
            assert handle.users == 0, f"{handle.path}: closed while in use"
            handle.closed = True
            if handle.fd >= 0:
                self._close_locked(handle)


class CachedFile:
    """One file whose descriptor a :class:`FileCache` opens on use and may close when idle.

    ``on_close`` runs (under the cache's lock: it must only drop state, such as an index's
    entries read into memory) whenever the cache closes the descriptor."""

    __slots__ = ("cache", "closed", "fd", "flags", "held", "on_close", "path", "users")

    def __init__(
        self, cache: FileCache, path: Path, flags: int, on_close: Callable[[], None] | None
    ) -> None:
        self.cache = cache
        self.path = path
        self.flags = flags
        self.on_close = on_close
        self.fd = -1
        self.users = 0
        self.closed = False
        #: Pinned by :meth:`FileCache.hold_all` (one of ``users``) until released or closed:
        #: while True, ``fd`` is open.
        self.held = False

    def acquire(self) -> int:
        """The open descriptor, pinned until :meth:`release`."""
        return self.cache._acquire(self)

    def release(self) -> None:
        self.cache._release(self)

    @contextlib.contextmanager
    def pinned(self) -> Iterator[int]:
        fd = self.cache._acquire(self)
        try:
            yield fd
        finally:
            self.cache._release(self)

    def close(self) -> None:
        """Close for good (the file is not reopened)."""
        if not self.closed:
            self.cache._forget(self)

    def __repr__(self) -> str:
        held = ", held" if self.held else ""
        return f"CachedFile({self.path}, fd={self.fd}, users={self.users}{held})"


class OpenFile:
    """One descriptor open from construction to :meth:`close`: :class:`CachedFile`'s interface
    without a cache."""

    __slots__ = ("closed", "fd", "held", "path")

    def __init__(self, path: Path, flags: int) -> None:
        self.path = path
        self.fd = open_fd(path, flags)
        self.closed = False
        #: As :attr:`CachedFile.held`: an open file is held for its life, until closed.
        self.held = True

    def acquire(self) -> int:
        if self.fd < 0:
            raise ValueError(f"{self.path}: the file is closed")
        return self.fd

    def release(self) -> None:
        pass

    @contextlib.contextmanager
    def pinned(self) -> Iterator[int]:
        yield self.acquire()

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            self.closed = True
            self.held = False
            try:
                os.close(fd)
            except OSError as exc:
                logger.warning("Closing %s failed: %s", self.path, exc)

    def __repr__(self) -> str:
        return f"OpenFile({self.path}, fd={self.fd})"


Handle = CachedFile | OpenFile


def open_handle(
    path: Path,
    flags: int,
    cache: FileCache | None,
    *,
    create: bool = False,
    on_close: Callable[[], None] | None = None,
) -> Handle:
    """A :class:`CachedFile` through ``cache``, or an :class:`OpenFile` without one."""
    if cache is None:
        return OpenFile(path, flags | (os.O_CREAT if create else 0))
    return cache.file(path, flags, create=create, on_close=on_close)
