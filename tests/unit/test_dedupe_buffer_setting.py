"""The dedupe buffer is one setting from the CRD to the engine: ``dedupeBufferBytes`` (the
StorageVolume CRD, the chart's copy of it, the worker's settings file),
``log.cleaner.dedupe.buffer.size`` (Kafka's key, ``CleanerConfig.dedupe_buffer_size``) and
``logkeeper clean --dedupe-buffer-bytes``, with the one default and the one minimum of
storagecore.config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from logkeeper.cli import build_parser
from storagecore.config import (
    DEDUPE_BUFFER_SIZE_DEFAULT,
    DEDUPE_BUFFER_SIZE_MIN_PER_THREAD,
    CleanerConfig,
)
from storagecore.errors import ConfigError
from storageoperator import crds
from storageworker.settings import WorkerSettings, parse_settings
from tests.k8s.cel import violations

ROOT = Path(__file__).parents[2]
CRD_FILES = [
    ROOT / "crds" / "logkeeper.io_storagevolumes.yaml",
    ROOT / "charts" / "logkeeper" / "crds" / "logkeeper.io_storagevolumes.yaml",
]


def cleaner_schema(crd: dict[str, Any]) -> dict[str, Any]:
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return dict(spec["properties"]["cleaner"])


@pytest.mark.parametrize("path", CRD_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_crd_files_carry_storagecores_default_and_minimum(path: Path) -> None:
    field = cleaner_schema(yaml.safe_load(path.read_text(encoding="utf-8")))["properties"][
        "dedupeBufferBytes"
    ]
    assert field["default"] == DEDUPE_BUFFER_SIZE_DEFAULT
    assert field["minimum"] == DEDUPE_BUFFER_SIZE_MIN_PER_THREAD  # one thread at least


def test_every_layer_defaults_to_storagecores_value() -> None:
    assert CleanerConfig().dedupe_buffer_size == DEDUPE_BUFFER_SIZE_DEFAULT
    assert WorkerSettings().dedupe_buffer_bytes == DEDUPE_BUFFER_SIZE_DEFAULT
    assert parse_settings({"cleaner": {"threads": 2}}).settings.cleaner_config() == CleanerConfig(
        threads=2
    )
    args = build_parser().parse_args(["clean", "--dir", "d"])
    assert args.dedupe_buffer_bytes == DEDUPE_BUFFER_SIZE_DEFAULT
    assert CleanerConfig.from_properties({}).dedupe_buffer_size == DEDUPE_BUFFER_SIZE_DEFAULT


@pytest.mark.parametrize("threads", [1, 3])
def test_minimum_per_thread_is_the_same_in_the_crd_the_worker_and_kafkas_keys(
    threads: int,
) -> None:
    least = DEDUPE_BUFFER_SIZE_MIN_PER_THREAD * threads
    schema = cleaner_schema(crds.storage_volume_crd())
    for size, accepted in ((least, True), (least - 1, False)):
        cleaner = {"threads": threads, "dedupeBufferBytes": size}
        in_crd = (
            list(violations(schema, cleaner)) == []
            and size >= schema["properties"]["dedupeBufferBytes"]["minimum"]
        )
        try:
            parse_settings({"cleaner": cleaner})
            in_worker = True
        except ConfigError as exc:
            assert "cleaner.dedupeBufferBytes" in str(exc)
            in_worker = False
        try:
            CleanerConfig.from_properties(
                {"log.cleaner.threads": threads, "log.cleaner.dedupe.buffer.size": size}
            )
            in_kafka_keys = True
        except ConfigError as exc:
            assert "log.cleaner.dedupe.buffer.size" in str(exc)
            in_kafka_keys = False
        assert (in_crd, in_worker, in_kafka_keys) == (accepted,) * 3, (size, threads)
