"""What ``logkeeper clean`` loads: a clean of an uncompressed log imports no codec library and
no thread pool (they are imported on first use), which is part of the command's start-up time
(benchmarks/bench_cleaner.py measures the whole process beside Kafka)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from storagecore import LogConfig, LogManager, NewRecord, TopicPartition, build_batch

TOPICS = """\
apiVersion: logkeeper.io/v1alpha1
kind: Topic
metadata:
  name: events
spec:
  partitions: 1
  config:
    cleanup.policy: compact
"""

# Runs the console script's main in a fresh interpreter and reports the modules it loaded.
PROBE = """\
import json, sys
from logkeeper.cli import main
code = main(sys.argv[1:])
assert code == 0, code
print(json.dumps(sorted(sys.modules)))
"""


def test_clean_of_an_uncompressed_log_imports_no_codec_and_no_pool(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = LogConfig(cleanup_policy=("compact",))
    with LogManager([data], default_config=config) as manager:
        log = manager.get_or_create_log(TopicPartition("events", 0))
        for n in range(3):
            log.append(build_batch([NewRecord(key=b"k", value=b"v%d" % n, timestamp=n)]))
        log.roll()
    topics = tmp_path / "topics.yaml"
    topics.write_text(TOPICS)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "clean", "--dir", str(data), "--topics", str(topics)],
        capture_output=True,
        text=True,
        check=True,
    )
    modules = set(json.loads(done.stdout.splitlines()[-1]))
    assert "storagecore.cleaner.log_cleaner" in modules  # the probe ran the clean
    assert "1 round(s)" in done.stdout
    assert not modules & {"lz4", "lz4.frame", "zstandard", "cramjam", "concurrent.futures"}
