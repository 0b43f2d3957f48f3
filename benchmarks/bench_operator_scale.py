"""The operator at scale (issue 22 point 4): N Topics applied with ``kubectl apply`` onto one
StorageVolume, through the fake API server, the real operator and a real worker.

    .venv/bin/python benchmarks/bench_operator_scale.py [--topics 10000]

Runs ``tests/e2e/test_operator_scale.py`` with ``LOGKEEPER_SCALE_TOPICS=N`` (the CI tier runs
it with 2,000) and prints its figures: the time kubectl took, until every partition was on the
worker, until every Topic was Ready; the operator's writes (count, bytes, by kind) and the
shard ConfigMaps' writes and sizes; and per Topic applied, the writes and bytes, which stay
flat as N grows when the writes grow linearly. The test's own assertions (writes and bytes per
Topic bounded, one entry written for a change to one Topic) hold or it fails.

There is no Kafka anchor here (Kafka has no operator in this role); what compares is the same
figures per Topic at two counts: ``--topics 2000`` and ``--topics 10000`` in one session. The
machine is shared (2 cores, other engineers' tests): times are noisy, counts are not. It uses
the fake API server on 127.0.0.1 and loopback pod IPs 127.0.0.N: one run at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(topics: int) -> dict[str, object]:
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-s",
            "-x",
            "tests/e2e/test_operator_scale.py",
        ],
        cwd=ROOT,
        env={**os.environ, "LOGKEEPER_SCALE_TOPICS": str(topics)},
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("SCALE ")]
    if result.returncode != 0 or not lines:
        sys.stdout.write(result.stdout[-8000:] + result.stderr[-4000:])
        raise SystemExit(f"the scale test failed with {topics} Topics")
    figures: dict[str, object] = json.loads(lines[-1][len("SCALE ") :])
    figures["test_s"] = round(time.monotonic() - started, 1)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, nargs="+", default=[10_000])
    args = parser.parse_args()
    for topics in args.topics:
        figures = run(topics)
        writes, shard_bytes = figures["operator_writes"], figures["shard_write_bytes"]
        assert isinstance(writes, int) and isinstance(shard_bytes, int)
        print(f"{topics} Topics:")
        for key in sorted(figures):
            print(f"  {key:28} {figures[key]}")
        print(f"  {'operator writes per Topic':28} {writes / topics:.2f}")
        print(f"  {'shard bytes per Topic':28} {shard_bytes / topics:.1f}")


if __name__ == "__main__":
    main()
