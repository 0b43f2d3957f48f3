"""Fixtures of the Kafka port's unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from storagecore.clock import ManualClock
from storageworker.worker import Worker


@pytest.fixture
def worker(tmp_path: Path, topics_yaml: str) -> Iterator[Worker]:
    """A started worker (no HTTP, no Kafka listener, a manual clock) over a fresh data dir,
    serving the Topic manifests of the test module's ``topics_yaml`` fixture."""
    (tmp_path / "topics").mkdir()
    (tmp_path / "topics" / "topics.yaml").write_text(topics_yaml, encoding="utf-8")
    worker = Worker([tmp_path / "data"], tmp_path / "topics", None, clock=ManualClock(0))
    worker.start(background=False)
    yield worker
    worker.shutdown()
