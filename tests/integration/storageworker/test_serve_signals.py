"""``logkeeper serve`` stops on a SIGTERM that the kernel hands to any of its threads.

A process-directed signal goes to whichever thread does not block it; when that is not the
main thread, the C handler only sets a flag and Python runs the handler in the main thread once
that thread runs again. serve's main thread waited without a timeout, so such a SIGTERM was
ignored for good (a test's stop timed out under load). The signal is sent here to each
non-main thread in turn with tgkill, which is what the kernel's choice amounts to.
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
from pathlib import Path

import pytest

from tests.integration.storageworker.test_serve import SETTINGS, Served

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(platform.machine() != "x86_64", reason="tgkill's syscall number"),
]

SYS_TGKILL = 234  # x86_64


def tgkill(pid: int, tid: int, signum: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(SYS_TGKILL, pid, tid, signum) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tid}, {signum})")


def test_a_sigterm_received_by_another_thread_stops_the_worker(tmp_path: Path) -> None:
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    server = Served(tmp_path, "--kafka-port", "0")
    pid = server.process.pid
    others = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert others, "serve runs its listeners on threads of their own"
    tgkill(pid, others[-1], signal.SIGTERM)
    try:
        assert server.process.wait(30) == 0, server.log_text()
    except BaseException:
        server.kill()
        raise
    server.expect("stopped")
    server._close()  # what terminate() does after its wait
