"""``logkeeper spark compact|snapshot|stats``: the PySpark jobs behind the console script.

Imported by :func:`logkeeper.cli.cmd_spark` only when a spark subcommand runs, and it imports
pyspark only inside :func:`run_job` (the spark extra may be absent: that is a ConfigError naming
the extra). The parser's flags are built in :mod:`logkeeper.cli`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from logkeeper.topic_args import log_dir_topics


def run_job(args: argparse.Namespace) -> int:
    """Run ``args.job`` on a session of ``args.master``, stopped at the end."""
    from storagecore.errors import ConfigError

    try:
        from storagepipeline import PipelineError, local_session
        from storagepipeline.compact import compact
        from storagepipeline.iceberg import catalog_properties
        from storagepipeline.jobs import format_table, snapshot, stats
    except ImportError as exc:
        raise ConfigError(
            f"logkeeper spark needs the spark extra (pip install 'logkeeper[spark]'): {exc}"
        ) from exc
    if args.job == "compact" and (args.dir is None) == (args.worker is None):
        raise ConfigError("give exactly one of --dir (offline) and --worker (online)")
    try:  # checked before the JVM starts
        catalog = catalog_properties(args.catalog) if args.job == "snapshot" else None
    except PipelineError as exc:
        raise ConfigError(str(exc)) from exc
    spark = local_session(args.master, f"logkeeper-{args.job}")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if args.job == "compact":
            if args.worker is not None:
                from storagepipeline.online_compact import compact_online

                token = args.token_file.read_text().strip() if args.token_file else None
                results = compact_online(
                    spark,
                    args.worker,
                    topics=args.topic,
                    partitions=args.partition,
                    map_bytes=args.map_bytes,
                    token=token,
                )
            else:
                configs = {name: t.config for name, t in log_dir_topics(args).items()}
                results = compact(
                    spark,
                    str(args.dir),
                    topics=args.topic,
                    configs=configs,
                    now_ms=args.now_ms,
                    map_bytes=args.map_bytes,
                )
            if args.json:
                print(json.dumps([dataclasses.asdict(r) for r in results], indent=2))
            for r in results if not args.json else ():
                print(
                    f"{r.topic}-{r.partition}: cleaned [{r.first_dirty_offset}, {r.end_offset}) "
                    f"in {r.groups} group(s): {r.stats['messages_read']} records read, "
                    f"{r.stats['messages_written']} kept, {r.stats['bytes_read']} -> "
                    f"{r.stats['bytes_written']} bytes ({r.stats['path']} path"
                    + (f", {r.stats['swap']})" if "swap" in r.stats else ")")
                )
        elif args.job == "snapshot":
            run = snapshot(
                spark,
                [str(d) for d in args.dir],
                str(args.output),
                topics=args.topic,
                pattern=args.topic_pattern,
                fail_on_data_loss=not args.allow_data_loss,
                table_format=args.format,
                table=args.table,
                catalog=catalog,
            )
            print(
                f"{run.kind} snapshot {run.run_id}: {run.rows} row(s), {run.deletes} delete(s) "
                f"-> {run.path}"
            )
        else:
            rows = stats(
                spark,
                [str(d) for d in args.dir],
                topics=args.topic,
                pattern=args.topic_pattern,
                output=None if args.output is None else str(args.output),
            )
            print(json.dumps(rows, indent=2, default=str) if args.json else format_table(rows))
    except PipelineError as exc:
        raise ConfigError(str(exc)) from exc
    finally:
        spark.stop()
    return 0
