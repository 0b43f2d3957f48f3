"""A writer process for the SIGKILL test: appends batches forever, flushing every few batches.

After each flush it prints ``<first offset> <last offset> <digest>`` lines for everything that the
flush made durable, so the parent knows exactly which offsets were acknowledged as flushed.
Each record's value is ``<run>:<offset-independent sequence>`` so its content can be checked.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from storagecore import Compression, LogConfig, LogManager, NewRecord, TopicPartition, build_batch


def main() -> None:
    data_dir, run = Path(sys.argv[1]), int(sys.argv[2])
    # "background": the worker's way, rolls leave their flush to the manager's flush thread
    # (storagecore.roll_flush), so kills also land while roll flushes are pending.
    background = sys.argv[3:] == ["background"]
    config = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=512, segment_index_bytes=4096)
    manager = LogManager([data_dir], default_config=config, background_roll_flush=background)
    log = manager.get_or_create_log(TopicPartition("crash", 0))
    codecs = list(Compression)
    sequence = 0
    pending: list[tuple[int, int, str]] = []
    print(f"ready {log.log_end_offset}", flush=True)
    while True:
        values = [f"{run}:{sequence + i}".encode() * 3 for i in range(1 + sequence % 7)]
        batch = build_batch(
            [
                NewRecord(
                    key=b"k%d" % (sequence % 50), value=v, timestamp=1_700_000_000_000 + sequence
                )
                for v in values
            ],
            compression=codecs[sequence % len(codecs)],
        )
        info = log.append(batch)
        digest = hashlib.sha256(b"".join(values)).hexdigest()[:16]
        pending.append((info.first_offset, info.last_offset, digest))
        sequence += len(values)
        if len(pending) >= 5:
            log.flush()
            for first, last, dig in pending:
                sys.stdout.write(f"{first} {last} {dig}\n")
            sys.stdout.flush()
            pending.clear()


if __name__ == "__main__":
    main()
