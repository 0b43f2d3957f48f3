"""Kafka's ``kafka-dump-log.sh`` (``org.apache.kafka.tools.DumpLogSegments``) run on files the
tests wrote, to check them with Kafka's own decoders.

The classpath is ``kafka-tools`` 4.3.1 as pinned in ``dump_log_segments/pom.xml``, resolved
once with ``mvn dependency:build-classpath`` (artifacts land in ``~/.m2``) and cached in
``dump_log_segments/build/classpath.txt`` beside the pom's hash (``build/`` is git-ignored), as
``benchmarks/kafka_anchor.py`` does for the benchmarks. Each call is one ``java`` process.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

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
    """Kafka's jars, resolved with Maven once per pom (then cached)."""
    BUILD.mkdir(exist_ok=True)
    cached, stamp = BUILD / "classpath.txt", BUILD / "classpath.stamp"
    pom_hash = hashlib.sha256(POM.read_bytes()).hexdigest()
    if cached.is_file() and stamp.is_file() and stamp.read_text() == pom_hash:
        jars = cached.read_text().strip()
        if all(Path(jar).is_file() for jar in jars.split(":")):
            return jars
    _run(
        [
            "mvn", "-q", "-B", "-f", str(POM), "dependency:build-classpath",
            f"-Dmdep.outputFile={cached}",
        ],
        timeout_s=900,
    )  # fmt: skip
    stamp.write_text(pom_hash)
    return cached.read_text().strip()


def dump(files: Sequence[Path], *flags: str, timeout_s: float = 300) -> DumpOutput:
    """``kafka-dump-log.sh --files <files> <flags>``: what it printed on stdout and stderr."""
    assert files, "nothing to dump"
    command = ["java", "-cp", classpath(), MAIN_CLASS, *flags]
    command += ["--files", ",".join(str(path) for path in files)]
    return _run(command, timeout_s)
