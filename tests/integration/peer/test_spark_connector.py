"""Spark's own Kafka connector (spark-sql-kafka-0-10) against both peers (issue 18, point 6).

The same program (:mod:`tests.kafka_support.spark_kafka`, one Spark session of its own for
both peers, one after the other) reads a two-partition topic in batch, runs a streaming query with
``maxOffsetsPerTrigger`` (trigger availableNow) that checkpoints, writes ten rows through
Spark's Kafka sink, restarts the query from its checkpoint (only the new rows) and reads
everything again. Both peers must give the same answers: records, offsets, partitions,
headers, timestamp types, and the offsets of every micro-batch.

The connector is 4.2.0's, run in pyspark 4.3.0: Maven Central has no Spark 4.3.0 artifacts
(see tests/kafka_support/spark_connector/pom.xml).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.peer.conftest import Peers

pytestmark = [pytest.mark.integration, pytest.mark.kafka_peer]

pytest.importorskip("pyspark")

TOPIC = "spark-source"
ROOT = Path(__file__).parents[3]


def prefill(address: str) -> None:
    """Ten records per partition, with a header, through librdkafka."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": address, "linger.ms": 5})
    for i in range(20):
        producer.produce(
            TOPIC,
            key=b"pre-%d" % i,
            value=b"prefilled %d" % i,
            partition=i % 2,
            headers=[("n", str(i).encode())],
        )
    assert producer.flush(30) == 0


def spark_run(peers: Peers, checkpoints: Path) -> dict[str, Any]:
    named = [f"{name}={address}" for name, address in peers.both()]
    done = subprocess.run(
        [sys.executable, "-m", "tests.kafka_support.spark_kafka", TOPIC, str(checkpoints), *named],
        capture_output=True, text=True, timeout=400, check=False, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, f"exit {done.returncode}:\n{done.stderr[-6000:]}"
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def test_batch_read_streaming_restart_and_sink_give_the_same_results(
    peers: Peers, tmp_path: Path
) -> None:
    for _name, address in peers.both():
        prefill(address)
    answers = spark_run(peers, tmp_path)
    assert answers["logkeeper"] == answers["kafka"]
    kafka = answers["kafka"]
    assert len(kafka["batch"]) == 20
    assert kafka["batch"][0] == [0, 0, "pre-0", "prefilled 0", 0, [["n", "0"]]]
    # 20 records in micro-batches of at most 8, then the 10 written, in the same way.
    assert [len(offsets) for _id, offsets in kafka["stream"]] == [8, 8, 4]
    assert [len(offsets) for _id, offsets in kafka["restarted"]] == [8, 2]
    assert kafka["restarted"][0][0] == 3, "the restarted query goes on from its checkpoint"
    assert len(kafka["after"]) == 30
    (spark_9,) = [row for row in kafka["after"] if row[2] == "spark-9"]
    assert spark_9[0] == 1 and spark_9[1] >= 10
    assert spark_9[3:] == ["with a partition and headers", 0, [["origin", "spark"]]]
