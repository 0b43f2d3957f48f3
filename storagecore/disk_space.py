"""Free space of a log directory, and the floor below which it refuses new data.

Kafka treats ENOSPC like any I/O error: the log directory goes offline, and the broker halts
when no directory is left. Here a full disk is an expected condition:

- a write that fails with ENOSPC or EDQUOT (:func:`is_disk_full`) raises
  :class:`~storagecore.errors.LogDirFullError` and leaves the log at its last complete batch
  (the append path undoes its partial write); the directory stays online and readable;
- below the floor (``min_free_bytes``; by default the smaller of 5% of the filesystem and
  512 MiB, so that small volumes stay usable) :meth:`DiskSpace.check_writable` refuses new data
  before the filesystem fills; retention and the cleaner go on, as they free space;
- the state is re-read at most every ``refresh_ms`` (one ``statvfs``), so writes resume by
  themselves once space is back above the floor.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import threading
import time
from pathlib import Path
from typing import Final

from storagecore.errors import LogDirFullError

logger = logging.getLogger(__name__)

DISK_FULL_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT})
DEFAULT_FLOOR_FRACTION: Final = 0.05
DEFAULT_FLOOR_CAP_BYTES: Final = 512 * 1024 * 1024
REFRESH_MS: Final = 1000
#: After a write found no space: writes resume once this much more is free than at that moment,
FREED_BYTES: Final = 1024 * 1024
#: or after this long (a quota, EDQUOT, does not show in statvfs).
FULL_RETRY_MS: Final = 30_000


def is_disk_full(exc: BaseException) -> bool:
    """An OSError that means "no space" (the filesystem, or the user's quota) and not a
    failing disk."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def default_floor(total_bytes: int) -> int:
    """The smaller of 5% of the filesystem and 512 MiB."""
    return min(int(total_bytes * DEFAULT_FLOOR_FRACTION), DEFAULT_FLOOR_CAP_BYTES)


@dataclasses.dataclass(frozen=True, slots=True)
class SpaceReading:
    free_bytes: int
    """Available to unprivileged writers (statvfs f_bavail)."""
    total_bytes: int
    floor_bytes: int
    under_floor: bool
    """Free space below the floor, or the last write failed for lack of space."""
    reason: str | None


class DiskSpace:
    """One log directory's free space against its floor (thread-safe)."""

    def __init__(
        self, path: Path, min_free_bytes: int | None = None, refresh_ms: int = REFRESH_MS
    ) -> None:
        self.path = path
        self.min_free_bytes = min_free_bytes
        self.refresh_ms = refresh_ms
        self._lock = threading.Lock()
        self._read_at = -(1 << 62)
        self._reading: SpaceReading | None = None
        self._full_noted: tuple[str, int, int] | None = None
        # Bytes admitted since the last reading: a fast producer must not write through the
        # floor between two readings.
        self._admitted = 0
        #: Times the directory went under its floor (for metrics).
        self.pressure_episodes = 0

    def set_min_free_bytes(self, min_free_bytes: int | None) -> None:
        with self._lock:
            self.min_free_bytes = min_free_bytes
            self._read_at = -(1 << 62)

    def note_full(self, exc: OSError, what: str, *, now_ms: int | None = None) -> None:
        """A write failed with ENOSPC/EDQUOT: the directory is under pressure from now until
        space was freed (``FREED_BYTES`` more than at the failure, and the floor free) or, for
        a quota that statvfs does not show, ``FULL_RETRY_MS`` passed."""
        now = _now_ms() if now_ms is None else now_ms
        try:
            stat = os.statvfs(self.path)
            free = stat.f_bavail * stat.f_frsize
        except OSError:
            free = 0
        with self._lock:
            self._full_noted = (f"{what} failed: {exc.strerror or exc}", now, free)
            self._read_at = -(1 << 62)

    def reading(self, *, now_ms: int | None = None, fresh: bool = False) -> SpaceReading:
        """The current reading, taken again when older than ``refresh_ms`` (or ``fresh``)."""
        now = _now_ms() if now_ms is None else now_ms
        with self._lock:
            if not fresh and self._reading is not None and now - self._read_at < self.refresh_ms:
                return self._reading
            self._read_at = now
            self._admitted = 0
            stat = os.statvfs(self.path)
            free, total = stat.f_bavail * stat.f_frsize, stat.f_blocks * stat.f_frsize
            floor = default_floor(total) if self.min_free_bytes is None else self.min_free_bytes
            reason = None
            if free < floor:
                reason = f"{free} bytes free, below the floor of {floor} bytes"
            elif self._full_noted is not None:
                noted, noted_at, free_then = self._full_noted
                if free < free_then + FREED_BYTES and now - noted_at < FULL_RETRY_MS:
                    reason = noted
                else:
                    self._full_noted = None
            previous = self._reading
            if reason is not None and (previous is None or not previous.under_floor):
                self.pressure_episodes += 1
                logger.warning("%s is out of space, new data is refused: %s", self.path, reason)
            elif reason is None and previous is not None and previous.under_floor:
                logger.info("%s has space again (%d bytes free): writes resume", self.path, free)
            self._reading = SpaceReading(free, total, floor, reason is not None, reason)
            return self._reading

    def check_writable(self, incoming_bytes: int = 0) -> None:
        """Raise :class:`LogDirFullError` while the directory is under its floor. Admitted bytes
        count against the last reading: once they would reach the floor, the space is read
        again before ``incoming_bytes`` more are let through."""
        reading = self.reading()
        with self._lock:
            self._admitted += incoming_bytes
            near = reading.free_bytes - self._admitted < reading.floor_bytes
        if near and not reading.under_floor:
            reading = self.reading(fresh=True)
            with self._lock:
                self._admitted = incoming_bytes
        if reading.under_floor:
            raise LogDirFullError(
                f"log directory {self.path} is out of space ({reading.reason}): new data is "
                "refused until retention, compaction or an operator frees space"
            )
