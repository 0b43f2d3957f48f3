"""Runs ``java/PeerClient.java`` (Kafka's Java client; or another program of ``java/``) for one
scenario and returns its answer.

The program prints one JSON object; a failure of the program itself (not a refused request,
which is part of the answer) raises :class:`~tests.kafka_support.maven.MavenError` with its
output.
"""

from __future__ import annotations

import json
from typing import Any

from tests.kafka_support import maven

JAVA_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


def java_client(
    scenario: str, *args: object, timeout_s: float = 180, program: str = "PeerClient"
) -> dict[str, Any]:
    """``program``'s (a class of ``java/``) answer for ``scenario``."""
    command = [
        "java", *JAVA_OPTIONS, "-Dorg.slf4j.simpleLogger.defaultLogLevel=error",
        "-cp", maven.compiled(), program, scenario, *map(str, args),
    ]  # fmt: skip
    out = maven.run(command, f"{program} {scenario}", timeout_s)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        raise maven.MavenError(f"{program} {scenario}: no JSON in its output:\n{out[-2000:]}")
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer
