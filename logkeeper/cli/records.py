"""``logkeeper produce`` and ``logkeeper consume``: records in and out of one topic-partition.

The flags live here; the loops are :mod:`logkeeper.produce` and :mod:`logkeeper.consume`,
imported only when their command runs (so that other commands do not pay for them).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from logkeeper.topic_args import add_topic_args


def add_parsers(sub: Any) -> None:
    add_produce_parser(sub)
    add_consume_parser(sub)


#: kafka-console-producer's ``--timeout`` (its linger.ms) defaults to 1000 ms.
LINGER_MS_DEFAULT = 1000
#: About Kafka's 16 KiB ``batch.size`` for records of ~30 bytes, counted in records because
#: a line's size is known only once it is encoded.
BATCH_RECORDS_DEFAULT = 500
#: A batch is built in memory: bound it.
BATCH_RECORDS_MAX = 1_000_000
#: A day: longer is surely a mistake in units.
LINGER_MS_MAX = 86_400_000


def _int_in(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in [{low}, {high}], got {value}")
        return value

    return parse


def add_produce_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "produce",
        help="append JSON lines from stdin to a topic-partition as they arrive",
        description=(
            'Reads JSON lines {"key": str|null, "value": str|null, "timestamp": int, '
            '"headers": {str: str}} from stdin as they arrive (value null = tombstone; '
            "timestamp defaults to now) and appends them in batches: a batch is appended when "
            "it holds --batch-records records, when --linger-ms has passed since its first "
            "record, and at end of input (or SIGINT/SIGTERM). Prints one "
            '{"partition", "offset"} line per record once its batch is appended. The topic\'s '
            "flush.messages and flush.ms decide when appends are fsynced. A bad line stops the "
            "producer: the lines before it are appended, nothing from it on."
        ),
    )
    add_topic_args(parser)
    parser.add_argument(
        "--compression",
        default="none",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="codec of the batches the producer builds (default none)",
    )
    parser.add_argument(
        "--batch-records",
        type=_int_in(1, BATCH_RECORDS_MAX),
        default=BATCH_RECORDS_DEFAULT,
        help=f"append a batch once it holds this many records (default {BATCH_RECORDS_DEFAULT})",
    )
    parser.add_argument(
        "--linger-ms",
        type=_int_in(0, LINGER_MS_MAX),
        default=LINGER_MS_DEFAULT,
        help=(
            "append a batch this long after its first record arrived, even if not full "
            f"(linger.ms; default {LINGER_MS_DEFAULT}, as kafka-console-producer)"
        ),
    )
    parser.set_defaults(handler=cmd_produce)


def add_consume_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "consume",
        help="print records of a topic-partition as JSON lines",
        description=(
            "Prints one JSON line per record in [--from, --to): offset, timestamp, key, value, "
            "headers. Keys and values that are not UTF-8 are printed base64-encoded under "
            "key_b64 / value_b64."
        ),
    )
    add_topic_args(parser)
    parser.add_argument(
        "--from", dest="start", type=int, default=None, help="first offset (default: log start)"
    )
    parser.add_argument(
        "--to", dest="end", type=int, default=None, help="end offset, exclusive (default: log end)"
    )
    parser.set_defaults(handler=cmd_consume)


def cmd_produce(args: argparse.Namespace) -> int:
    from logkeeper.produce import cmd_produce as run

    return run(args)


def cmd_consume(args: argparse.Namespace) -> int:
    from logkeeper.consume import cmd_consume as run

    return run(args)
