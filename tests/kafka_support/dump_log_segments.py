"""Kafka's ``kafka-dump-log.sh`` (``org.apache.kafka.tools.DumpLogSegments``) run on files the
tests wrote, to check them with Kafka's own decoders.

The classpath is ``kafka-tools`` 4.3.1 as pinned in ``dump_log_segments/pom.xml``, resolved
once by :func:`tests.kafka_support.maven.classpath` (artifacts land in ``~/.m2``) and cached in
``dump_log_segments/build/`` (git-ignored). Each call is one ``java`` process.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from tests.kafka_support import maven

HERE = Path(__file__).resolve().parent / "dump_log_segments"
POM = HERE / "pom.xml"
BUILD = HERE / "build"
MAIN_CLASS = "org.apache.kafka.tools.DumpLogSegments"


class DumpOutput(NamedTuple):
    stdout: str
    stderr: str


def missing_tools() -> list[str]:
    """The tools needed that are not on PATH (empty: DumpLogSegments can run)."""
    return [tool for tool in ("mvn", "java") if shutil.which(tool) is None]


def _run(command: list[str], timeout_s: float) -> DumpOutput:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise AssertionError(
            f"exit {done.returncode}: {' '.join(command[:6])} ...\n"
            f"{done.stdout[-4000:]}{done.stderr[-4000:]}"
        )
    return DumpOutput(done.stdout, done.stderr)


def classpath() -> str:
    """kafka-tools' jars, resolved with Maven once per pom (then cached)."""
    return maven.classpath(POM, BUILD)


def dump(files: Sequence[Path], *flags: str, timeout_s: float = 300) -> DumpOutput:
    """``kafka-dump-log.sh --files <files> <flags>``: what it printed on stdout and stderr."""
    assert files, "nothing to dump"
    command = ["java", "-cp", classpath(), MAIN_CLASS, *flags]
    command += ["--files", ",".join(str(path) for path in files)]
    return _run(command, timeout_s)
