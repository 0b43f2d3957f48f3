"""Spark's own Kafka connector (``spark-sql-kafka-0-10``) against one Kafka address: a program.

``python -m tests.kafka_support.spark_kafka TOPIC CHECKPOINT_ROOT NAME=BOOTSTRAP...`` runs, in one
local Spark session of its own (a JVM started with the connector's jars, which a running JVM
could not take), the steps below against each address in turn and prints one JSON object
mapping each NAME to its answer (the query of NAME checkpoints in CHECKPOINT_ROOT/NAME):

1. ``batch``: a batch read of every partition of TOPIC from earliest to latest, with headers;
2. ``stream``: a streaming query over TOPIC with ``maxOffsetsPerTrigger`` (trigger
   ``availableNow``), which checkpoints; what each micro-batch read;
3. ``written``: ten rows written to TOPIC through Spark's Kafka sink (keys picking the
   partition with Kafka's partitioner, one row with an explicit partition and headers), from
   one task each so that their order is the same on every run;
4. ``restarted``: the same query started again from its checkpoint: only the new rows;
5. ``after``: a batch read of everything again.

Timestamps are left out of what it prints (the sink's records get the time of the write), their
type is kept. The connector's jars come from ``spark_connector/pom.xml`` (:func:`jars`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.kafka_support import maven

MAX_OFFSETS_PER_TRIGGER = 8


def jars() -> str:
    """The connector's jars as a comma-separated list (spark.jars), resolved once by Maven."""
    connector = maven.SPARK_CONNECTOR
    return maven.classpath(connector / "pom.xml", connector / "build").replace(":", ",")


def _row(row: Any) -> list[Any]:
    headers = [[h["key"], None if h["value"] is None else bytes(h["value"]).decode()]
               for h in (row["headers"] or [])]  # fmt: skip
    return [
        row["partition"],
        row["offset"],
        None if row["key"] is None else bytes(row["key"]).decode(),
        None if row["value"] is None else bytes(row["value"]).decode(),
        row["timestampType"],
        headers,
    ]


def main(topic: str, checkpoint_root: str, *named: str) -> dict[str, Any]:
    from storagepipeline import local_session

    spark = local_session(
        "local[2]",
        "logkeeper-spark-kafka",
        {"spark.jars": jars(), "spark.sql.shuffle.partitions": "2"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    answers = {}
    for pair in named:
        name, bootstrap = pair.split("=", 1)
        answers[name] = run(spark, bootstrap, topic, str(Path(checkpoint_root) / name))
    spark.stop()
    return answers


def run(spark: Any, bootstrap: str, topic: str, checkpoint: str) -> dict[str, Any]:
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "includeHeaders": "true"}

    def batch_read() -> list[list[Any]]:
        frame = (
            spark.read.format("kafka")
            .options(**options)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )
        return sorted(_row(row) for row in frame.collect())

    micro_batches: list[list[Any]] = []

    def record(frame: Any, batch_id: int) -> None:
        offsets = sorted((row["partition"], row["offset"]) for row in frame.collect())
        micro_batches.append([batch_id, [list(o) for o in offsets]])

    def stream() -> list[list[Any]]:
        micro_batches.clear()
        query = (
            spark.readStream.format("kafka")
            .options(**options)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", MAX_OFFSETS_PER_TRIGGER)
            .load()
            .writeStream.foreachBatch(record)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return list(micro_batches)

    answer: dict[str, Any] = {"batch": batch_read(), "stream": stream()}
    rows = [(f"spark-{i}", f"written by spark {i}", None, None) for i in range(9)]
    rows.append(("spark-9", "with a partition and headers", 1, [("origin", b"spark")]))
    frame = spark.createDataFrame(
        rows,
        "key string, value string, partition int, headers array<struct<key:string,value:binary>>",
    )
    for chosen in (
        frame.filter("partition is null").select("key", "value"),
        frame.filter("partition is not null"),
    ):
        chosen.coalesce(1).write.format("kafka").option(
            "kafka.bootstrap.servers", bootstrap
        ).option("topic", topic).save()
    answer["written"] = len(rows)
    answer["restarted"] = stream()
    answer["after"] = batch_read()
    return answer


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:])))
