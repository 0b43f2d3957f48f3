"""Kafka's jars for the tests: the classpath of ``pom.xml`` and the tests' own Java programs.

1. ``classpath()`` resolves ``pom.xml`` once with ``mvn dependency:build-classpath`` (the first
   run downloads into ``~/.m2``) and caches it in ``build/classpath.txt`` beside the pom's hash;
2. ``compiled()`` compiles ``java/*.java`` with ``javac`` into ``build/classes`` (git-ignored)
   when a source or the classpath changed, and returns the classpath to run them with;
3. ``classpath(SPARK_CONNECTOR / "pom.xml", ...)`` resolves Spark's Kafka connector the same way;
4. ``compiled(..., APPS / "pom.xml", ...)`` Kafka Streams and Connect and ``apps/java/*.java``.

``python -m tests.kafka_support.maven`` does all three (``scripts/setup.sh dev`` calls it, so a
fresh machine fetches Kafka before the tests run). Without ``mvn``/``javac``/``java`` it says
so and exits 0: the tests that need Kafka then skip, naming the missing tools.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
SOURCES = HERE / "java"
BUILD = HERE / "build"
#: Spark's Kafka connector for the pyspark of the venv (tests/kafka_support/spark_kafka.py).
SPARK_CONNECTOR = HERE / "spark_connector"
#: Kafka Streams, Kafka Connect and the tests' programs for them (tests/kafka_support/apps).
APPS = HERE / "apps"


class MavenError(RuntimeError):
    """Maven, javac or a Java program failed; the message carries the tool's own output."""


def missing_tools() -> list[str]:
    """The tools Kafka's peer needs that are not on PATH (empty: it can run)."""
    return [tool for tool in ("mvn", "javac", "java") if shutil.which(tool) is None]


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def _shown(command: list[str]) -> str:
    """The command as text, with a classpath (hundreds of jar paths) cut to its first."""
    return " ".join(
        part.split(":", 1)[0] + ":..." if part.count(":") > 2 else part for part in command
    )


def run(command: list[str], what: str, timeout_s: float) -> str:
    """``command``'s stdout; a failure or a timeout raises MavenError with its output."""
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise MavenError(f"{what}: no answer within {timeout_s:.0f} s: {_shown(command)}") from exc
    if done.returncode != 0:
        raise MavenError(
            f"{what} failed (exit {done.returncode}): {_shown(command)}\n"
            f"{done.stdout[-4000:]}{done.stderr[-4000:]}"
        )
    return done.stdout


def classpath(pom: Path = POM, build: Path = BUILD) -> str:
    """The jars of ``pom`` as a classpath, resolved with Maven once per pom (then cached in
    ``build``)."""
    build = build.resolve()  # Maven reads a relative output file against the pom's directory
    build.mkdir(exist_ok=True)
    cached, stamp = build / "classpath.txt", build / "classpath.stamp"
    pom_hash = _digest(pom.read_bytes())
    if cached.is_file() and stamp.is_file() and stamp.read_text() == pom_hash:
        jars = cached.read_text().strip()
        if all(Path(jar).is_file() for jar in jars.split(":")):
            return jars
    # -B: no colours or progress in the output; -q: only errors. First run downloads to ~/.m2.
    run(
        [
            "mvn", "-q", "-B", "-f", str(pom), "dependency:build-classpath",
            f"-Dmdep.outputFile={cached}",
        ],
        "mvn dependency:build-classpath",
        timeout_s=900,
    )  # fmt: skip
    stamp.write_text(pom_hash)
    return cached.read_text().strip()


def compiled(sources: list[Path] | None = None, pom: Path = POM, build: Path = BUILD) -> str:
    """The classpath to run Java programs with: their classes (compiled if stale) and the jars
    of ``pom``. By default the tests' own programs (``java/*.java``); the benchmarks' Kafka
    harness passes its own source, pom and build dir."""
    jars = classpath(pom, build)
    sources = sorted(SOURCES.glob("*.java")) if sources is None else sources
    classes, stamp = build / "classes", build / "classes.stamp"
    source_hash = _digest(*(s.read_bytes() for s in sources), jars.encode())
    if not (stamp.is_file() and stamp.read_text() == source_hash):
        shutil.rmtree(classes, ignore_errors=True)
        classes.mkdir(parents=True)
        run(
            ["javac", "-nowarn", "-d", str(classes), "-cp", jars, *map(str, sources)],
            "javac",
            timeout_s=300,
        )
        stamp.write_text(source_hash)
    return f"{classes}:{jars}"


def main() -> int:
    missing = missing_tools()
    if missing:
        print(f"kafka peer: {', '.join(missing)} not found; the Kafka peer tests will skip")
        return 0
    compiled()
    classpath(SPARK_CONNECTOR / "pom.xml", SPARK_CONNECTOR / "build")
    # Kafka Streams and Kafka Connect (tests/kafka_support/kafka_apps.py) and their programs.
    compiled(sorted((APPS / "java").glob("*.java")), APPS / "pom.xml", APPS / "build")
    print(
        f"kafka peer: Kafka's jars, Streams, Connect and Spark's Kafka connector resolved, the "
        f"Java programs built in {BUILD} and {APPS / 'build'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
