"""``logkeeper``: one console script, one subcommand per job.

Each subcommand imports what it needs inside its handler, so ``logkeeper dump-log`` never
imports kopf or pyspark. Errors from storagecore (bad input, corrupt files, locked dirs) are
printed as one ``logkeeper: error: ...`` line naming the thing, with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from logkeeper import consume, produce
from logkeeper.topic_args import add_dir_and_topics_args, log_dir_topics

EXAMPLES = """\
examples:
  logkeeper produce --dir data --topic orders < events.jsonl
  tail -f events.jsonl | logkeeper produce --dir data --topic orders --linger-ms 200
  logkeeper consume --dir data --topic orders --from 0
  logkeeper dump-log --records data/orders-0/00000000000000000000.log
  logkeeper verify --dir data
  logkeeper demo
"""


def build_parser() -> argparse.ArgumentParser:
    # The engine's config module (no kopf, pyspark or log I/O): the one home of its defaults.
    from storagecore.config import DEDUPE_BUFFER_SIZE_DEFAULT, DEDUPE_BUFFER_SIZE_MIN_PER_THREAD

    parser = argparse.ArgumentParser(
        prog="logkeeper",
        description="Kafka-format topic logs on local or Kubernetes volumes.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    produce.add_parser(sub)
    consume.add_parser(sub)

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

    p = sub.add_parser(
        "retention",
        help="apply retention (time, size, log start offset) to every log of a directory",
        description=(
            "Plans retention for every partition in --dir with the configs of --topics (Kafka's "
            "three passes: log start offset, retention.bytes, retention.ms) and applies it, or "
            "with --dry-run only prints it. Deleted segments are renamed .deleted and, since "
            "this command holds the directory's lock and no reader can have them open, "
            "removed before it exits."
        ),
    )
    add_dir_and_topics_args(p)
    p.add_argument(
        "--dry-run", action="store_true", help="only print what would be deleted and why"
    )
    p.add_argument("--now-ms", type=int, help="evaluate time retention as of this epoch-ms time")
    p.add_argument("--json", action="store_true", help="print the plans as JSON")

    p = sub.add_parser(
        "clean",
        help="compact every compacted log of a directory until nothing is cleanable",
        description=(
            "Runs Kafka's log cleaner over every partition in --dir whose topic (from --topics) "
            "has cleanup.policy compact: rounds until each dirty section up to the first "
            "uncleanable offset (active segment, min.compaction.lag.ms, open transactions) is "
            "clean, whatever min.cleanable.dirty.ratio says. Prints Kafka's stats line per "
            "round (or JSON stats) and updates cleaner-offset-checkpoint."
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

    p = sub.add_parser(
        "spark",
        help="PySpark jobs over log dirs: compact, snapshot, stats (needs the spark extra)",
        description=(
            "Runs a storagepipeline job on Spark (default local[2]; --master for a cluster, "
            "whose executors must see the same data dirs)."
        ),
    )
    jobs = p.add_subparsers(dest="job", required=True, metavar="JOB")

    def spark_args(
        job: argparse.ArgumentParser, *, several_dirs: bool, dir_required: bool = True
    ) -> None:
        job.add_argument(
            "--dir",
            required=dir_required,
            action="append" if several_dirs else "store",
            type=Path,
            help="data dir" + (" (repeatable: several volumes)" if several_dirs else ""),
        )
        job.add_argument("--topic", action="append", default=[], help="topic (repeatable)")
        job.add_argument("--master", default="local[2]", help="Spark master (default local[2])")

    j = jobs.add_parser(
        "compact",
        help="distributed compaction of a data dir no worker holds, or of a live worker's",
        description=(
            "Kafka's log cleaning, each partition cleaned on one executor by the storage core "
            "cleaner (the offset map as a Spark aggregation for partitions past --map-bytes); "
            "the result is swapped in with the crash-safe protocol. With --dir (no worker may "
            "hold it): topic configs come from --topics (cleanup.policy must include compact); "
            "without --topic, every partition whose declared topic is compacted is cleaned; a "
            "--topic not declared in --topics is compacted with Kafka's defaults. With --worker "
            "URL (its admin port): the worker pauses cleaning of the --topic/--partition "
            "partitions, plans and pins them, the executors (which must see the volume) write "
            "the cleaned segments, and the worker checks and swaps them in while it serves."
        ),
    )
    spark_args(j, several_dirs=False, dir_required=False)
    j.add_argument("--worker", help="a live worker's admin URL, e.g. http://127.0.0.1:8080")
    j.add_argument(
        "--partition", action="append", default=[], help="<topic>-<partition> (with --worker)"
    )
    j.add_argument("--token-file", type=Path, help="the worker's admin token (with --worker)")
    j.add_argument(
        "--map-bytes",
        type=int,
        default=128 << 20,
        help="one executor's offset map (default 128 MiB); partitions past it are aggregated",
    )
    j.add_argument("--topics", type=Path, help="YAML file of Topic manifests (spec.config)")
    j.add_argument("--now-ms", type=int, help="clean as of this epoch-ms time (horizons, lags)")
    j.add_argument("--json", action="store_true", help="print the per-partition stats as JSON")
    j = jobs.add_parser(
        "snapshot",
        help="export the live keys of topics as Parquet or Iceberg; later runs only the changes",
    )
    spark_args(j, several_dirs=True)
    j.add_argument(
        "--topic-pattern", help="topics matching this regex (with or instead of --topic)"
    )
    j.add_argument(
        "--output",
        required=True,
        type=Path,
        help="Parquet: the runs' directory (with a manifest); Iceberg: the default catalog's",
    )
    j.add_argument(
        "--format",
        choices=("parquet", "iceberg"),
        default="parquet",
        help="parquet (default): one table per run; iceberg: every run applied to one table",
    )
    j.add_argument("--table", default="logkeeper.snapshot", help="Iceberg table (namespace.name)")
    j.add_argument(
        "--catalog",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a pyiceberg catalog property (repeat; default: a SQLite catalog in --output)",
    )
    j.add_argument(
        "--allow-data-loss",
        action="store_true",
        help="export from the log start when records since the last run were deleted unseen",
    )
    j = jobs.add_parser("stats", help="per-partition figures: records, keys, tombstones, sizes")
    spark_args(j, several_dirs=True)
    j.add_argument(
        "--topic-pattern", help="topics matching this regex (with or instead of --topic)"
    )
    j.add_argument("--output", type=Path, help="also write the figures as Parquet here")
    j.add_argument("--json", action="store_true", help="print JSON instead of a table")

    p = sub.add_parser(
        "serve",
        help="run the per-volume worker over local directories until SIGTERM",
        description=(
            "Loads every log of the data directories (recovery as needed), creates the "
            "declared partitions, and runs retention, the cleaner threads, flushes, "
            "checkpoints and delayed deletes on their intervals. The topic set and the "
            "settings are re-read while running; a broken file keeps the last good one. "
            "HTTP: /healthz /readyz /metrics /v1/status and admin POSTs."
        ),
    )
    p.add_argument(
        "--data-dir",
        action="append",
        required=True,
        type=Path,
        help="a log directory of the volume (repeatable)",
    )
    p.add_argument(
        "--topics",
        required=True,
        type=Path,
        help="a YAML file of Topic manifests, or a directory of them (a mounted ConfigMap)",
    )
    p.add_argument(
        "--settings", type=Path, help="volume settings: a StorageVolume manifest or its spec"
    )
    p.add_argument("--http-port", type=int, default=8080, help="HTTP port (default 8080; 0: any)")
    p.add_argument(
        "--kafka-port",
        type=int,
        default=None,
        help="Kafka protocol port (e.g. 9092; 0: any; default: no Kafka listener)",
    )
    p.add_argument(
        "--kafka-host",
        default=None,
        help="address of the Kafka listener (default: --http-host)",
    )
    p.add_argument(
        "--kafka-advertised-host",
        default=None,
        help="host name clients are told to connect to (default: the listen address)",
    )
    p.add_argument("--kafka-tls-cert", type=Path, help="PEM certificate chain: serve TLS")
    p.add_argument("--kafka-tls-key", type=Path, help="PEM private key of --kafka-tls-cert")
    p.add_argument(
        "--kafka-tls-client-ca", type=Path, help="PEM CA: require client certificates (mTLS)"
    )
    p.add_argument(
        "--kafka-sasl-users",
        type=Path,
        help="YAML/JSON mapping of user name to password: require SASL authentication",
    )
    p.add_argument(
        "--kafka-sasl-mechanisms",
        default="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        help="SASL mechanisms offered (default: PLAIN,SCRAM-SHA-256,SCRAM-SHA-512)",
    )
    p.add_argument(
        "--kafka-allow-plaintext",
        action="store_true",
        help="serve without TLS or SASL on a non-loopback address (a private network)",
    )
    p.add_argument("--kafka-max-connections", type=int, default=1000, help="default 1000")
    p.add_argument(
        "--kafka-request-timeout-ms",
        type=int,
        default=30_000,
        help="a request must arrive, and a response be taken, within this (default 30000)",
    )
    p.add_argument(
        "--kafka-offsets-topic-partitions",
        type=int,
        default=10,
        help="partitions of __consumer_offsets (default 10; never change it later)",
    )
    p.add_argument(
        "--kafka-transaction-state-partitions",
        type=int,
        default=10,
        help="partitions of __transaction_state (default 10; never change it later)",
    )
    p.add_argument(
        "--kafka-transaction-max-timeout-ms",
        type=int,
        default=900_000,
        help="longest transaction.timeout.ms a producer may ask for (default 900000)",
    )
    p.add_argument(
        "--kafka-transaction-abort-interval-ms",
        type=int,
        default=10_000,
        help="how often timed-out transactions are aborted (default 10000)",
    )
    p.add_argument(
        "--http-host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; 0.0.0.0 in a pod, with an admin token)",
    )

    p = sub.add_parser(
        "operator",
        help="run the Kubernetes operator (StorageVolume and Topic resources)",
        description=(
            "Reconciles StorageVolume and Topic resources into per-volume workers and keeps "
            "their status (kopf). Uses the in-cluster service account, else the kubeconfig. "
            "Environment: LOGKEEPER_WORKER_IMAGE (the worker image), "
            "LOGKEEPER_STATUS_INTERVAL_S (how often worker status is read, default 15), "
            "LOGKEEPER_DELETE_WAIT_S (default 120), LOGKEEPER_NETWORK_POLICY_ENABLED (a "
            "NetworkPolicy per worker, default true), "
            "LOGKEEPER_NETWORK_POLICY_METRICS_NAMESPACES (comma-separated namespaces that may "
            "reach the workers' HTTP port, default monitoring), LOGKEEPER_OPERATOR_NAMESPACE "
            "and LOGKEEPER_OPERATOR_POD_LABELS (key=value,...: how the policies admit this "
            "operator's pod)."
        ),
    )
    p.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="namespace to watch (repeatable; default: all namespaces)",
    )
    p.add_argument(
        "--liveness",
        default=None,
        metavar="URL",
        help="serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz",
    )
    p.add_argument(
        "--metrics-address",
        default=None,
        metavar="HOST:PORT",
        help="serve the operator's Prometheus metrics (/metrics) there, e.g. 0.0.0.0:9090 "
        "(default: not served)",
    )

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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from storagecore.errors import ConfigError, StorageError

    handlers = {
        "produce": produce.cmd_produce,
        "consume": consume.cmd_consume,
        "dump-log": cmd_dump_log,
        "verify": cmd_verify,
        "retention": cmd_retention,
        "clean": cmd_clean,
        "serve": cmd_serve,
        "operator": cmd_operator,
        "demo": cmd_demo,
        "spark": cmd_spark,
    }
    try:
        return handlers[args.command](args)
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


def cmd_retention(args: argparse.Namespace) -> int:
    from storagecore import LogManager, ManualClock, SystemClock

    topics = log_dir_topics(args)
    now_ms = SystemClock().milliseconds() if args.now_ms is None else args.now_ms
    clock = ManualClock(now_ms)
    with LogManager(
        [args.dir], config_for={n: t.config for n, t in topics.items()}, clock=clock
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


def cmd_clean(args: argparse.Namespace) -> int:
    from storagecore import LogManager, ManualClock, SystemClock
    from storagecore.cleaner.log_cleaner import LogCleaner
    from storagecore.config import CleanerConfig, check_dedupe_buffer_size
    from storagecore.errors import ConfigError

    topics = log_dir_topics(args)
    unknown = sorted(set(args.topic or ()) - set(topics))
    if unknown:
        raise ConfigError(f"--topic {', '.join(unknown)}: not declared in --topics")
    clock = ManualClock(SystemClock().milliseconds() if args.now_ms is None else args.now_ms)
    config = CleanerConfig(dedupe_buffer_size=args.dedupe_buffer_bytes)
    check_dedupe_buffer_size(config.dedupe_buffer_size, config.threads, key="--dedupe-buffer-bytes")
    with LogManager(
        [args.dir], config_for={n: t.config for n, t in topics.items()}, clock=clock
    ) as manager:
        cleaner = LogCleaner(manager, config)
        chosen = [tp for tp in manager.logs if args.topic is None or tp.topic in set(args.topic)]
        rounds = cleaner.clean_until_done(chosen)
        for log in manager.logs.values():
            log.delete_expired_files(force=True)  # no reader can hold them: we own the lock
        uncleanable = cleaner.manager.uncleanable
        if args.json:
            print(
                json.dumps(
                    {
                        "rounds": [stats.as_dict() for stats in rounds],
                        "uncleanable": {str(tp): why for tp, why in uncleanable.items()},
                    },
                    indent=2,
                )
            )
        else:
            for stats in rounds:
                print(stats.stats_line(0).strip("\n"))
            compacted = [tp for tp in chosen if manager.logs[tp].config.compact]
            print(
                f"{len(rounds)} round(s) over {len(compacted)} compacted partition(s); "
                f"{sum(s.bytes_read for s in rounds)} bytes read, "
                f"{sum(s.bytes_written for s in rounds)} written"
            )
            for tp, why in sorted(uncleanable.items()):
                print(f"{tp}: UNCLEANABLE: {why}")
    return 1 if uncleanable else 0


def cmd_spark(args: argparse.Namespace) -> int:
    from logkeeper.spark_jobs import run_job

    return run_job(args)


def cmd_serve(args: argparse.Namespace) -> int:
    from storagecore.errors import ConfigError
    from storageworker.kafka.listener_settings import ListenerSettings
    from storageworker.kafka.sasl import load_users
    from storageworker.serve import serve

    level = str(args.log_level).upper()
    kafka = None
    if args.kafka_port is not None:
        try:
            kafka = ListenerSettings(
                host=args.kafka_host or args.http_host,
                port=args.kafka_port,
                advertised_host=args.kafka_advertised_host,
                max_connections=args.kafka_max_connections,
                request_timeout_ms=args.kafka_request_timeout_ms,
                tls_cert_file=args.kafka_tls_cert,
                tls_key_file=args.kafka_tls_key,
                tls_client_ca_file=args.kafka_tls_client_ca,
                sasl_users=load_users(args.kafka_sasl_users) if args.kafka_sasl_users else None,
                sasl_mechanisms=tuple(
                    m.strip() for m in args.kafka_sasl_mechanisms.split(",") if m.strip()
                ),
                allow_plaintext=args.kafka_allow_plaintext,
                offsets_topic_partitions=args.kafka_offsets_topic_partitions,
                transaction_state_partitions=args.kafka_transaction_state_partitions,
                transaction_max_timeout_ms=args.kafka_transaction_max_timeout_ms,
                transaction_abort_interval_ms=args.kafka_transaction_abort_interval_ms,
            )
            kafka.check()
        except ConfigError as exc:
            print(f"logkeeper serve: error: {exc}", file=sys.stderr)
            return 2
    return serve(
        args.data_dir,
        args.topics,
        args.settings,
        http_host=args.http_host,
        http_port=args.http_port,
        kafka=kafka,
        log_level="INFO" if level == "WARNING" else level,
    )


def cmd_operator(args: argparse.Namespace) -> int:
    from storageoperator.main import run

    return run(
        args.namespace, liveness_endpoint=args.liveness, metrics_address=args.metrics_address
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from logkeeper.demo import run_demo

    return run_demo(args.dir, records=args.records, linger_s=args.linger)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
