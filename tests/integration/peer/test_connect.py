"""Kafka Connect's distributed worker on both peers (issue 19 point 4): its config, offset and
status topics live on the peer (created by Connect through the Admin API, ``connect-`` being a
client-topic prefix of the worker, and checked by Connect to be compacted); a FileStream source
feeds a topic that a FileStream sink writes to a file; then Connect and the peer restart and the
pipeline resumes: the sink file must hold every source line exactly once, on both peers.

Also with ``exactly.once.source.support=enabled`` (KIP-618): the source's records and offsets
are written in transactions, through the worker's transaction coordinator (issue 19 point 1).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.peer.conftest import RestartableWorker
from tests.integration.peer.test_streams import (
    changelog_policy,
    create_topics,
)
from tests.kafka_support.broker import KafkaBroker
from tests.kafka_support.connect import ConnectWorker

pytestmark = [pytest.mark.integration, pytest.mark.kafka_peer]

EXACTLY_ONCE = {"exactly.once.source.support": "enabled"}
MODES: dict[str, dict[str, str]] = {"at_least_once": {}, "exactly_once_source": EXACTLY_ONCE}


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def append(path: Path, first: int, count: int) -> None:
    with path.open("a", encoding="utf-8") as out:
        out.writelines(f"line {i:05d}\n" for i in range(first, first + count))


def run_pipeline(
    root: Path,
    bootstrap: Callable[[], str],
    group: str,
    restart: Callable[[], None],
    extra: dict[str, str],
) -> list[str]:
    """The FileStream pipeline through the peer, with Connect and the peer restarted between
    two halves of the input; the sink file's lines at the end."""
    source, sink = root / f"{group}-in.txt", root / f"{group}-out.txt"
    source.touch()
    data = f"{group}-data"
    create_topics(bootstrap(), data)
    connect = ConnectWorker(root, bootstrap(), group, **extra)
    connect.start()
    try:
        connect.put_connector(
            f"{group}-source",
            {
                "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                "tasks.max": "1",
                "file": str(source),
                "topic": data,
            },
        )
        connect.put_connector(
            f"{group}-sink",
            {
                "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
                "tasks.max": "1",
                "file": str(sink),
                "topics": data,
            },
        )
        append(source, 0, 300)
        connect.wait(lambda: len(lines_of(sink)) >= 300, "300 lines in the sink file")
        for topic in ("configs", "offsets", "status"):
            assert changelog_policy(bootstrap(), f"{group}-{topic}") == "compact"
        assert connect.stop() in (0, 143)  # 143: the JVM's exit after SIGTERM's shutdown hooks
        restart()
        connect.start()
        connect.wait(
            lambda: connect.running(f"{group}-source") and connect.running(f"{group}-sink"),
            "running connectors after the restart",
        )
        append(source, 300, 300)
        connect.wait(lambda: len(lines_of(sink)) >= 600, "600 lines in the sink file")
        assert connect.stop() in (0, 143)
    finally:
        connect.kill()
    return lines_of(sink)


EXPECTED = [f"line {i:05d}" for i in range(600)]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_file_pipeline_resumes_without_duplicates_after_both_restart(
    restartable_broker: KafkaBroker,
    restartable_worker: RestartableWorker,
    tmp_path: Path,
    mode: str,
) -> None:
    def restart_broker() -> None:
        restartable_broker.stop()
        restartable_broker.start()

    group = f"connect-{mode.replace('_', '')}"
    ours = run_pipeline(
        tmp_path,
        lambda: restartable_worker.address,
        f"{group}-lk",
        restartable_worker.restart,
        MODES[mode],
    )
    kafka = run_pipeline(
        tmp_path, lambda: restartable_broker.address, f"{group}-kafka", restart_broker, MODES[mode]
    )
    assert kafka == EXPECTED
    assert ours == EXPECTED
    # Connect's three topics and the data topic are client topics of the worker.
    created = {t["name"] for t in restartable_worker.served.status()["clientTopics"]["topics"]}
    assert {f"{group}-lk-{t}" for t in ("configs", "offsets", "status", "data")} <= created
