"""kcat (Debian's librdkafka tool) produces and consumes, with every codec and in a group."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.integration.storageworker.test_serve import Served

pytestmark = pytest.mark.integration


# -- kcat (Debian's librdkafka tool) --------------------------------------------------------------


@pytest.mark.skipif(
    not any(os.access(os.path.join(d, "kcat"), os.X_OK) for d in os.environ["PATH"].split(":")),
    reason="kcat is installed by scripts/setup.sh (Debian package kcat)",
)
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produces_and_consumes(served: Served, codec: str) -> None:
    lines = "".join(f"key{i}:value-{i}\n" for i in range(50))
    subprocess.run(
        [
            "kcat",
            "-P",
            "-b",
            served.kafka_address,
            "-t",
            "events",
            "-p",
            "1",
            "-K",
            ":",
            "-z",
            codec,
        ],
        input=lines.encode(),
        check=True,
        timeout=60,
    )
    out = subprocess.run(
        [
            "kcat",
            "-C",
            "-b",
            served.kafka_address,
            "-t",
            "events",
            "-p",
            "1",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%k=%s@%o\n",
        ],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    assert out.splitlines() == [f"key{i}=value-{i}@{i}" for i in range(50)]
    grouped = subprocess.run(
        [
            "kcat",
            "-b",
            served.kafka_address,
            "-G",
            "kcat-group",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%s\n",
            "events",
        ],
        capture_output=True,
        check=True,
        timeout=90,
    ).stdout.decode()
    assert sorted(grouped.split()) == sorted(f"value-{i}" for i in range(50))
