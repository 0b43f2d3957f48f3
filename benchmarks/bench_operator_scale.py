"""The operator at scale (issue 22 point 4): N Topics applied with ``kubectl apply`` onto one
StorageVolume, through the fake API server, the real operator and a real worker.

    .venv/bin/python benchmarks/bench_operator_scale.py [--topics 10000]

Runs ``tests/e2e/test_operator_scale.py`` with ``LOGKEEPER_SCALE_TOPICS=N`` (the e2e tier runs
it with 600) and prints its figures for each of its two applies (a quarter of the Topics, then
the rest): the time kubectl took, until every partition was on the worker, until every Topic
was Ready; the operator's writes (count, bytes, by kind) and the shard ConfigMaps' writes; per
Topic applied, the writes and bytes, and the second apply's over the first's (1.0 when the
writes grow linearly with the Topics applied, not with those already there); then what a
change to one Topic wrote, and an operator restart's writes. The test's own assertions (writes
and bytes per Topic bounded and linear, one entry and one status written for a change to one
Topic, no write once settled nor across a restart) hold or it fails.

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
    figures: dict[str, object] = {}
    for line in lines:  # the applies, then the change to one Topic, then the restart
        figures.update(json.loads(line[len("SCALE ") :]))
    figures["test_s"] = round(time.monotonic() - started, 1)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, nargs="+", default=[10_000])
    args = parser.parse_args()
    for topics in args.topics:
        figures = run(topics)
        print(f"{topics} Topics:")
        for key in sorted(figures):
            if key not in ("first_apply", "second_apply"):
                print(f"  {key:28} {figures[key]}")
        for phase in ("first_apply", "second_apply"):
            numbers = figures[phase]
            assert isinstance(numbers, dict)
            print(f"  {phase} ({numbers['topics']} Topics):")
            for key in sorted(numbers):
                print(f"    {key:26} {numbers[key]}")
            per_topic = numbers["shard_write_bytes"] / numbers["topics"]
            print(f"    {'shard bytes per Topic':26} {per_topic:.1f}")
        first, second = figures["first_apply"], figures["second_apply"]
        assert isinstance(first, dict) and isinstance(second, dict)
        print(
            "  second/first apply, writes per Topic: "
            f"{second['writes_per_topic'] / first['writes_per_topic']:.3f}, bytes per Topic: "
            f"{second['write_bytes_per_topic'] / first['write_bytes_per_topic']:.3f} "
            "(1.0 = linear in the Topics applied)"
        )


if __name__ == "__main__":
    main()
