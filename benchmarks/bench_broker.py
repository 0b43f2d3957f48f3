"""The worker beside Apache Kafka's broker: the same clients against both, in one run.

    .venv/bin/python benchmarks/bench_broker.py [--mib 64] [--rounds 1] [--only worker|broker]

Starts the real broker (KRaft, single node, :class:`tests.kafka_support.broker.KafkaBroker`,
Kafka 4.3.1 from ``tests/kafka_support/pom.xml``) and ``logkeeper serve`` on loopback, each over
its own temporary directory, each with the same topics (one partition, no retention, 1 GiB
segments). Then, for each client below, the broker and the worker in turn (alternating, so
that the machine's other load falls on both alike):

* ``java 1KiB``: Kafka's Java producer with its default settings (acks=all, 16 KiB batches,
  linger.ms 5, no compression) through Kafka's own ``ProducerPerformance``
  (kafka-producer-perf-test.sh), 1 KiB random values; its own MB/s figure. Then Kafka's Java
  consumer with its defaults (``ConsumerPerformance``, kafka-consumer-perf-test.sh: subscribe
  in a group, fetch to the end) reads them back: its MB/s.
* ``kcat 100B`` and ``kcat 1KiB``: librdkafka (kcat, C) with its defaults (acks=all, linger.ms
  5, 1 MiB batches, no compression) produces values from a file, one per line, then kcat
  reads them back to the end; wall time of the kcat process, values only.

Printed: MB/s of values (10^6 bytes) per client and target, and worker / broker: issue 18's
target is >= 0.80 for each. The machine is shared (2 cores, other engineers' tests): figures
are noisy, and only the ratios of one run mean anything; ``--rounds`` repeats and prints each.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.kafka_support import maven
from tests.kafka_support.broker import KafkaBroker

JAVA_OPTIONS = ("-Xmx512m", "-XX:+UseSerialGC")
TOPICS = ("java-1k", "kcat-100", "kcat-1k")
TOPIC_CONFIG = {"retention.ms": "-1", "segment.bytes": str(1 << 30)}
SETTINGS = "retentionCheckIntervalMs: 600000\ncleaner: {threads: 1}\n"


def start_worker(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``logkeeper serve`` over ``root`` with :data:`TOPICS`; (process, kafka address)."""
    root.mkdir(parents=True, exist_ok=True)
    config = "".join(f'    {key}: "{value}"\n' for key, value in TOPIC_CONFIG.items())
    (root / "topics.yaml").write_text(
        "---\n".join(
            "apiVersion: logkeeper.io/v1alpha1\nkind: Topic\n"
            f"metadata: {{name: {name}}}\nspec:\n  partitions: 1\n  config:\n{config}"
            for name in TOPICS
        ),
        encoding="utf-8",
    )
    (root / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    output = root / "worker.out"
    command = [
        str(Path(sys.executable).parent / "logkeeper"), "--log-level", "warning", "serve",
        "--data-dir", str(root / "data"), "--topics", str(root / "topics.yaml"),
        "--settings", str(root / "settings.yaml"), "--http-port", "0", "--kafka-port", "0",
    ]  # fmt: skip
    with output.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        text = output.read_text(errors="replace")
        if "logkeeper serve: ready" in text:
            return process, text.split("kafka on ", 1)[1].split()[0]
        time.sleep(0.1)  # the worker's own log is the only signal it gives; polled
    process.kill()
    raise RuntimeError(f"the worker did not start: {output.read_text(errors='replace')[-2000:]}")


def create_topics(jars: str, address: str) -> None:
    """The benchmark's topics on the broker, with Kafka's own TopicCommand."""
    for name in TOPICS:
        configs = [
            arg for key, value in TOPIC_CONFIG.items() for arg in ("--config", f"{key}={value}")
        ]
        maven.run(
            [
                "java", *JAVA_OPTIONS, "-cp", jars, "org.apache.kafka.tools.TopicCommand",
                "--bootstrap-server", address, "--create", "--topic", name,
                "--partitions", "1", "--replication-factor", "1", *configs,
            ],
            f"TopicCommand --create {name}",
            timeout_s=120,
        )  # fmt: skip


def java_produce(jars: str, address: str, topic: str, count: int, size: int) -> float:
    """ProducerPerformance with the producer's defaults; MB/s of values."""
    out = maven.run(
        [
            "java", *JAVA_OPTIONS, "-cp", jars, "org.apache.kafka.tools.ProducerPerformance",
            "--topic", topic, "--num-records", str(count), "--record-size", str(size),
            "--throughput", "-1", "--producer-props", f"bootstrap.servers={address}",
        ],
        "ProducerPerformance",
        timeout_s=900,
    )  # fmt: skip
    # The last line: "N records sent, R records/sec (M MB/sec), ..." with MB = 2^20 bytes.
    found = re.findall(r"(\d+) records sent, ([\d.]+) records/sec", out)
    assert found and int(found[-1][0]) == count, out[-2000:]
    return float(found[-1][1]) * size / 1e6


def java_consume(jars: str, address: str, topic: str, count: int, group: str) -> float:
    """ConsumerPerformance (a group member, the consumer's defaults) to ``count`` records;
    MB/s of values."""
    out = maven.run(
        [
            "java", *JAVA_OPTIONS, "-cp", jars, "org.apache.kafka.tools.ConsumerPerformance",
            "--bootstrap-server", address, "--topic", topic, "--messages", str(count),
            "--group", group, "--timeout", "60000",
        ],
        "ConsumerPerformance",
        timeout_s=900,
    )  # fmt: skip
    # A CSV header then one row: start.time, end.time, data.consumed.in.MB, MB.sec,
    # data.consumed.in.nMsg, nMsg.sec, ...; MB = 2^20 bytes of values.
    lines = [line for line in out.splitlines() if line.strip()]
    header = [h.strip() for h in lines[-2].split(",")]
    row = dict(zip(header, (v.strip() for v in lines[-1].split(",")), strict=False))
    assert int(row["data.consumed.in.nMsg"]) >= count, out[-2000:]
    return float(row["MB.sec"]) * (1 << 20) / 1e6


def kcat_values(root: Path, count: int, size: int) -> Path:
    """``count`` values of ``size`` bytes, one per line: 1024 different lines of random hex
    digits, repeated (kcat splits the file at newlines only, but other control bytes in a value
    made it drop some)."""
    path = root / f"values-{size}.txt"
    lines = b"".join(os.urandom(size // 2 + 1).hex()[:size].encode() + b"\n" for _ in range(1024))
    with path.open("wb") as out:
        for _ in range(count // 1024):
            out.write(lines)
        out.write(b"".join(lines.splitlines(keepends=True)[: count % 1024]))
    return path


def kcat_produce(address: str, topic: str, values: Path, megabytes: float) -> float:
    command = ["kcat", "-P", "-b", address, "-t", topic, "-p", "0", "-l", str(values)]
    started = time.perf_counter()
    subprocess.run(command, check=True, timeout=900)
    return megabytes / (time.perf_counter() - started)


def kcat_consume(address: str, topic: str, count: int, megabytes: float) -> float:
    command = ["kcat", "-C", "-b", address, "-t", topic, "-p", "0", "-o", "beginning"]
    command += ["-c", str(count), "-e", "-q", "-f", "%s\n"]
    started = time.perf_counter()
    done = subprocess.run(command, check=True, timeout=900, stdout=subprocess.PIPE)
    elapsed = time.perf_counter() - started
    # -e: stop at the partition's end, so that a short topic fails here instead of hanging.
    got = done.stdout.count(b"\n")
    assert got == count, f"kcat read {got} of {count} records of {topic} from {address}"
    return megabytes / elapsed


def note(text: str) -> None:
    """Progress on stderr (the figures go to stdout)."""
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def one_round(
    jars: str, targets: dict[str, str], root: Path, mib: int, round_: int
) -> dict[tuple[str, str], float]:
    """MB/s per (measure, target name)."""
    figures: dict[tuple[str, str], float] = {}
    count = mib * (1 << 20) // 1024
    topic = f"{TOPICS[0]}"
    for name, address in targets.items():
        note(f"java produce -> {name}")
        figures["java 1KiB produce", name] = java_produce(jars, address, topic, count, 1024)
    for name, address in targets.items():
        note(f"java consume <- {name}")
        figures["java 1KiB consume", name] = java_consume(
            jars, address, topic, count, f"bench-{round_}"
        )
    for size, topic in ((100, TOPICS[1]), (1024, TOPICS[2])):
        count = mib * (1 << 20) // size
        megabytes = count * size / 1e6
        values = kcat_values(root, count, size)
        for name, address in targets.items():
            note(f"kcat {size}B produce -> {name}")
            figures[f"kcat {size}B produce", name] = kcat_produce(address, topic, values, megabytes)
        for name, address in targets.items():
            # Round n reads the records of rounds 1..n: only this round's count is timed.
            note(f"kcat {size}B consume <- {name}")
            figures[f"kcat {size}B consume", name] = kcat_consume(address, topic, count, megabytes)
        values.unlink()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=64, help="MiB of values per client")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", choices=("worker", "broker"), help="one target (profiling)")
    args = parser.parse_args()
    # SIGTERM (a timeout's) runs the finally below: no broker JVM or worker left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    jars = maven.classpath()
    with tempfile.TemporaryDirectory(
        prefix="bench-broker-", dir=os.environ.get("BENCH_DIR")
    ) as tmp:
        root = Path(tmp)
        broker = KafkaBroker(root / "broker")
        worker: subprocess.Popen[bytes] | None = None
        targets: dict[str, str] = {}
        try:
            if args.only != "worker":
                broker.start()
                create_topics(jars, broker.address)
                targets["broker"] = broker.address
            if args.only != "broker":
                worker, targets["worker"] = start_worker(root / "worker")
                print(f"worker pid {worker.pid} on {targets['worker']}", flush=True)
            for round_ in range(1, args.rounds + 1):
                figures = one_round(jars, targets, root, args.mib, round_)
                print(f"round {round_} ({args.mib} MiB of values per client), MB/s:")
                for measure in dict.fromkeys(m for m, _ in figures):
                    broker_mb = figures.get((measure, "broker"))
                    worker_mb = figures.get((measure, "worker"))
                    line = f"  {measure:<20}"
                    line += f" broker {broker_mb:8.1f}" if broker_mb else ""
                    line += f" worker {worker_mb:8.1f}" if worker_mb else ""
                    if broker_mb and worker_mb:
                        line += f"  worker/broker {worker_mb / broker_mb:5.2f}"
                        line += "" if worker_mb / broker_mb >= 0.8 else "  (below 0.80)"
                    print(line, flush=True)
        finally:
            if worker is not None:
                worker.terminate()
                worker.wait(60)
            broker.stop()


if __name__ == "__main__":
    main()
