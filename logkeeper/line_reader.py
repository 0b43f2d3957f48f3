"""Lines of a file descriptor as they arrive, with a timeout (``logkeeper produce``'s stdin).

A text-mode ``for line in sys.stdin`` blocks until a line (and with buffering, a whole chunk)
arrives, so a producer could not append a lingering batch while ``tail -f`` is quiet. This
reader waits with ``poll`` (which, unlike epoll, also accepts regular files: always ready; and
unlike ``select``, descriptors numbered 1024 and above),
reads what is there with one ``os.read`` and returns the complete lines. A second descriptor
(the signal wake-up pipe) ends a wait early.
"""

from __future__ import annotations

import contextlib
import os
import select

#: One ``os.read``: large enough that a file on stdin is read at disk speed.
READ_CHUNK_BYTES = 1 << 16

#: The longest line held while waiting for its newline; a longer one is an error, not memory
#: that grows without bound.
LINE_BYTES_MAX = 64 << 20


class LineReader:
    """``poll(timeout_ms)`` returns the ``(number, line)`` pairs that became complete within the
    timeout (maybe none); numbers count every line from 1, blank ones too. At end of input the
    last line is returned even without its newline, and ``eof`` is set."""

    def __init__(self, fd: int, *, wake_fd: int | None = None) -> None:
        self._fd = fd
        self._wake_fd = wake_fd
        self._partial = bytearray()
        self._next_number = 1
        self.eof = False

    def poll(self, timeout_ms: int | None) -> list[tuple[int, bytes]]:
        assert not self.eof, "poll after end of input"
        poller = select.poll()
        for fd in (self._fd, self._wake_fd):
            if fd is not None:
                poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        ready = {fd for fd, _ in poller.poll(timeout_ms)}
        if self._wake_fd is not None and self._wake_fd in ready:
            # Drained; the caller checks why it was woken.
            with contextlib.suppress(BlockingIOError):
                os.read(self._wake_fd, 512)
        if self._fd not in ready:
            return []
        data = os.read(self._fd, READ_CHUNK_BYTES)
        if not data:
            self.eof = True
            last = bytes(self._partial)
            self._partial.clear()
            return self._numbered([last]) if last else []
        self._partial += data
        end = self._partial.rfind(b"\n")
        if end < 0:
            if len(self._partial) > LINE_BYTES_MAX:
                from storagecore.errors import ConfigError

                raise ConfigError(
                    f"stdin line {self._next_number}: longer than {LINE_BYTES_MAX} bytes"
                )
            return []
        complete = bytes(self._partial[:end])
        del self._partial[: end + 1]
        return self._numbered(complete.split(b"\n"))

    def _numbered(self, lines: list[bytes]) -> list[tuple[int, bytes]]:
        first = self._next_number
        self._next_number += len(lines)
        return list(enumerate(lines, start=first))
