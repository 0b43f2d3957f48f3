"""``logkeeper``: one console script, one subcommand per job.

The parser and the dispatch live here; each command group is a module of this package that
adds its subparsers (``add_parsers``) and names its handler (``handler`` in the parsed
arguments): :mod:`.records` (produce, consume), :mod:`.tools` (dump-log, verify),
:mod:`.log_dir` (retention, clean), :mod:`.spark`, :mod:`.servers` (serve, operator),
:mod:`.demo`. A group module imports only the standard library and
:mod:`logkeeper.topic_args` at the top; each handler imports what it needs, so ``logkeeper
dump-log`` never imports kopf or pyspark and ``logkeeper clean`` imports neither the worker nor
the producer loop (tests/integration/test_cli_startup.py checks the set). Errors from
storagecore (bad input, corrupt files, locked dirs) are printed as one ``logkeeper: error:
...`` line naming the thing, with exit status 2.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Final

from logkeeper.cli import demo, log_dir, records, servers, spark, tools

__all__ = ["build_parser", "main"]

EXAMPLES = """\
examples:
  logkeeper produce --dir data --topic orders < events.jsonl
  tail -f events.jsonl | logkeeper produce --dir data --topic orders --linger-ms 200
  logkeeper consume --dir data --topic orders --from 0
  logkeeper dump-log --records data/orders-0/00000000000000000000.log
  logkeeper verify --dir data
  logkeeper demo
"""


# The command group modules, in the order of `logkeeper --help`, and the commands each adds.
GROUPS: Final = (records, tools, log_dir, spark, servers, demo)
COMMANDS: Final = {
    "produce": records,
    "consume": records,
    "dump-log": tools,
    "verify": tools,
    "retention": log_dir,
    "clean": log_dir,
    "spark": spark,
    "serve": servers,
    "operator": servers,
    "demo": demo,
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or (``command``) of that command's group only: the same
    parser for that command's arguments (its help, defaults and errors are the same) without
    the other groups' few hundred argparse objects (each ``add_argument`` formats a help
    line), 11M instructions of a `logkeeper clean` process (callgrind)."""
    parser = argparse.ArgumentParser(
        prog="logkeeper",
        description="Kafka-format topic logs on local or Kubernetes volumes.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS if command is None else (COMMANDS[command],):
        group.add_parsers(sub)
    return parser


def command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names when it is plain: a known command first, or after
    ``--log-level LEVEL``. None otherwise (no command, an unknown one, ``--help``, an
    abbreviated option): the whole parser then reads it and says what is wrong."""
    rest = list(argv)
    if rest[:1] == ["--log-level"]:
        rest = rest[2:]
    elif rest[:1] and rest[0].startswith("--log-level="):
        rest = rest[1:]
    return rest[0] if rest and rest[0] in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    # Start-up allocates long-lived objects only (modules, classes, the parser): the cyclic
    # collector's passes over them find nothing (2% of the instructions of a `logkeeper clean`
    # of a small log). Paused while the parser is built; a handler that imports much does the
    # same around its imports (log_dir.cmd_clean).
    gc.disable()
    try:
        argv = sys.argv[1:] if argv is None else argv
        args = build_parser(command_of(argv)).parse_args(argv)
    finally:
        gc.enable()
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from storagecore.errors import ConfigError, StorageError

    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except BrokenPipeError:
        # The reader went away (`logkeeper consume | head`): not an error. Point stdout at
        # /dev/null so that the interpreter's final flush does not raise again at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (StorageError, ConfigError, OSError) as exc:
        # BrokenPipeError is an OSError: the clause above must come first.
        print(f"logkeeper: error: {exc}", file=sys.stderr)
        return 2
