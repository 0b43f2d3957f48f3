"""``logkeeper dump-log`` and ``logkeeper verify``: the read-only tools over segment files and
log dirs (Kafka's kafka-dump-log and a consistency check).

Imports :mod:`storagecore.tools` only inside the handlers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "dump-log",
        help="print batches, records, index entries or checkpoints (like kafka-dump-log)",
    )
    p.add_argument(
        "paths",
        nargs="+",
        type=Path,
        metavar="PATH",
        help=".log, .index, .timeindex or checkpoint files",
    )
    p.add_argument(
        "--records",
        "--print-data-log",
        "--deep-iteration",
        dest="records",
        action="store_true",
        help="also print every record",
    )
    p.set_defaults(handler=cmd_dump_log)

    p = sub.add_parser(
        "verify",
        help="check CRCs, indexes and checkpoints of a log directory (read-only)",
        description="Exit status 0 when no error is found, 1 otherwise; findings go to stdout.",
    )
    p.add_argument(
        "--dir",
        required=True,
        type=Path,
        action="append",
        help="log dir or partition dir (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=cmd_verify)


def cmd_dump_log(args: argparse.Namespace) -> int:
    from storagecore.tools.dump import dump_file

    for path in args.paths:
        for line in dump_file(path, records=args.records):
            sys.stdout.write(line + "\n")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from storagecore.tools.verify import verify_log_dir

    ok = True
    reports = []
    for directory in args.dir:
        report = verify_log_dir(directory)
        ok = ok and report.ok
        reports.append((directory, report))
    if args.json:
        payload = [
            {
                "dir": str(directory),
                "ok": report.ok,
                "findings": [
                    {"severity": f.severity, "path": str(f.path), "message": f.message}
                    for f in report.findings
                ],
                "partitions": [
                    {
                        "topic": p.tp.topic,
                        "partition": p.tp.partition,
                        "segments": p.segments,
                        "batches": p.batches,
                        "records": p.records,
                        "size_bytes": p.size_bytes,
                        "first_offset": p.first_offset,
                        "next_offset": p.next_offset,
                        "batches_by_magic": {str(m): n for m, n in p.batches_by_magic.items()},
                    }
                    for p in report.partitions
                ],
            }
            for directory, report in reports
        ]
        print(json.dumps(payload, indent=2))
    else:
        for directory, report in reports:
            for finding in report.findings:
                print(finding)
            for p in report.partitions:
                legacy = {m: n for m, n in sorted(p.batches_by_magic.items()) if m < 2}
                if legacy:
                    formats = ", ".join(f"{n} v{m}" for m, n in legacy.items())
                    print(f"{p.tp}: legacy message format entries: {formats}")
            print(
                f"{directory}: {len(report.partitions)} partitions, "
                f"{sum(p.segments for p in report.partitions)} segments, "
                f"{sum(p.records for p in report.partitions)} records: "
                f"{'OK' if report.ok else f'{len(report.errors)} error(s)'}"
            )
    return 0 if ok else 1
