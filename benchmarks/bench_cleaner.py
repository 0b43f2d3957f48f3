"""The cleaner beside Kafka's own classes on the same bytes, in one run.

    .venv/bin/python benchmarks/bench_cleaner.py [--records 2000000] [--keys 100000] [--runs 3]
        [--big] [--no-kafka] [--no-callgrind]

The standard log (issue 3): ``--records`` records with 16-byte keys drawn from ``--keys``
distinct keys and 100-byte values, in batches of 100 records, uncompressed and lz4, written by
storagecore into one segment (segment.bytes 1 GiB, Kafka's default) and rolled. Printed, per
codec, records/s and MB/s (of the segment's bytes) of one cleaning round over the whole log:

* Kafka: Kafka 4.3.1's own classes on a copy-free read of that segment file (the harness in
  ``kafka_anchor/``: SkimpyOffsetMap with MD5 filled from every key, ``MemoryRecords.filterTo``
  with Cleaner's retention rule, the output appended to a ``FileRecords`` and flushed), warm JIT:
  ``--kafka-forks`` JVMs one after the other (the JIT's choices differ between JVMs), each
  timing ``--kafka-runs`` rounds after ``--kafka-warmup`` untimed ones, on a fixed, pre-touched
  heap with a collection between rounds. Every ratio is to the best of all those rounds (Kafka
  at its best); the median and slowest warm rounds and the first (cold JIT) round are printed
  below it as Kafka's spread, and each of our lines gives its ratio to Kafka's median too;
* ours in-process: ``Cleaner(offset_map=SkimpyOffsetMap(128 MiB)).clean(CleanRequest(...))`` on a
  fresh copy of the same log directory each run (the copy is not timed, and is written back
  before the round: :func:`fresh_copy`), best of ``--runs``;
  the round includes what Kafka's harness leaves out (indexes, swap, checkpoint-ready stats);
* ``logkeeper clean`` as a whole process (interpreter start, imports, loading the log, the
  round, the swap, exit) on a fresh copy, wall time of the subprocess, best of ``--runs``; the
  packages are byte-compiled first, as an installed wheel has them; measured both ways the
  topic's config can be given, in turns within the same run: ``--topics`` (a Topic manifest,
  parsed with PyYAML) and ``--config cleanup.policy=compact --config segment.bytes=...`` (the
  same config, no YAML);

with the ratio to Kafka's warm figure and whether our cleaned segment is byte-identical to
Kafka's output. Then (``--big``) the peak RSS of ``logkeeper clean`` over a log of
``--big-keys`` distinct keys with a dedupe buffer small enough to need several rounds, against
the bound dedupe buffer + 64 MiB; and (unless ``--no-callgrind``) instructions per record of a
small clean under ``valgrind --tool=callgrind`` (``--callgrind-records`` records, as many per
key as the standard log): the Python process is run twice on the same log, once cleaning and
once doing everything but the clean, and the difference of the two instruction totals is
divided by the records (interpreter start-up and imports cancel out).

Targets (issue): in-process >= 3x Kafka's records/s and >= 5M records/s uncompressed;
``logkeeper clean`` as a process >= 3x Kafka on the standard log; peak RSS <= dedupe buffer +
64 MiB. Timings are printed beside their targets with ok/BELOW and never asserted: the machine
is shared, only the callgrind counts are stable from run to run.

The first line says which implementation of the per-record work ran (``c``: the native path of
storagecore.cleaner._native; ``python`` with STORAGECORE_NO_EXTENSIONS=1).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kafka_anchor
from callgrind import callgrind_total

from storagecore import Compression, LogConfig, LogManager, NewRecord, TopicPartition, build_batch
from storagecore.cleaner import Cleaner, CleanRequest
from storagecore.cleaner.offset_map import IMPLEMENTATION, SkimpyOffsetMap

TOPIC = "bench"
TP = TopicPartition(TOPIC, 0)
BATCH_RECORDS = 100
VALUE = bytes(range(100))
SEGMENT_BYTES = 1 << 30  # Kafka's default segment.bytes: the standard log is one segment
MAP_BYTES = 128 << 20  # log.cleaner.dedupe.buffer.size default, both sides
RSS_SLACK_BYTES = 64 << 20  # the bound: dedupe buffer + 64 MiB
CONFIG = LogConfig(cleanup_policy=("compact",), segment_bytes=SEGMENT_BYTES)
TOPICS_YAML = f"""\
apiVersion: logkeeper.io/v1alpha1
kind: Topic
metadata:
  name: {TOPIC}
spec:
  partitions: 1
  config:
    cleanup.policy: compact
    segment.bytes: {SEGMENT_BYTES}
"""
# The same config as --config assignments (the process then imports no YAML parser).
CONFIG_ARGS = (
    "--config", "cleanup.policy=compact", "--config", f"segment.bytes={SEGMENT_BYTES}",
)  # fmt: skip
# Targets (issue): ratios to Kafka's warm records/s, absolute records/s, memory.
IN_PROCESS_RATIO_MIN = 3.0
IN_PROCESS_RECORDS_PER_S_MIN = 5_000_000
PROCESS_RATIO_MIN = 3.0


def build_log(
    root: Path, records: int, keys: int, codec: Compression, *, distinct: bool = False
) -> Path:
    """The standard log under ``root`` (a data dir): keys drawn at random from ``keys``, or with
    ``distinct`` one record per key, in order. Returns the partition directory."""
    rng = random.Random(7)
    with LogManager([root], default_config=CONFIG) as manager:
        log = manager.get_or_create_log(TP)
        for first in range(0, records, BATCH_RECORDS):
            count = min(BATCH_RECORDS, records - first)
            numbers = (
                range(first, first + count)
                if distinct
                else [rng.randrange(keys) for _ in range(count)]
            )
            batch = [NewRecord(key=b"key-%012d" % n, value=VALUE, timestamp=first) for n in numbers]
            log.append(build_batch(batch, compression=codec))
        log.roll()
        log.flush()
        return log.directory


def segment_files(partition_dir: Path) -> list[Path]:
    """The non-empty segment files (the rolled active segment is empty)."""
    return [p for p in sorted(partition_dir.glob("*.log")) if p.stat().st_size > 0]


def sha256(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in paths:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()


@dataclasses.dataclass
class Ours:
    best_s: float
    records: int
    bytes_read: int
    cleaned_sha256: str


def fresh_copy(data: Path, work: Path) -> None:
    """An untimed copy of the data dir, written back before the timed part starts: otherwise
    the kernel writes the copy's 250 MB of dirty pages during the clean that follows (measured
    2026-11-28: the same ``logkeeper clean`` took 0.48-0.99 s from one copy to the next)."""
    shutil.copytree(data, work)
    os.sync()


def clean_in_process(data: Path, work: Path, runs: int) -> Ours:
    """Best of ``runs`` rounds, each on a fresh (untimed) copy of the data dir."""
    best = float("inf")
    records = bytes_read = 0
    digest = ""
    for _ in range(runs):
        fresh_copy(data, work)
        with LogManager([work], default_config=CONFIG) as manager:
            log = manager.get_log(TP)
            cleaner = Cleaner(offset_map=SkimpyOffsetMap(MAP_BYTES))
            start = time.perf_counter()
            stats = cleaner.clean(CleanRequest(log, 0, log.active_segment.base_offset))
            best = min(best, time.perf_counter() - start)
            records, bytes_read = stats.messages_read, stats.bytes_read
            cleaned = [s.log.path for s in log.segments if s.size_bytes > 0]
            digest = sha256(cleaned)
        shutil.rmtree(work)
    return Ours(best, records, bytes_read, digest)


def compile_bytecode() -> None:
    """Byte-compile the project's packages as an installed wheel has them (pip compiles what it
    installs; an editable install under PYTHONDONTWRITEBYTECODE=1 never does), so that the
    process figure is the command's and not the compiler's. Writes ``__pycache__`` (ignored)."""
    project = Path(__file__).resolve().parent.parent
    packages = [str(project / name) for name in ("storagecore", "logkeeper", "storageworker")]
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *packages],
        check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""},
    )


def logkeeper_command() -> list[str]:
    script = Path(sys.executable).with_name("logkeeper")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "logkeeper.cli"]


# Linux carries a process's peak RSS across exec, and a child that Python's subprocess starts
# (vfork, or fork) begins with this benchmark's own peak (its 128 MiB maps). So the measured
# process is started from a small intermediate Python process, which forks it, waits for it
# with wait4 and writes its own ru_maxrss (KiB) to a file.
RSS_PROBE = """\
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def config_args(topics: Path | None) -> list[str]:
    """The topic's config for ``logkeeper clean``: the manifest file, or (None) CONFIG_ARGS."""
    return ["--topics", str(topics)] if topics is not None else list(CONFIG_ARGS)


def run_logkeeper_clean(
    work: Path, topics: Path | None, dedupe_bytes: int, *, peak_rss: bool = False
) -> tuple[float, int, str]:
    """Wall time, peak RSS in bytes (0 unless ``peak_rss``) and stdout (the ``--json`` report)
    of one ``logkeeper clean`` process, given the manifest ``topics`` or (None) the --config
    assignments."""
    command = [
        *logkeeper_command(), "clean", "--dir", str(work), *config_args(topics),
        "--dedupe-buffer-bytes", str(dedupe_bytes), "--json",
    ]  # fmt: skip
    rss_file = work.parent / "logkeeper-clean.maxrss"
    if peak_rss:
        command = [sys.executable, "-c", RSS_PROBE, str(rss_file), *command]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr}")
    rss = 0
    if peak_rss:
        rss = int(rss_file.read_text()) * 1024
        rss_file.unlink()
    return elapsed, rss, done.stdout


@dataclasses.dataclass
class Process:
    """The best of one way's ``logkeeper clean`` processes."""

    best_s: float
    #: The rounds' own time in that process, as the command reports it (``duration_seconds``):
    #: the rest of the wall time is start-up, imports, loading the log, the unlink of the
    #: replaced segment (Kafka deletes it file.delete.delay.ms later) and exit.
    rounds_s: float
    cleaned_sha256: str


def clean_process(data: Path, work: Path, topics: Path, runs: int) -> dict[bool, Process]:
    """Best wall times of ``runs`` ``logkeeper clean`` processes with ``--topics`` (key True)
    and as many with ``--config`` (False), taken in turns, each on a fresh copy, with the
    digests of the cleaned segments (to check that the processes did the same work)."""
    best: dict[bool, Process] = {}
    for _ in range(runs):
        for manifest in (True, False):
            fresh_copy(data, work)
            elapsed, _, out = run_logkeeper_clean(work, topics if manifest else None, MAP_BYTES)
            if manifest not in best or elapsed < best[manifest].best_s:
                rounds = json.loads(out)["rounds"]
                partition = work / f"{TP.topic}-{TP.partition}"
                best[manifest] = Process(
                    elapsed,
                    sum(r["duration_seconds"] for r in rounds),
                    sha256(segment_files(partition)),
                )
            shutil.rmtree(work)
    return best


def verdict(ok: bool) -> str:
    return "ok" if ok else "BELOW"


def compare_codec(root: Path, args: argparse.Namespace, codec: Compression) -> list[str]:
    """The standard log in one codec: Kafka, ours in-process, ours as a process."""
    name = codec.config_name
    data = root / f"data-{name}"
    partition = build_log(data, args.records, args.keys, codec)
    segments = segment_files(partition)
    size = sum(p.stat().st_size for p in segments)
    topics = root / "topics.yaml"
    topics.write_text(TOPICS_YAML)
    lines = [
        f"{name}: {args.records} records in {len(segments)} segment(s), {size} bytes",
        f"  {'one round over the whole log':34}{'records/s':>12}{'MB/s':>9}{'/Kafka':>8}",
    ]
    kafka = None
    if not args.no_kafka:
        kafka = kafka_anchor.kafka_clean(
            segments,
            root,
            map_bytes=MAP_BYTES,
            runs=args.kafka_runs,
            warmup=args.kafka_warmup,
            forks=args.kafka_forks,
            keep_output=True,
        )
        assert kafka.records == args.records, (kafka.records, args.records)
        lines.append(
            f"  {'Kafka 4.3.1 classes, warm JIT':34}{kafka.records_per_s:>12,.0f}"
            f"{kafka.mb_per_s:>9.1f}{'1.00':>8}  best of {len(kafka.times_s)}"
        )
        for label, seconds in (
            ("  (its median warm round)", kafka.median_s),
            ("  (its slowest warm round)", kafka.worst_s),
            ("  (its first round, cold JIT)", kafka.first_s),
        ):
            lines.append(
                f"  {label:34}{kafka.records / seconds:>12,.0f}"
                f"{kafka.bytes_read / seconds / 1e6:>9.1f}{kafka.best_s / seconds:>8.2f}"
            )
    ours = clean_in_process(data, root / "work", args.runs)
    assert ours.records == args.records, (ours.records, args.records)
    processes = clean_process(data, root / "work", topics, args.runs)
    process_s, process_sha256 = processes[True].best_s, processes[True].cleaned_sha256
    config_s, config_sha256 = processes[False].best_s, processes[False].cleaned_sha256
    for label, seconds, ratio_min, absolute_min in (
        ("ours, in-process Cleaner.clean", ours.best_s, IN_PROCESS_RATIO_MIN,
         IN_PROCESS_RECORDS_PER_S_MIN if codec is Compression.NONE else None),
        ("ours, process clean --topics", process_s, PROCESS_RATIO_MIN, None),
        ("ours, process clean --config", config_s, PROCESS_RATIO_MIN, None),
    ):  # fmt: skip
        records_per_s = args.records / seconds
        line = f"  {label:34}{records_per_s:>12,.0f}{size / seconds / 1e6:>9.1f}"
        targets = []
        if kafka is not None:
            ratio = kafka.best_s / seconds
            line += f"{ratio:>8.2f}"
            targets.append(
                f">= {ratio_min:.0f}x Kafka's best {verdict(ratio >= ratio_min)} "
                f"({kafka.median_s / seconds:.2f}x its median)"
            )
        else:
            line += f"{'-':>8}"
        if absolute_min is not None:
            targets.append(
                f">= {absolute_min / 1e6:.0f}M rec/s {verdict(records_per_s >= absolute_min)}"
            )
        lines.append((line + "  " + "; ".join(targets)).rstrip())
    for way, process in (("--topics", processes[True]), ("--config", processes[False])):
        lines.append(
            f"    (the best {way} process, {process.best_s:.3f} s: its round "
            f"{process.rounds_s:.3f} s; start-up, imports, loading, the unlink of the replaced "
            f"segment and exit {process.best_s - process.rounds_s:.3f} s)"
        )
    if kafka is not None and kafka.output is not None:
        expected = sha256([kafka.output])
        same = [
            f"{'yes' if digest == expected else 'NO'} ({side})"
            for side, digest in (
                ("in-process", ours.cleaned_sha256),
                ("process --topics", process_sha256),
                ("process --config", config_sha256),
            )
        ]
        lines.append(
            f"  cleaned segment byte-identical to Kafka's filterTo output: {', '.join(same)}; "
            f"{kafka.retained_records} of {kafka.records} records kept, "
            f"{kafka.retained_bytes} bytes"
        )
        kafka.output.unlink()
    elif {process_sha256, config_sha256} != {ours.cleaned_sha256}:
        lines.append("  a `logkeeper clean` process left other bytes than the in-process clean")
    shutil.rmtree(data)
    return lines


def big_rss(root: Path, keys: int, dedupe_bytes: int) -> str:
    """Peak RSS of ``logkeeper clean`` over ``keys`` distinct keys in several rounds."""
    data = root / "data-big"
    build_log(data, keys, keys, Compression.NONE, distinct=True)
    topics = root / "topics.yaml"
    topics.write_text(TOPICS_YAML)
    elapsed, rss, out = run_logkeeper_clean(data, topics, dedupe_bytes, peak_rss=True)
    shutil.rmtree(data)
    rounds = len(json.loads(out)["rounds"])
    bound = dedupe_bytes + RSS_SLACK_BYTES
    return (
        f"peak RSS of `logkeeper clean`, {keys:,} distinct keys, dedupe buffer "
        f"{dedupe_bytes / (1 << 20):.1f} MiB, {rounds} round(s) in {elapsed:.1f} s: "
        f"{rss / (1 << 20):.1f} MiB; bound {bound / (1 << 20):.1f} MiB (buffer + 64 MiB) "
        f"{'ok' if rss <= bound else 'OVER'}"
    )


# -- instructions per record (callgrind) --------------------------------------------------------
CALLGRIND_MAP_BYTES = 8 << 20


def callgrind_child(data: Path, clean: bool) -> None:
    """Run under callgrind: open the log and (with ``clean``) clean it; nothing else."""
    with LogManager([data], default_config=CONFIG) as manager:
        log = manager.get_log(TP)
        cleaner = Cleaner(offset_map=SkimpyOffsetMap(CALLGRIND_MAP_BYTES))
        request = CleanRequest(log, 0, log.active_segment.base_offset)
        if clean:
            cleaner.clean(request)


def instructions_per_record(root: Path, records: int, keys: int, codec: Compression) -> float:
    data = root / f"data-callgrind-{codec.config_name}"
    build_log(data, records, keys, codec)
    totals = {}
    for mode in ("baseline", "clean"):
        work = root / "work-callgrind"
        shutil.copytree(data, work)
        command = [sys.executable, __file__, "--callgrind-child", mode, "--dir", str(work)]
        totals[mode] = callgrind_total(command, root / f"callgrind.{mode}.out")
        shutil.rmtree(work)
    shutil.rmtree(data)
    return (totals["clean"] - totals["baseline"]) / records


# The clean's own modules, imported by the whole-process figure's third run (what the process
# imports besides the interpreter's start-up); with --topics it imports yaml as well.
CLEAN_IMPORTS = "import logkeeper.cli, storagecore.log_manager, storagecore.cleaner.log_cleaner"


def process_instructions(root: Path, records: int, keys: int) -> str:
    """Instructions of the whole ``logkeeper clean`` process on a small uncompressed log, with
    --topics and with --config, beside those of an interpreter that only starts and of one that
    only imports what the clean imports: the noise-free view of the process figures (start-up
    is most of them here)."""
    data = root / "data-callgrind-process"
    build_log(data, records, keys, Compression.NONE)
    topics = root / "topics.yaml"
    topics.write_text(TOPICS_YAML)
    start = callgrind_total([sys.executable, "-c", "pass"], root / "callgrind.start.out")
    lines = []
    for given, imported in ((topics, f"{CLEAN_IMPORTS}, yaml"), (None, CLEAN_IMPORTS)):
        work = root / "work-callgrind-process"
        shutil.copytree(data, work)
        command = [
            *logkeeper_command(), "clean", "--dir", str(work), *config_args(given),
            "--dedupe-buffer-bytes", str(MAP_BYTES),
        ]  # fmt: skip
        whole = callgrind_total(command, root / "callgrind.process.out")
        shutil.rmtree(work)
        imports = callgrind_total([sys.executable, "-c", imported], root / "callgrind.imp.out")
        way = "--topics" if given is not None else "--config"
        lines.append(
            f"callgrind, whole `logkeeper clean {way}` process on {records} records ({keys} "
            f"keys) none: {whole / 1e6:,.0f}M instructions; interpreter start "
            f"{start / 1e6:,.0f}M, + the clean's imports {(imports - start) / 1e6:,.0f}M, "
            f"+ the rest (parse, load, clean, swap, exit) {(whole - imports) / 1e6:,.0f}M"
        )
    shutil.rmtree(data)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="best of N runs per figure")
    parser.add_argument("--no-kafka", action="store_true", help="skip Kafka's harness")
    parser.add_argument(
        "--kafka-forks", type=int, default=3, help="JVMs of Kafka's harness, one after the other"
    )
    parser.add_argument("--kafka-warmup", type=int, default=5, help="untimed rounds per JVM")
    parser.add_argument("--kafka-runs", type=int, default=5, help="timed rounds per JVM")
    parser.add_argument("--big", action="store_true", help="measure the peak RSS (slow)")
    parser.add_argument("--big-keys", type=int, default=10_000_000)
    parser.add_argument("--big-dedupe-bytes", type=int, default=64 << 20)
    parser.add_argument("--no-callgrind", action="store_true")
    parser.add_argument("--callgrind-records", type=int, default=50_000)
    parser.add_argument("--callgrind-child", choices=("baseline", "clean"), help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.callgrind_child:
        callgrind_child(args.dir, args.callgrind_child == "clean")
        return
    if not args.no_kafka and (missing := kafka_anchor.missing_tools()):
        parser.error(f"Kafka's harness needs {', '.join(missing)} on PATH (or pass --no-kafka)")
    print(
        f"cleaner record work: {IMPLEMENTATION}; {args.records} records, {args.keys} distinct "
        f"16-byte keys, 100-byte values, {BATCH_RECORDS}-record batches; best of {args.runs}"
    )
    compile_bytecode()
    root = Path(tempfile.mkdtemp(prefix="bench-cleaner-", dir=os.environ.get("BENCH_DIR")))
    try:
        for codec in (Compression.NONE, Compression.LZ4):
            for line in compare_codec(root, args, codec):
                print(line, flush=True)
        if args.big:
            print(big_rss(root, args.big_keys, args.big_dedupe_bytes), flush=True)
        if not args.no_callgrind:
            if shutil.which("valgrind") is None:
                print("callgrind: valgrind not on PATH, skipped")
            else:
                # As many records per key as the standard log (20 with the defaults).
                keys = max(1, args.callgrind_records * args.keys // args.records)
                for codec in (Compression.NONE, Compression.LZ4):
                    per_record = instructions_per_record(root, args.callgrind_records, keys, codec)
                    print(
                        f"callgrind, clean of {args.callgrind_records} records ({keys} keys) "
                        f"{codec.config_name}: {per_record:,.0f} instructions per record "
                        "(Ir of the clean minus Ir of the same process without it)",
                        flush=True,
                    )
                print(process_instructions(root, args.callgrind_records, keys), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
