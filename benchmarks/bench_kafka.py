"""Kafka port throughput on loopback, as a ratio of the worker's own append and read.

    .venv/bin/python benchmarks/bench_kafka.py [--mib 100]

For 1 KiB and 100-byte records (lz4, as issue 6 asks): a real ``logkeeper serve --kafka-port``
process; confluent-kafka (librdkafka) produces ``--mib`` MiB of record values (acks=1,
linger 20 ms, 1 MiB batches) and a consumer (assign, offset 0) reads them back. Then, in this
process and without the network, the same on-disk batches are appended to a fresh Log
(storagecore's leader path: validation, offsets, index) and read back sequentially with
``Log.read``: the worker's own throughput. Printed: MB/s of values for each, and the ratios.
Last, kcat (librdkafka's C command-line client) produces the same volume and consumes the
Python producer's records: the same library without a Python object per record.

Targets (issue 6): produce >= 100 MB/s, consume >= 300 MB/s on the 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as Partition

from storagecore import LogConfig, LogManager, TopicPartition
from storagecore.records.batch import iter_complete_batches

TOPIC = "bench"
KCAT_TOPIC = "bench-kcat"
SETTINGS = "retentionCheckIntervalMs: 600000\ncleaner: {threads: 1}\n"


def start_worker(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    (root / "topics.yaml").write_text(
        "---\n".join(
            "apiVersion: logkeeper.io/v1alpha1\nkind: Topic\n"
            f"metadata: {{name: {name}}}\nspec:\n  partitions: 1\n  config:\n"
            '    retention.ms: "-1"\n    segment.bytes: "1073741824"\n'
            for name in (TOPIC, KCAT_TOPIC)
        ),
        encoding="utf-8",
    )
    (root / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    logkeeper = Path(sys.executable).parent / "logkeeper"
    output = root / "worker.out"
    with output.open("wb") as out:
        process = subprocess.Popen(
            [
                str(logkeeper),
                "--log-level",
                "warning",
                "serve",
                "--data-dir",
                str(root / "data"),
                "--topics",
                str(root / "topics.yaml"),
                "--settings",
                str(root / "settings.yaml"),
                "--http-port",
                "0",
                "--kafka-port",
                "0",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    address = ""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        text = output.read_text(errors="replace")
        if "logkeeper serve: ready" in text:
            address = text.split("kafka on ", 1)[1].split()[0]
            break
        time.sleep(0.1)
    assert address, f"the worker did not start: {output.read_text(errors='replace')[-2000:]}"
    return process, address


def produce(address: str, count: int, size: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": address,
            "compression.type": "lz4",
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "acks": 1,
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )
    # Half random, half zeros: about 2:1 with lz4, like many real payloads. A pool of 1024
    # values, so that lz4's 64 KiB window does not find whole repeated records.
    pool = [os.urandom(size // 2) + bytes(size - size // 2) for _ in range(1024)]
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(TOPIC, value=pool[i % 1024], key=b"%d" % (i % 1000), partition=0)
                break
            except BufferError:
                producer.poll(0.005)
    assert producer.flush(120) == 0
    return time.perf_counter() - started


def consume(address: str, count: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": address,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
            "queued.max.messages.kbytes": 1 << 20,
        }
    )
    consumer.assign([Partition(TOPIC, 0, 0)])
    got = 0
    started = time.perf_counter()
    while got < count:
        wanted = min(10000, count - got)  # never wait out the timeout for a short last call
        got += sum(1 for m in consumer.consume(wanted, 1.0) if not m.error())
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def kcat_produce(root: Path, address: str, count: int, size: int) -> float:
    """The same volume with kcat (C, librdkafka) instead of Python: values from a file, one per
    line (hex digits then zeros, about 2:1 with lz4 like the Python producer's)."""
    values = root / "values.txt"
    with values.open("wb") as out:
        for _ in range(1024):
            half = size // 2
            line = os.urandom(half // 2 + 1).hex()[:half].encode() + b"0" * (size - half)
            out.write(line + b"\n")
    lines = values.read_bytes()
    with values.open("wb") as out:
        for _ in range(count // 1024):
            out.write(lines)
    command = ["kcat", "-P", "-b", address, "-t", KCAT_TOPIC, "-p", "0", "-z", "lz4"]
    command += ["-X", "linger.ms=20", "-X", "batch.size=1048576", "-X", "acks=1"]
    command += ["-X", "queue.buffering.max.kbytes=1048576", "-l", str(values)]
    started = time.perf_counter()
    subprocess.run(command, check=True, timeout=600)
    return time.perf_counter() - started


def kcat_consume(address: str, count: int) -> float:
    """Read ``count`` messages of the Python producer's topic with kcat, values to /dev/null."""
    command = ["kcat", "-C", "-b", address, "-t", TOPIC, "-p", "0", "-o", "beginning"]
    command += ["-c", str(count), "-q", "-f", "%s", "-X", "fetch.max.bytes=67108864"]
    command += ["-X", "queued.max.messages.kbytes=1048576"]
    started = time.perf_counter()
    subprocess.run(command, check=True, timeout=600, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def fetch_wire(address: str, count: int) -> tuple[float, int]:
    """The worker alone: Fetch v12 requests of 1 MiB (librdkafka's default per partition)
    read sequentially by a client that does not decode records. (seconds, bytes sent)"""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.kafka_support.raw_client import RawClient

    offset = sent = 0
    started = time.perf_counter()
    with RawClient(address) as client:
        while offset < count:
            answer = client.call(
                1,
                12,
                {
                    "max_wait_ms": 500,
                    "min_bytes": 1,
                    "max_bytes": 64 << 20,
                    "topics": [
                        {
                            "topic": TOPIC,
                            "partitions": [
                                {
                                    "partition": 0,
                                    "fetch_offset": offset,
                                    "partition_max_bytes": 1 << 20,
                                }
                            ],
                        }
                    ],
                },
            )
            records = answer["responses"][0]["partitions"][0]["records"]
            sent += len(records)
            *_, (_position, last) = iter_complete_batches(records)
            offset = last.last_offset + 1
    return time.perf_counter() - started, sent


def direct(root: Path) -> tuple[float, float]:
    """Append the worker's own batches to a fresh log, then read it all back."""
    source = LogManager([root / "data"])
    log = source.get_or_create_log(TopicPartition(TOPIC, 0))
    batches: list[bytes] = []
    offset = 0
    while offset < log.log_end_offset:
        result = log.read(offset, 4 << 20)
        # As the producer sent them: base offset 0 (outside the CRC, which is unchanged).
        batches.extend(
            bytes(8) + bytes(b.buffer)[8:] for _p, b in iter_complete_batches(result.records)
        )
        offset = result.next_offset
    source.shutdown()
    target = LogManager([root / "direct"], default_config=LogConfig(segment_bytes=1 << 30))
    fresh = target.get_or_create_log(TopicPartition(TOPIC, 0))
    started = time.perf_counter()
    for batch in batches:
        fresh.append(batch)
    append_s = time.perf_counter() - started
    started = time.perf_counter()
    offset = 0
    while offset < fresh.log_end_offset:
        offset = fresh.read(offset, 1 << 20).next_offset  # librdkafka's default fetch size
    read_s = time.perf_counter() - started
    target.shutdown()
    return append_s, read_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=100, help="MiB of values per record size")
    args = parser.parse_args()
    for size in (1024, 100):
        count = args.mib * (1 << 20) // size
        megabytes = count * size / 1e6
        with tempfile.TemporaryDirectory(prefix="bench-kafka-") as tmp:
            root = Path(tmp)
            process, address = start_worker(root)
            try:
                produce_s = produce(address, count, size)
                consume_s = consume(address, count)
                wire_s, wire_bytes = fetch_wire(address, count)
                kcat_consume_s = kcat_consume(address, count)
                kcat_produce_s = kcat_produce(root, address, count, size)
            finally:
                process.terminate()
                process.wait(60)
            append_s, read_s = direct(root)
        print(
            f"{size:>5} B records x {count}: "
            f"produce {megabytes / produce_s:7.1f} MB/s (direct append "
            f"{megabytes / append_s:7.1f} MB/s, ratio {append_s / produce_s:.2f}); "
            f"consume {megabytes / consume_s:7.1f} MB/s (direct read "
            f"{megabytes / read_s:7.1f} MB/s, ratio {read_s / consume_s:.2f}); "
            f"fetch without decoding {megabytes / wire_s:7.1f} MB/s of values "
            f"({wire_bytes / wire_s / 1e6:.1f} MB/s on the wire); "
            f"kcat produce {megabytes / kcat_produce_s:7.1f} MB/s, "
            f"consume {megabytes / kcat_consume_s:7.1f} MB/s",
            flush=True,
        )


if __name__ == "__main__":
    main()
