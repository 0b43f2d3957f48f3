"""Kafka's applications as test clients: Kafka Streams programs (``apps/java/``) and Kafka
Connect's distributed worker, run as processes against a bootstrap address.

The jars come from ``apps/pom.xml`` (kafka-streams, connect-runtime, connect-file), resolved
and compiled like the peer's programs (:mod:`tests.kafka_support.maven`). A program prints JSON
lines on stdout; :class:`AppProcess` collects them on a thread so a test can wait on a line
(a condition, never a sleep) while the program runs, e.g. to SIGKILL the worker under it.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.kafka_support import maven
from tests.kafka_support.java_client import JAVA_OPTIONS

APPS = Path(__file__).resolve().parent / "apps"
APPS_POM = APPS / "pom.xml"
APPS_BUILD = APPS / "build"


def apps_classpath() -> str:
    """Classes of ``apps/java`` (compiled when stale) and the jars of ``apps/pom.xml``."""
    return maven.compiled(sorted((APPS / "java").glob("*.java")), APPS_POM, APPS_BUILD)


class AppProcess:
    """One Java process; its stdout JSON lines arrive on a queue, stderr goes to a file."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.log = log
        self._stderr = log.open("w")
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=self._stderr, text=True
        )
        self.answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self.last: dict[str, Any] | None = None
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                self.answers.put(json.loads(line))

    def wait_for(self, key: str, at_least: int | None = None, timeout_s: float = 240) -> Any:
        """The first answer holding ``key`` (with a value ``>= at_least`` if given)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                answer = self.answers.get(timeout=0.5)
            except queue.Empty:
                if self.process.poll() is not None and self.answers.empty():
                    break
                continue
            self.last = answer
            if key in answer and (at_least is None or answer[key] >= at_least):
                return answer[key] if at_least is not None else answer
        raise AssertionError(
            f"{key!r} not answered (last {self.last}, exit {self.process.poll()}); "
            f"stderr:\n{self.stderr_tail()}"
        )

    def stderr_tail(self) -> str:
        self._stderr.flush()
        return self.log.read_text(errors="replace")[-4000:]

    def finish(self, timeout_s: float = 240) -> dict[str, Any]:
        """The answer holding ``table`` (the program's last), then the exit status 0."""
        answer: dict[str, Any] = self.wait_for("table", timeout_s=timeout_s)
        code = self.process.wait(60)
        assert code == 0, f"exit {code}; stderr:\n{self.stderr_tail()}"
        return answer

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)
        self._pump.join(10)
        assert self.process.stdout is not None
        self.process.stdout.close()
        self._stderr.close()


def word_count(
    bootstrap: str,
    app_id: str,
    input_topic: str,
    output_topic: str,
    guarantee: str,
    state_dir: Path,
    expected_words: int,
) -> AppProcess:
    """Start ``apps/java/WordCount.java`` (see its header for what it prints)."""
    command = [
        "java", *JAVA_OPTIONS, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp", apps_classpath(), "WordCount", bootstrap, app_id, input_topic, output_topic,
        guarantee, str(state_dir), str(expected_words),
    ]  # fmt: skip
    return AppProcess(command, state_dir.parent / f"{app_id}.log")
