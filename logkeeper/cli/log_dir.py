"""``logkeeper retention`` and ``logkeeper clean``: Kafka's retention passes and log cleaner run
once over every log of a directory that no worker holds.

``clean`` is measured as a whole process beside Kafka's cleaner (benchmarks/bench_cleaner.py):
its path imports the engine's config, LogManager and cleaner and nothing else of the repository
(tests/integration/test_cli_startup.py guards the set), and the replaced segments' files are
unlinked on a second thread while the report is printed and the checkpoints written.
"""

from __future__ import annotations

import argparse
import gc
import json
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from logkeeper.topic_args import add_dir_and_topics_args, log_dir_configs

if TYPE_CHECKING:
    from storagecore.cleaner.stats import CleanerStats
    from storagecore.config import TopicPartition
    from storagecore.segment import LogSegment


def add_parsers(sub: Any) -> None:
    # The engine's config module (no kopf, pyspark or log I/O): the one home of its defaults.
    from storagecore.config import DEDUPE_BUFFER_SIZE_DEFAULT, DEDUPE_BUFFER_SIZE_MIN_PER_THREAD

    p = sub.add_parser(
        "retention",
        help="apply retention (time, size, log start offset) to every log of a directory",
        description=(
            "Plans retention for every partition in --dir with the configs of --topics and "
            "--config (Kafka's three passes: log start offset, retention.bytes, retention.ms) "
            "and applies it, or with --dry-run only prints it. Deleted segments are renamed "
            ".deleted and, since this command holds the directory's lock and no reader can "
            "have them open, removed before it exits."
        ),
    )
    add_dir_and_topics_args(p)
    p.add_argument(
        "--dry-run", action="store_true", help="only print what would be deleted and why"
    )
    p.add_argument("--now-ms", type=int, help="evaluate time retention as of this epoch-ms time")
    p.add_argument("--json", action="store_true", help="print the plans as JSON")
    p.set_defaults(handler=cmd_retention)

    p = sub.add_parser(
        "clean",
        help="compact every compacted log of a directory until nothing is cleanable",
        description=(
            "Runs Kafka's log cleaner over every partition in --dir whose topic has "
            "cleanup.policy compact (from --topics, or --config for every log or the --topic "
            "ones): rounds until each dirty section up to the first uncleanable offset (active "
            "segment, min.compaction.lag.ms, open transactions) is clean, whatever "
            "min.cleanable.dirty.ratio says. Prints Kafka's stats line per round (or JSON "
            "stats) and updates cleaner-offset-checkpoint."
        ),
    )
    add_dir_and_topics_args(p)
    p.add_argument("--topic", action="append", help="only this topic (repeatable)")
    p.add_argument(
        "--now-ms", type=int, help="clean as of this epoch-ms time (horizons, compaction lags)"
    )
    p.add_argument(
        "--dedupe-buffer-bytes",
        type=int,
        default=DEDUPE_BUFFER_SIZE_DEFAULT,
        help=(
            "offset map memory (log.cleaner.dedupe.buffer.size; default %(default)s, at least "
            f"{DEDUPE_BUFFER_SIZE_MIN_PER_THREAD})"
        ),
    )
    p.add_argument("--json", action="store_true", help="print the stats of each round as JSON")
    p.set_defaults(handler=cmd_clean)


def cmd_retention(args: argparse.Namespace) -> int:
    from storagecore import LogManager, ManualClock, SystemClock

    configs = log_dir_configs(args)
    now_ms = SystemClock().milliseconds() if args.now_ms is None else args.now_ms
    clock = ManualClock(now_ms)
    with LogManager(
        [args.dir], config_for=configs.per_topic, default_config=configs.default, clock=clock
    ) as manager:
        plans = []
        for _tp, log in sorted(manager.logs.items()):
            plan = log.plan_retention() if args.dry_run else log.delete_old_segments()
            plans.append(plan)
            if not args.dry_run:
                # file.delete.delay.ms protects a running worker's readers; this process has none.
                log.delete_expired_files(force=True)
        if args.json:
            print(json.dumps([p.to_dict() for p in plans], indent=2))
        else:
            verb = "would delete" if args.dry_run else "deleted"
            for plan in plans:
                if not plan.deletions:
                    print(f"{plan.tp}: nothing to delete ({plan.size_bytes_before} bytes)")
                    continue
                print(
                    f"{plan.tp}: {verb} {len(plan.deletions)} segments, {plan.deleted_bytes} "
                    f"bytes; log start offset {plan.log_start_offset_before} -> "
                    f"{plan.log_start_offset_after}"
                    + ("; the active segment rolls first" if plan.rolls_active_segment else "")
                )
                for deletion in plan.deletions:
                    segment = deletion.segment
                    print(
                        f"  segment {segment.base_offset}..{segment.next_offset - 1} "
                        f"({segment.size_bytes} bytes): {deletion.rule.value}: {deletion.reason}"
                    )
    return 0


class SegmentFileDeleter:
    """Unlinks the files of segments that left their log, on a thread of its own (Kafka's
    ``delete-file`` task): the unlink of a replaced segment (the kernel drops its cached pages)
    takes tens of milliseconds for a 1 GiB segment, which ``logkeeper clean`` spends while it
    prints its report and shuts the log dir down. :meth:`join` waits for it and raises what it
    failed with; the command joins before it releases the dir's lock (a crash before the unlink
    leaves ``.deleted`` files, which the loader's first pass removes)."""

    def __init__(self, segments: Sequence[LogSegment]) -> None:
        self._segments = list(segments)
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._run, name="delete-file", daemon=False)
        if self._segments:
            self._thread.start()

    def _run(self) -> None:
        try:
            for segment in self._segments:
                segment.delete_files()
        except OSError as exc:
            self._error = exc

    def join(self) -> None:
        if self._thread.ident is not None:  # started (there was something to delete)
            self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def cmd_clean(args: argparse.Namespace) -> int:
    # The cyclic collector paused while the engine is imported and the manifests parsed (as
    # in main: only long-lived objects are allocated; the LogManager pauses it for the load).
    gc.disable()
    try:
        from storagecore import LogManager, ManualClock, SystemClock
        from storagecore.cleaner.log_cleaner import LogCleaner
        from storagecore.config import CleanerConfig, check_dedupe_buffer_size
        from storagecore.errors import ConfigError

        configs = log_dir_configs(args, only=args.topic)
    finally:
        gc.enable()
    undeclared = sorted(set(args.topic or ()) - configs.declared)
    if undeclared and not args.config:
        raise ConfigError(f"--topic {', '.join(undeclared)}: not declared in --topics")
    clock = ManualClock(SystemClock().milliseconds() if args.now_ms is None else args.now_ms)
    config = CleanerConfig(dedupe_buffer_size=args.dedupe_buffer_bytes)
    check_dedupe_buffer_size(config.dedupe_buffer_size, config.threads, key="--dedupe-buffer-bytes")
    with LogManager(
        [args.dir], config_for=configs.per_topic, default_config=configs.default, clock=clock
    ) as manager:
        absent = sorted(set(undeclared) - {tp.topic for tp in manager.logs})
        if absent:
            raise ConfigError(
                f"--topic {', '.join(absent)}: not declared in --topics and no log in {args.dir}"
            )
        cleaner = LogCleaner(manager, config)
        chosen = [tp for tp in manager.logs if args.topic is None or tp.topic in set(args.topic)]
        rounds = cleaner.clean_until_done(chosen)
        # The replaced segments: no reader can hold them (this process owns the dir's lock).
        deleter = SegmentFileDeleter(
            [s for log in manager.logs.values() for s in log.take_expired_files(force=True)]
        )
        try:
            uncleanable = cleaner.manager.uncleanable
            compacted = [tp for tp in chosen if manager.logs[tp].config.compact]
            print_clean_report(args.json, rounds, uncleanable, len(compacted))
            manager.shutdown(before_unlock=deleter.join)
        finally:
            deleter.join()  # an error on the way: still unlinked before the lock is released
    return 1 if uncleanable else 0


def print_clean_report(
    as_json: bool,
    rounds: Sequence[CleanerStats],
    uncleanable: Mapping[TopicPartition, str],
    compacted_partitions: int,
) -> None:
    if as_json:
        print(
            json.dumps(
                {
                    "rounds": [stats.as_dict() for stats in rounds],
                    "uncleanable": {str(tp): why for tp, why in uncleanable.items()},
                },
                indent=2,
            )
        )
        return
    for stats in rounds:
        print(stats.stats_line(0).strip("\n"))
    print(
        f"{len(rounds)} round(s) over {compacted_partitions} compacted partition(s); "
        f"{sum(s.bytes_read for s in rounds)} bytes read, "
        f"{sum(s.bytes_written for s in rounds)} written"
    )
    for tp, why in sorted(uncleanable.items()):
        print(f"{tp}: UNCLEANABLE: {why}")
