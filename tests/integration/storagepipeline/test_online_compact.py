"""``compact`` on a volume a live ``logkeeper serve`` process serves (issue 17 point 4): the
worker pauses, plans and pins, the executors write, the worker checks and swaps; a producer and
a group consumer run through the Kafka port the whole time. Then the failures: a job that fails
after its executors wrote, and a worker SIGKILLed between the executors' writes and the swap,
each leave every partition exactly as it was; an executor SIGKILLed while it writes leaves each
partition exactly old or exactly new.

Cost: one worker process per test and the session's local[2] Spark; about 20-40 s each on the
shared 2-core machine."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from pyspark.sql import SparkSession

from storagecore import files
from storagepipeline import PipelineError
from storagepipeline import compact as compact_job
from storagepipeline.online_compact import WorkerAdmin, compact_online
from tests.integration.storagepipeline.test_with_worker import run_cli
from tests.integration.storageworker.test_serve import SETTINGS, Served, declare, topic, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 2
CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": 4096,
    "min.cleanable.dirty.ratio": 1.0,  # the worker's own cleaner leaves the topic to the job
    "delete.retention.ms": 3_600_000,
}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    declare(tmp_path, topic("profiles", PARTITIONS, CONFIG))
    server = Served(tmp_path, "--kafka-port", "0")
    yield server
    if server.process.poll() is None:
        assert server.terminate() == 0


Written = dict[tuple[int, int], tuple[bytes, bytes]]


class Traffic:
    """A producer of keyed records (delivery reports kept by partition and offset) and a
    group consumer reading the topic, both on their own threads until :meth:`stop`."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.written: Written = {}
        self.consumed: list[tuple[int, int, bytes, bytes]] = []
        self.errors: list[object] = []
        self.lock = threading.Lock()
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._producer = threading.Thread(target=self._produce)
        self._consumer = threading.Thread(target=self._consume)

    def start(self) -> None:
        self._producer.start()
        self._consumer.start()

    def _delivered(self, err: object, msg: Any) -> None:
        with self.lock:
            if err is not None:
                self.errors.append(err)
            else:
                self.written[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

    def _produce(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.address,
                "linger.ms": 5,
                "batch.size": 2000,
                "enable.idempotence": True,  # a retried batch is never written twice
            }
        )
        i = 0
        while not self._stop_producing.is_set():
            producer.produce(
                "profiles",
                key=f"user-{i % 41}".encode(),
                value=f"value-{i}-".encode() + b"x" * 30,
                on_delivery=self._delivered,
            )
            i += 1
            if i % 100 == 0:
                producer.flush(10)
                time.sleep(0.01)  # a steady stream, not a flood on a shared machine
        producer.flush(30)

    def _consume(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.address,
                "group.id": "online-compact",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 200,
            }
        )
        consumer.subscribe(["profiles"])
        try:
            while not self._stop_consuming.is_set():
                message: Any = consumer.poll(0.2)
                if message is None or message.error():
                    continue
                with self.lock:
                    self.consumed.append(
                        (message.partition(), message.offset(), message.key(), message.value())
                    )
        finally:
            consumer.close()

    def stop_producing(self) -> None:
        self._stop_producing.set()
        self._producer.join(60)

    def stop_consuming_at(self, ends: dict[int, int]) -> None:
        """Once the consumer has read up to each partition's end offset."""

        def caught_up() -> bool:
            with self.lock:
                top: dict[int, int] = {}
                for p, o, _k, _v in self.consumed:
                    top[p] = max(top.get(p, -1), o)
            return all(top.get(p, -1) >= end - 1 for p, end in ends.items() if end)

        wait_for(caught_up, "the group consumer to reach the log end", timeout_s=90)
        self._stop_consuming.set()
        self._consumer.join(30)

    def written_count(self) -> int:
        with self.lock:
            return len(self.written)


def log_end_offsets(written: Written) -> dict[int, int]:
    ends = dict.fromkeys(range(PARTITIONS), 0)
    for p, o in written:
        ends[p] = max(ends[p], o + 1)
    return ends


def sealed_segments(data: Path) -> dict[str, bytes]:
    """Every segment file but each partition's last (the active one, still appended to)."""
    out: dict[str, bytes] = {}
    for directory in sorted(data.glob("profiles-*")):
        logs = sorted(directory.glob("*.log"))
        out.update({f"{directory.name}/{p.name}": p.read_bytes() for p in logs[:-1]})
    return out


def read_back(address: str, ends: dict[int, int]) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """The whole topic as it is now, read from offset 0 by a fresh consumer."""
    from confluent_kafka import TopicPartition as Partition

    consumer = Consumer({"bootstrap.servers": address, "group.id": "read-back"})
    consumer.assign([Partition("profiles", p, 0) for p in range(PARTITIONS)])
    got: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    top = dict.fromkeys(range(PARTITIONS), -1)
    deadline = time.monotonic() + 60
    while any(top[p] < end - 1 for p, end in ends.items()) and time.monotonic() < deadline:
        message: Any = consumer.poll(0.2)
        if message is None or message.error():
            continue
        got[(message.partition(), message.offset())] = (message.key(), message.value())
        top[message.partition()] = max(top[message.partition()], message.offset())
    consumer.close()
    return got


def test_compact_while_the_worker_serves_a_producer_and_a_group_consumer(
    spark: SparkSession, served: Served
) -> None:
    traffic = Traffic(served.kafka_address)
    traffic.start()
    data = served.root / "data"
    try:
        # Enough for a few sealed segments per partition before the job plans.
        wait_for(lambda: traffic.written_count() >= 1500, "the producer's first records")
        results = compact_online(spark, served.base, topics=["profiles"])
        written_during = traffic.written_count()
        # Traffic goes on after the swaps: the worker serves the new segments.
        wait_for(lambda: traffic.written_count() >= written_during + 300, "more records")
    finally:
        traffic.stop_producing()
    assert not traffic.errors
    assert [r.stats["swap"] for r in results] == ["swapped"] * PARTITIONS
    for r in results:
        assert r.stats["path"] == "partition"
        assert r.stats["messages_read"] > r.stats["messages_written"] > 0
    assert_released(served)
    ends = log_end_offsets(traffic.written)
    traffic.stop_consuming_at(ends)

    # The group consumer: every record it got is the one written at that offset, no offset
    # twice (the group did not rewind), and each key's last write reached it.
    consumed = traffic.consumed
    assert len({(p, o) for p, o, _k, _v in consumed}) == len(consumed)
    for p, o, key, value in consumed:
        assert traffic.written[(p, o)] == (key, value)
    last: dict[tuple[int, bytes], int] = {}
    for (p, o), (key, _value) in sorted(traffic.written.items()):
        last[(p, key)] = o
    assert {(p, o) for p, o, _k, _v in consumed} >= {(p, o) for (p, _k), o in last.items()}

    # The log: every key's last write is kept; below each round's end only the last write of
    # a key survives (the core cleaner's result); at and above it, everything written.
    now = read_back(served.kafka_address, ends)
    assert set(last.items()) <= {((p, k), o) for (p, o), (k, _v) in now.items()}
    for r in results:
        p = r.partition
        kept = sorted(o for (q, o) in now if q == p and o < r.end_offset)
        expected = sorted(
            o for (q, k), o in _last_below(traffic.written, r.end_offset).items() if q == p
        )
        assert kept == expected
        above = {o for (q, o) in traffic.written if q == p and o >= r.end_offset}
        assert above <= {o for (q, o) in now if q == p}
    for (p, o), record in now.items():
        assert traffic.written[(p, o)] == record
    assert not list(data.glob("profiles-*/*.cleaned"))
    assert not list((data / files.PINS_DIR).glob("*"))


def assert_released(served: Served) -> None:
    """No job holds a partition and the topic's cleaning is no longer paused."""
    status = served.status()
    assert status["compactJobs"] == {}
    states = [p["cleanerState"] for p in status["partitions"] if p["topic"] == "profiles"]
    assert states == ["idle"] * PARTITIONS


def _last_below(written: Written, end: int) -> dict[tuple[int, bytes], int]:
    last: dict[tuple[int, bytes], int] = {}
    for (p, o), (key, _value) in sorted(written.items()):
        if o < end:
            last[(p, key)] = o
    return last


def _prefill(served: Served, records: int = 2000) -> Written:
    traffic = Traffic(served.kafka_address)
    traffic._consumer = threading.Thread(target=lambda: None)
    traffic.start()
    try:
        wait_for(lambda: traffic.written_count() >= records, "the producer's records")
    finally:
        traffic.stop_producing()
    assert not traffic.errors
    return traffic.written


def test_a_job_that_fails_after_its_executors_wrote_leaves_the_partitions_old(
    spark: SparkSession, served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    _prefill(served)
    data = served.root / "data"
    before = sealed_segments(data)
    real = compact_job.clean_planned
    wrote: list[int] = []

    def fails_after_writing(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        real(*args, **kwargs)
        wrote.append(len(list(data.glob("profiles-*/*.log.cleaned"))))
        raise RuntimeError("the job failed after its executors wrote")

    monkeypatch.setattr("storagepipeline.online_compact.clean_planned", fails_after_writing)
    with pytest.raises(RuntimeError, match="after its executors wrote"):
        compact_online(spark, served.base, topics=["profiles"])
    assert wrote and wrote[0] > 0  # the premise: cleaned copies existed when it failed
    assert sealed_segments(data) == before
    assert not list(data.glob("profiles-*/*.cleaned"))
    assert_released(served)
    # Bad calls are refused with what is wrong, and change nothing.
    for path, body, error in [
        ("/v1/compaction/begin", {"partitions": ["profiles-9"]}, "unknown partition profiles-9"),
        ("/v1/compaction/begin", {"topics": ["nope"]}, "unknown topic 'nope'"),
        ("/v1/compaction/begin", {"topics": ["profiles"], "lease_ms": 0}, "lease_ms 0"),
        ("/v1/compaction/0123/finish", {"cleaned": {}}, "no compact job '0123'"),
    ]:
        with pytest.raises(PipelineError, match=f"HTTP 400: .*{error}"):
            WorkerAdmin(served.base).call(path, body)
    assert sealed_segments(data) == before
    # Cleaning resumed: the next job runs and swaps, here through the aggregated map (an
    # executor map of 10 keys, fewer than the ~20 of each partition), reading the pins too.
    # Run by the command line (its own Spark session) as a user would.
    done = run_cli(
        "spark",
        "compact",
        "--worker",
        served.base,
        "--topic",
        "profiles",
        "--map-bytes",
        str(24 * 12),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert [(r["stats"]["path"], r["stats"]["swap"]) for r in results] == [
        ("aggregated", "swapped")
    ] * PARTITIONS
    assert all(r["stats"]["messages_read"] > r["stats"]["messages_written"] > 0 for r in results)


def test_a_worker_killed_before_the_swap_keeps_the_partitions_old(
    spark: SparkSession, served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = _prefill(served)
    data = served.root / "data"
    before = sealed_segments(data)
    real = compact_job.clean_planned
    restarted: list[Served] = []

    def kill_after_writing(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        stats = real(*args, **kwargs)
        assert list(data.glob("profiles-*/*.log.cleaned"))
        served.kill()  # SIGKILL: no shutdown, no checkpoints, pauses and pins left as they are
        restarted.append(Served(served.root, "--kafka-port", "0"))
        return stats

    monkeypatch.setattr("storagepipeline.online_compact.clean_planned", kill_after_writing)
    with pytest.raises(PipelineError, match="compaction/.*/finish"):
        compact_online(spark, served.base, topics=["profiles"])
    (again,) = restarted
    try:
        # The restarted worker's loader removed the copies; every segment is the old one.
        assert not list(data.glob("profiles-*/*.cleaned"))
        assert sealed_segments(data) == before
        now = read_back(again.kafka_address, log_end_offsets(written))
        assert now == written
    finally:
        assert again.terminate() == 0


def _spark_python_workers() -> list[int]:
    """The Python worker processes of this test's Spark (forked by a ``pyspark.daemon`` that
    descends from this process): the executors' side of a task in local mode."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])

    def descends_from_us(pid: int) -> bool:
        while pid > 1:
            if pid == os.getpid():
                return True
            pid = parents.get(pid, 0)
        return False

    return [
        pid
        for pid, command in commands.items()
        if "pyspark.daemon" in command
        and "pyspark.daemon" in commands.get(parents.get(pid, 0), "")
        and descends_from_us(pid)
    ]


def test_an_executor_killed_while_writing_leaves_each_partition_old_or_new(
    spark: SparkSession, served: Served, tmp_path: Path
) -> None:
    written = _prefill(served, records=6000)
    data = served.root / "data"
    before = sealed_segments(data)
    killed: list[int] = []
    stop = threading.Event()

    def kill_when_writing() -> None:
        # SIGKILL the Python workers as soon as a cleaned copy is being written.
        while not stop.is_set() and not killed:
            if list(data.glob("profiles-*/*.log.cleaned")):
                for pid in _spark_python_workers():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
            time.sleep(0.001)

    killer = threading.Thread(target=kill_when_writing)
    killer.start()
    try:
        try:
            results = compact_online(spark, served.base, topics=["profiles"])
            outcome = {r.partition: r.stats["swap"] for r in results}
        except Exception:  # the task's failure, as Spark reports it
            outcome = {}
    finally:
        stop.set()
        killer.join()
    assert killed, "the premise: an executor was killed while the job ran"
    assert_released(served)
    assert not list(data.glob("profiles-*/*.cleaned"))
    after = sealed_segments(data)
    for p in range(PARTITIONS):
        old = {k: v for k, v in before.items() if k.startswith(f"profiles-{p}/")}
        now = {k: v for k, v in after.items() if k.startswith(f"profiles-{p}/")}
        if outcome.get(p) == "swapped":
            assert now != old
        else:
            assert now == old  # exactly old
    # Old or new, the records read back are each key's last write and nothing foreign.
    back = read_back(served.kafka_address, log_end_offsets(written))
    last: dict[tuple[int, bytes], int] = {}
    for (p, o), (key, _value) in sorted(written.items()):
        last[(p, key)] = o
    assert {(p, o) for (p, _key), o in last.items()} <= set(back)
    assert all(written[po] == record for po, record in back.items())
