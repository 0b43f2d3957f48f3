"""``logkeeper serve`` as a real process on a temporary directory, driven over HTTP.

Data is written before the worker starts (with storagecore, as a previous worker would have
left it; the Kafka protocol listener is a later issue), then the tests watch the worker act on
it through ``/v1/status``, ``/metrics`` and the files.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from storagecore import LogConfig, LogManager, NewRecord, TopicPartition, build_batch
from storagecore.records.batch import iter_complete_batches

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[3]
SETTINGS = """\
cleaner: {threads: 1, dedupeBufferBytes: 4194304, backoffMs: 100}
retentionCheckIntervalMs: 200
worker:
  configReloadIntervalMs: 100
  flushCheckIntervalMs: 100
  checkpointIntervalMs: 200
  deleteCheckIntervalMs: 100
  shutdownGracePeriodMs: 20000
"""


def topic(name: str, partitions: int, config: dict[str, object]) -> str:
    body = "".join(f'    {k}: "{v}"\n' for k, v in config.items())
    return (
        "apiVersion: logkeeper.io/v1alpha1\nkind: Topic\n"
        f"metadata: {{name: {name}}}\nspec:\n  partitions: {partitions}\n  config:\n{body}"
    )


LAZY_COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": 4096,
    "min.cleanable.dirty.ratio": 1.0,  # never cleaned on its own: only on compact-now
}


class Served:
    """One ``logkeeper serve`` process; its stdout lines arrive on a queue."""

    #: What runs ``serve`` and its arguments (a subclass may run a wrapper of the CLI).
    command: tuple[str, ...] = (sys.executable, "-m", "logkeeper.cli")

    def __init__(self, root: Path, *extra: str) -> None:
        self.root = root
        self.stderr = open(root / f"serve-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                *self.command,
                "serve",
                "--data-dir",
                str(root / "data"),
                "--topics",
                str(root / "topics"),
                "--settings",
                str(root / "settings.yaml"),
                "--http-port",
                "0",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()
        listening = self.expect("listening on")
        self.base = listening.split("listening on ", 1)[1].strip()
        self.kafka_address = ""
        if "--kafka-port" in extra:
            self.kafka_address = self.expect("kafka on").split("kafka on ", 1)[1].strip()
        self.expect("ready")

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def expect(self, text: str, timeout_s: float = 60) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            if text in line:
                return line
        raise AssertionError(f"no {text!r} from serve; stderr:\n{self.log_text()}")

    def log_text(self) -> str:
        if not self.stderr.closed:  # closed once the process ended (terminate, kill)
            self.stderr.flush()
        return Path(self.stderr.name).read_text(encoding="utf-8")

    def request(self, method: str, path: str, token: str | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(
            self.base + path, method=method, data=b"" if method == "POST" else None
        )
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def status(self) -> dict[str, Any]:
        code, body = self.request("GET", "/v1/status")
        assert code == 200
        document: dict[str, Any] = json.loads(body)
        return document

    def partition(self, name: str) -> dict[str, Any]:
        for entry in self.status()["partitions"]:
            if f"{entry['topic']}-{entry['partition']}" == name:
                return entry
        raise AssertionError(f"{name} not in status")

    def metrics(self) -> dict[str, float]:
        code, body = self.request("GET", "/metrics")
        assert code == 200
        samples: dict[str, float] = {}
        for family in text_string_to_metric_families(body.decode()):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                samples[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
        return samples

    def post(self, path: str, token: str | None = None) -> dict[str, Any]:
        code, body = self.request("POST", path, token)
        document: dict[str, Any] = json.loads(body)
        document["_code"] = code
        return document

    def _close(self) -> None:
        self._pump_thread.join(10)
        assert self.process.stdout is not None
        self.process.stdout.close()
        self.stderr.close()

    def terminate(self, timeout_s: float = 30) -> int:
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout_s)
        self._close()
        return code

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self._close()


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    yield tmp_path


def declare(root: Path, *documents: str) -> None:
    # Written then renamed, as a ConfigMap update lands: never half a file.
    target = root / "topics" / "topics.yaml"
    temporary = root / "topics" / ".topics.tmp"
    temporary.write_text("---\n".join(documents), encoding="utf-8")
    temporary.replace(target)


def prefill(
    root: Path, name: str, config: dict[str, object], records: int, keys: int, seed: int = 5
) -> dict[bytes, bytes]:
    """Write keyed records as a previous worker would have; the latest value per key."""
    log_config = LogConfig.from_topic_config(config)
    latest: dict[bytes, bytes] = {}
    with LogManager([root / "data"], default_config=log_config) as manager:
        log = manager.get_or_create_log(TopicPartition(name, 0))
        rng = random.Random(seed)
        for first in range(0, records, 50):
            batch = []
            for i in range(first, min(first + 50, records)):
                key = b"key-%05d" % rng.randrange(keys)
                value = b"value-%d-%07d-" % (seed, i) + b"x" * 40
                latest[key] = value
                batch.append(NewRecord(key=key, value=value, timestamp=int(time.time() * 1000)))
            log.append(build_batch(batch))
        log.roll()
    return latest


def segment_bytes(root: Path, name: str) -> int:
    return sum(p.stat().st_size for p in (root / "data" / name).glob("*.log"))


def test_topics_appear_and_changes_apply_live(root: Path) -> None:
    declare(root, topic("orders", 1, {"retention.ms": 86_400_000}))
    served = Served(root)
    try:
        assert served.request("GET", "/healthz") == (200, b"ok\n")
        assert served.request("GET", "/readyz")[0] == 200
        assert [p["topic"] for p in served.status()["partitions"]] == ["orders"]
        declare(
            root,
            topic("orders", 3, {"retention.ms": 86_400_000}),
            topic("profiles", 1, {"cleanup.policy": "compact"}),
        )
        wait_for(lambda: len(served.status()["partitions"]) == 4, "new partitions")
        assert (root / "data" / "orders-2").is_dir() and (root / "data" / "profiles-0").is_dir()
        declare(
            root,
            topic("orders", 3, {"cleanup.policy": "compact,delete"}),
            topic("profiles", 1, {"cleanup.policy": "compact"}),
        )
        wait_for(
            lambda: served.partition("orders-0")["cleanupPolicy"] == "compact,delete",
            "config change",
        )
        status = served.status()
        assert status["config"]["reloads"] == 2 and status["config"]["topics"]["ok"]
        assert served.metrics()["logkeeper_config_reloads_total"] == 2
    finally:
        assert served.terminate() == 0


def test_pause_resume_and_compact_now_over_http(root: Path) -> None:
    latest = prefill(root, "profiles", LAZY_COMPACTED, records=3000, keys=100)
    declare(root, topic("profiles", 1, LAZY_COMPACTED))
    size_before = segment_bytes(root, "profiles-0")
    served = Served(root)
    try:
        before = served.metrics()
        assert before["logkeeper_cleaner_runs_total"] == 0
        assert before["logkeeper_log_size_bytes{partition=0,topic=profiles}"] == size_before
        paused = served.post("/v1/topics/profiles/pause-cleaning")
        assert paused["_code"] == 200
        entry = served.partition("profiles-0")
        assert entry["pausedCleaning"] and entry["cleanerState"] == "LogCleaningPaused"
        assert entry["pauseReasons"] == ["cleaning paused: admin API, topic"]
        assert paused["partitions"]["profiles-0"]["cleanerState"] == "LogCleaningPaused"
        # compact-now on a paused partition ends at once: refused, with the reason.
        refused = served.post("/v1/topics/profiles/compact-now")
        assert refused["requested"] == ["profiles-0"]
        outcome = refused["partitions"]["profiles-0"]
        assert outcome["state"] == "refused" and outcome["detail"] == "cleaning is paused"
        entry = served.partition("profiles-0")
        assert not entry["compactNowPending"] and entry["compactNow"]["state"] == "refused"
        assert entry["lastClean"] is None
        assert segment_bytes(root, "profiles-0") == size_before
        resumed = served.post("/v1/topics/profiles/resume-cleaning")
        assert resumed["partitions"]["profiles-0"]["cleanerState"] == "idle"
        # Below min.cleanable.dirty.ratio (LAZY): only compact-now cleans it; it ends done.
        asked = served.post("/v1/topics/profiles/compact-now")["partitions"]["profiles-0"]
        assert asked["state"] in ("pending", "done")
        wait_for(lambda: served.partition("profiles-0")["compactNow"]["state"] == "done", "done")
        entry = served.partition("profiles-0")
        assert not entry["pausedCleaning"] and not entry["compactNowPending"]
        assert entry["lastClean"]["messages_written"] <= len(latest) + 50
        assert entry["compactNow"]["detail"].startswith("cleaned up to offset ")
        # Once clean, another compact-now has nothing to clean and says so at once.
        again = served.post("/v1/topics/profiles/compact-now")["partitions"]["profiles-0"]
        assert again["state"] == "nothing-to-clean", again
        assert again["detail"].startswith("nothing to clean: no dirty bytes in [")
        after = served.metrics()
        assert after["logkeeper_cleaner_runs_total"] >= 1
        assert after["logkeeper_cleaner_records_removed_total"] >= 3000 - len(latest) - 50
        assert after["logkeeper_log_size_bytes{partition=0,topic=profiles}"] < size_before
        assert segment_bytes(root, "profiles-0") < size_before
        # Unknown topics and verbs are named.
        assert "unknown topic 'nope'" in served.post("/v1/topics/nope/pause-cleaning")["error"]
        assert served.post("/v1/volume/explode")["_code"] == 404
        assert served.post("/v1/volume/pause-retention")["_code"] == 200
        assert served.partition("profiles-0")["pausedRetention"]
    finally:
        assert served.terminate() == 0


def test_admin_calls_need_the_token_when_one_is_set(root: Path) -> None:
    (root / "token").write_text("s3cret\n", encoding="utf-8")
    (root / "settings.yaml").write_text(
        SETTINGS.replace("worker:\n", f"worker:\n  adminTokenFile: {root / 'token'}\n"),
        encoding="utf-8",
    )
    declare(root, topic("t", 1, {}))
    served = Served(root)
    try:
        assert served.post("/v1/volume/pause-cleaning")["_code"] == 401
        assert served.post("/v1/volume/pause-cleaning", token="wrong")["_code"] == 401
        assert served.post("/v1/volume/pause-cleaning", token="s3cret")["_code"] == 200
        assert served.request("GET", "/v1/status")[0] == 200  # reads need no token
    finally:
        assert served.terminate() == 0


def test_a_broken_topic_file_changes_nothing_on_disk(root: Path) -> None:
    config = {"cleanup.policy": "delete", "segment.bytes": 4096}
    prefill(root, "events", config, records=500, keys=500)
    declare(root, topic("events", 1, config))
    served = Served(root)
    try:

        def snapshot() -> list[tuple[str, int]]:
            return sorted(
                (str(p.relative_to(root / "data")), p.stat().st_size)
                for p in (root / "data").rglob("*")
                if p.is_file() and "checkpoint" not in p.name and p.name != ".lock"
            )

        before = snapshot()
        (root / "topics" / "topics.yaml").write_text("kind: Topic\nspec: [broken", encoding="utf-8")
        wait_for(lambda: not served.status()["config"]["topics"]["ok"], "the error in status")
        status = served.status()
        assert "not valid YAML" in status["config"]["topics"]["error"]
        assert [p["topic"] for p in status["partitions"]] == ["events"]
        metrics = served.metrics()
        assert metrics["logkeeper_config_errors_total"] >= 1
        assert metrics["logkeeper_config_ok{file=topics}"] == 0
        declare(root)  # an empty set parses: the topic is orphaned, never deleted (Retain)
        wait_for(lambda: served.status()["orphanedLogs"] == ["events-0"], "orphaned")
        time.sleep(0.5)
        assert snapshot() == before
        assert "Configuration rejected" in served.log_text()
    finally:
        assert served.terminate() == 0


def test_sigterm_leaves_a_clean_shutdown_and_the_next_start_skips_recovery(root: Path) -> None:
    prefill(root, "t", {"segment.bytes": 4096}, records=200, keys=10)
    declare(root, topic("t", 1, {"segment.bytes": 4096}))
    served = Served(root)
    started = time.monotonic()
    assert served.terminate() == 0
    assert time.monotonic() - started < 20  # within the configured grace period
    assert (root / "data" / ".kafka_cleanshutdown").exists()
    served = Served(root)
    try:
        assert served.status()["dirs"][0]["hadCleanShutdown"]
        assert "(clean shutdown)" in served.log_text()
    finally:
        served.kill()
    assert not (root / "data" / ".kafka_cleanshutdown").exists()
    served = Served(root)
    try:
        assert not served.status()["dirs"][0]["hadCleanShutdown"]
        assert "(unclean shutdown)" in served.log_text()
        assert served.partition("t-0")["logEndOffset"] == 200
    finally:
        assert served.terminate() == 0


def test_sigkill_during_cleaning_loses_nothing(root: Path) -> None:
    config = {**LAZY_COMPACTED, "segment.bytes": 8192}
    declare(root, topic("c", 1, config))
    # A slow cleaner so that a clean lasts long enough to be killed in the middle: Kafka's
    # throttler lets the first 300 ms run at full speed, then sleeps off the excess.
    (root / "settings.yaml").write_text(
        SETTINGS.replace("backoffMs: 100}", "backoffMs: 100, ioMaxBytesPerSecond: 200000}"),
        encoding="utf-8",
    )
    rng = random.Random(11)
    latest: dict[bytes, bytes] = {}
    killed_while_cleaning = 0
    for round_ in range(3):
        latest.update(prefill(root, "c", config, records=15000, keys=300, seed=round_))
        served = Served(root)
        served.post("/v1/topics/c/compact-now")

        def cleaning(served: Served = served) -> bool:
            threads = served.status()["cleaner"]["threads"]
            return any(t["cleaning"] == "c-0" for t in threads)

        wait_for(cleaning, "the clean to start")
        time.sleep(rng.uniform(0.0, 1.0))
        killed_while_cleaning += cleaning()
        served.kill()
        with LogManager([root / "data"]) as manager:
            log = manager.get_log(TopicPartition("c", 0))
            seen: dict[bytes, bytes] = {}
            offsets: list[int] = []
            position = log.log_start_offset
            while position < log.log_end_offset:
                fetched = log.read(position, 1 << 20)
                assert fetched is not None
                for _, batch in iter_complete_batches(fetched.records):
                    for record in batch.records():
                        assert record.key is not None and record.value is not None
                        seen[record.key] = record.value
                        offsets.append(record.offset)
                position = fetched.next_offset
            assert seen == latest
            assert offsets == sorted(set(offsets))
            leftovers = [
                p.name for p in log.directory.iterdir() if p.suffix in (".cleaned", ".swap")
            ]
            assert leftovers == []
    assert killed_while_cleaning >= 1


def test_pausing_a_running_clean_aborts_it_safely_and_resume_reschedules(root: Path) -> None:
    config = {**LAZY_COMPACTED, "segment.bytes": 8192}
    latest = prefill(root, "c", config, records=15000, keys=300)
    declare(root, topic("c", 1, config))
    slow = SETTINGS.replace("backoffMs: 100}", "backoffMs: 100, ioMaxBytesPerSecond: 200000}")
    (root / "settings.yaml").write_text(slow, encoding="utf-8")
    served = Served(root)
    try:
        served.post("/v1/topics/c/compact-now")

        def cleaning() -> bool:
            return any(t["cleaning"] == "c-0" for t in served.status()["cleaner"]["threads"])

        wait_for(cleaning, "the clean to start")
        # LogCleaningInProgress -> LogCleaningAborted -> LogCleaningPaused: the call returns
        # once the clean has stopped and removed its files.
        assert served.post("/v1/topics/c/pause-cleaning")["_code"] == 200
        entry = served.partition("c-0")
        assert entry["cleanerState"] == "LogCleaningPaused" and entry["lastClean"] is None
        # The pause ended the compact-now request: aborted, not left pending.
        assert entry["compactNow"]["state"] == "aborted" and not entry["compactNowPending"]
        assert not cleaning()
        directory = root / "data" / "c-0"
        assert [p.name for p in directory.iterdir() if p.suffix in (".cleaned", ".swap")] == []
        assert served.metrics()["logkeeper_cleaner_aborted_runs_total"] == 1
        # Lift the I/O limit live (a settings reload), then resume: the clean runs to the end.
        (root / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
        wait_for(
            lambda: served.status()["settings"]["ioMaxBytesPerSecond"] is None, "settings reload"
        )
        assert served.post("/v1/topics/c/resume-cleaning")["_code"] == 200
        asked = served.post("/v1/topics/c/compact-now")["partitions"]["c-0"]
        assert asked["state"] == "pending", asked
        wait_for(lambda: served.partition("c-0")["compactNow"]["state"] == "done", "the clean")
        entry = served.partition("c-0")
        assert entry["cleanerState"] == "idle"
        # The whole dirty section in one round (groups the aborted round had already swapped
        # in were clean, valid segments: they are read again with fewer records).
        assert (entry["lastClean"]["first_dirty_offset"], entry["lastClean"]["end_offset"]) == (
            0,
            15000,
        )
        assert entry["lastClean"]["messages_written"] <= len(latest) + 50
    finally:
        assert served.terminate() == 0
    assert read_latest(root, "c") == latest


def read_latest(root: Path, name: str) -> dict[bytes, bytes]:
    """Every key's last value, read back through a LogManager (the worker must be stopped)."""
    seen: dict[bytes, bytes] = {}
    with LogManager([root / "data"]) as manager:
        log = manager.get_log(TopicPartition(name, 0))
        position = log.log_start_offset
        while position < log.log_end_offset:
            fetched = log.read(position, 1 << 20)
            assert fetched is not None
            for _, batch in iter_complete_batches(fetched.records):
                for record in batch.records():
                    assert record.key is not None and record.value is not None
                    seen[record.key] = record.value
            position = fetched.next_offset
    return seen
