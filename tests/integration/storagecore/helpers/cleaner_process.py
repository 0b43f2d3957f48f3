"""A cleaner process for the SIGKILL loop: opens the data dir (recovering it), prints "ready",
then cleans with a tiny offset map (many rounds, many swaps) until it is killed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from storagecore import LogConfig, LogManager
from storagecore.cleaner.log_cleaner import LogCleaner
from storagecore.config import CleanerConfig

CONFIG = LogConfig(
    cleanup_policy=("compact",),
    segment_bytes=1500,
    index_interval_bytes=200,
    min_cleanable_dirty_ratio=0.01,
    file_delete_delay_ms=0,
)
#: 10 slots at load factor 0.9: 9 keys per round.
CLEANER = CleanerConfig(dedupe_buffer_size=240, backoff_ms=10)


def main() -> None:
    data = Path(sys.argv[1])
    with LogManager([data], default_config=CONFIG) as manager:
        cleaner = LogCleaner(manager, CLEANER)
        print("ready", flush=True)
        while True:
            if not cleaner.clean_until_done():
                time.sleep(0.01)


if __name__ == "__main__":
    main()
