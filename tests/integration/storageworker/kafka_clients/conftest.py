"""Fixtures of the kafka_clients tests: a root declaring three topics (``events``, two
partitions; ``small``, max.message.bytes 2000; ``profiles``, compacted) and a worker serving it
on a kafka port, terminated cleanly at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.storageworker.kafka_clients.clients import start
from tests.integration.storageworker.test_serve import SETTINGS, Served, declare, topic


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    declare(
        tmp_path,
        topic("events", 2, {"cleanup.policy": "delete", "segment.bytes": 16384}),
        topic("small", 1, {"max.message.bytes": 2000}),
        topic(
            "profiles",
            1,
            {"cleanup.policy": "compact", "segment.bytes": 4096, "min.cleanable.dirty.ratio": 1.0},
        ),
    )
    return tmp_path


@pytest.fixture
def served(root: Path) -> Iterator[Served]:
    server = start(root)
    yield server
    assert server.terminate() == 0
