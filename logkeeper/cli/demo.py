"""``logkeeper demo``: the embedded default (:mod:`logkeeper.demo`, imported when it runs)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "demo", help="run the embedded default: example topics in a local directory, with a report"
    )
    p.add_argument(
        "--dir",
        type=Path,
        default=Path("demo-data"),
        help="directory for the demo (default ./demo-data)",
    )
    p.add_argument("--records", type=int, default=20_000, help="records to produce (default 20000)")
    p.add_argument(
        "--linger",
        type=float,
        default=20.0,
        help="seconds the demo worker keeps serving its status and metrics at the end (default 20)",
    )
    p.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from logkeeper.demo import run_demo

    return run_demo(args.dir, records=args.records, linger_s=args.linger)
