"""Kafka's own classes on our bytes: builds and runs the Java harness in ``kafka_anchor/``.

Used by ``bench_cleaner.py`` and ``bench_log.py`` (and their smoke test) to put Kafka's figures
beside ours in the same run, on the same files. The harness (``kafka_anchor/src/KafkaAnchor.java``,
whose docstring says what exactly it measures) compiles against ``kafka-clients`` and
``kafka-storage`` 4.3.1 as pinned in ``kafka_anchor/pom.xml``:

1. the classpath is resolved once with ``mvn dependency:build-classpath`` (artifacts land in
   ``~/.m2``) and cached in ``kafka_anchor/build/classpath.txt`` next to the pom's hash;
2. the source is compiled with ``javac`` into ``kafka_anchor/build/classes`` (git-ignored) when it
   or the classpath changed (both by the tests' resolver, ``tests/kafka_support/maven.py``);
3. each measurement is one ``java`` process printing one JSON object.

What must not happen here: timing. The harness times itself (warm JIT, every warm run reported)
and this module only passes files, starts one JVM or several, and parses their answers.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.kafka_support import maven  # the repository root is on the path now

HERE = Path(__file__).resolve().parent / "kafka_anchor"
POM = HERE / "pom.xml"
SOURCE = HERE / "src" / "KafkaAnchor.java"
BUILD = HERE / "build"
MAIN_CLASS = "KafkaAnchor"
#: The JVM's heap: a 128 MiB offset map, two 256 KiB I/O buffers, the batches of an append run.
#: Fixed in size and touched at start (AlwaysPreTouch), so that no timed run pays for the heap's
#: first page faults or for a resize; on transparent huge pages where the kernel grants them
#: (THP "madvise" mode, as our offset map asks for them), which spares the map's random probes
#: most TLB misses (measured on the standard log, one JVM each, a loaded machine: warm rounds
#: 1.00-1.19 s with them against 1.09-1.81 s without); the throughput collector, whose young
#: collections of a run's short-lived records take milliseconds. All of it favours Kafka.
JAVA_OPTIONS = (
    "-Xms1g",
    "-Xmx1g",
    "-XX:+AlwaysPreTouch",
    "-XX:+UseTransparentHugePages",
    "-XX:+UseParallelGC",
)


#: Maven, javac or the harness failed; the message carries the tool's own output.
AnchorError = maven.MavenError
missing_tools = maven.missing_tools


def classpath() -> str:
    """Kafka's jars as a classpath, resolved with Maven once per pom (then cached)."""
    return maven.classpath(POM, BUILD)


def compiled() -> str:
    """The classpath to run the harness with: its classes (compiled if stale) and Kafka's jars."""
    return maven.compiled([SOURCE], POM, BUILD)


def _int(result: dict[str, object], key: str) -> int:
    value = result[key]
    assert isinstance(value, int), (key, value)
    return value


def _float(result: dict[str, object], key: str) -> float:
    value = result[key]
    assert isinstance(value, int | float), (key, value)
    return float(value)


def _harness(args: list[str], timeout_s: float) -> dict[str, object]:
    command = ["java", *JAVA_OPTIONS, "-cp", compiled(), MAIN_CLASS, *args]
    out = maven.run(command, f"Kafka harness {args[0]}", timeout_s)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        raise AnchorError(f"Kafka harness {args[0]}: no JSON in its output:\n{out[-2000:]}")
    result: dict[str, object] = json.loads(lines[-1])
    return result


@dataclasses.dataclass(frozen=True, slots=True)
class KafkaClean:
    """Kafka's cleaner passes over segments: map build + filterTo + write + flush."""

    records: int
    bytes_read: int
    retained_records: int
    retained_bytes: int
    first_s: float  # the first run: cold JIT (what a fresh broker's first round would see)
    times_s: tuple[float, ...]  # every timed (warm) run of every JVM, in order
    output: Path | None  # the cleaned bytes of the last run, when asked to keep them

    @property
    def best_s(self) -> float:
        """Kafka's fastest warm run: the figure every ratio is taken against."""
        return min(self.times_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def worst_s(self) -> float:
        return max(self.times_s)

    @property
    def records_per_s(self) -> float:
        return self.records / self.best_s

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / self.best_s / 1e6


def kafka_clean(
    segments: list[Path],
    out_dir: Path,
    *,
    map_bytes: int = 128 << 20,
    runs: int = 3,
    warmup: int = 2,
    forks: int = 1,
    keep_output: bool = False,
    timeout_s: float = 1800,
) -> KafkaClean:
    """One cleaning round by Kafka's classes over ``segments``: ``forks`` JVMs one after the
    other, each timing ``runs`` rounds after ``warmup`` untimed ones; every timed round is kept
    (:attr:`KafkaClean.best_s` is the fastest of all). Separate JVMs because the JIT's choices
    differ from one JVM to the next (the same log cleaned at 1.6M and at 2.6M records/s by two
    runs of one harness): the best of several is Kafka at its best. The cleaned file of the
    last round goes to ``out_dir`` when ``keep_output``."""
    assert forks >= 1 and runs >= 1, (forks, runs)
    results = []
    for fork in range(forks):
        keep = keep_output and fork == forks - 1
        args = ["clean", str(runs), str(warmup), str(map_bytes), str(out_dir)]
        args += [str(s) for s in segments] + (["--keep"] if keep else [])
        results.append(_harness(args, timeout_s))
    first, last = results[0], results[-1]
    for result in results[1:]:
        same = ("records", "bytes", "retained_records", "retained_bytes")
        if any(result[key] != first[key] for key in same):
            raise AnchorError(f"two runs of Kafka's harness cleaned differently: {first} {result}")
    times: list[float] = []
    for result in results:
        timed = result["times_s"]
        assert isinstance(timed, list) and len(timed) == runs, timed
        times += [float(t) for t in timed]
    output = last.get("output")
    return KafkaClean(
        records=_int(last, "records"),
        bytes_read=_int(last, "bytes"),
        retained_records=_int(last, "retained_records"),
        retained_bytes=_int(last, "retained_bytes"),
        first_s=_float(first, "first_s"),
        times_s=tuple(times),
        output=Path(output) if isinstance(output, str) else None,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class KafkaAppend:
    """Kafka's leader append of batches versus a plain write of them, in one JVM."""

    records: int
    bytes: int
    plain_s: float
    kafka_s: float

    @property
    def ratio(self) -> float:
        """Kafka's append throughput as a share of the plain write's."""
        return self.plain_s / self.kafka_s


def kafka_append(
    batches_file: Path,
    codec: str,
    out_dir: Path,
    *,
    runs: int = 5,
    warmup: int = 2,
    timeout_s: float = 1800,
) -> KafkaAppend:
    """Append the batches of ``batches_file`` (all compressed with ``codec``) as Kafka's leader
    does, and write them plainly, alternating; best of ``runs`` after ``warmup``."""
    result = _harness(
        ["append", str(runs), str(warmup), codec, str(out_dir), str(batches_file)], timeout_s
    )
    return KafkaAppend(
        records=_int(result, "records"),
        bytes=_int(result, "bytes"),
        plain_s=_float(result, "plain_s"),
        kafka_s=_float(result, "kafka_s"),
    )
