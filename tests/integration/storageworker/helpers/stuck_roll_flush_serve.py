"""``logkeeper serve`` on a disk where the fsyncs of a rolled segment never finish.

Every scheduled roll flush (storagecore.roll_flush.RollFlush) blocks forever before syncing
anything, as behind a disk that does not complete the fsync, so every roll's flush stays
pending; the rest of the worker is the real one. Run by test_roll_flush_kill.py, which kills
it with SIGKILL inside that window.
"""

from __future__ import annotations

import sys
import threading

from logkeeper.cli import main
from storagecore.roll_flush import RollFlush


def never_done(_job: RollFlush) -> None:
    threading.Event().wait()


if __name__ == "__main__":
    RollFlush.__call__ = never_done  # type: ignore[method-assign]
    sys.exit(main(sys.argv[1:]))
