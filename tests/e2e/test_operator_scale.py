"""The operator at scale (issue 22 points 4 and 5): ``kubectl apply`` of thousands of Topics
onto one StorageVolume ends with every Topic Ready and every partition on the worker; the
operator's writes are counted through the fake API server's request log.

The e2e tier applies ``LOGKEEPER_SCALE_TOPICS`` Topics (default 600, about a minute and a half on
the 2-core machine); the 10,000-Topic run is opt-in (``LOGKEEPER_SCALE_TOPICS=10000 pytest
tests/e2e/test_operator_scale.py``, 57 minutes on 2026-11-25), and
``benchmarks/bench_operator_scale.py`` runs it and prints the figures. Each Topic has one
partition; every other one is compacted (the empty compacted partitions' cleaner state must not
flap: the quiet window checks it). The Topics
go in two applies, a quarter then the rest, and what is asserted is per Topic: the writes and
bytes per Topic of the second apply are those of the first (they grow linearly with the Topics,
not with those already there) and bounded; a change to one Topic writes one entry of one shard
ConfigMap and that Topic's own status; after the worker's figures settle the operator writes
nothing, also across its restart.

The waits read little: every Topic's Ready condition comes from one watch of the Topics (the
events since the last look, not a list of 10,000 objects per poll), and the worker's partition
count from ``/v1/status?view=summary`` (counts, not 10,000 partition entries).
"""

from __future__ import annotations

import collections
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from storageoperator import topic_set
from tests.e2e.operator_env import GROUP, NS, VERSION, Env, examples, tool
from tests.k8s.fake_apiserver import Write

pytestmark = pytest.mark.e2e

TOPICS = int(os.environ.get("LOGKEEPER_SCALE_TOPICS", "600"))
#: Writes by the operator per Topic applied, at most: kopf's own (finalizer, progress and
#: diff-base annotations: about 2.3), the Topic's entry (1), its status (about 2.8: at creation,
#: then Progressing and Ready from the timer), one Ready event. Measured 7.0 with 300 Topics
#: and 7.1 with 2,000 (flat: linear); the bound leaves room for retries under load.
WRITES_PER_TOPIC_MAX = 10
#: The second apply's writes (and bytes) per Topic over the first's, at most: equal when they
#: grow linearly with the Topics applied; a pass that rewrote what was already there (the
#: first apply's Topics, or shards growing with their content) shows here at any count.
LINEAR_RATIO_MAX = 1.25
#: Bytes the operator sends to the shard ConfigMaps per Topic applied, at most (one entry of
#: about 200 bytes in a merge patch).
SHARD_BYTES_PER_TOPIC_MAX = 1024
#: One Topic's write to its shard: its entry and the patch's wrapping.
ENTRY_WRITE_BYTES_MAX = 1024
#: The operator's status pass interval in this test (the other e2e tests': 1 s).
STATUS_INTERVAL_S = 5.0
#: The operator's settings here: a status pass every 5 s, and the worker's status read in pages
#: of a tenth of the Topics (several pages at any count; 1,000, the default, at 10,000).
OPERATOR_ENV = {
    "LOGKEEPER_STATUS_INTERVAL_S": str(STATUS_INTERVAL_S),
    "LOGKEEPER_STATUS_PAGE_PARTITIONS": str(max(TOPICS // 10, 10)),
}
#: A change to one Topic: its status writes (Progressing, then Ready) and events, at most.
CHANGE_STATUS_WRITES_MAX = 4


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    environment = Env(tmp_path, OPERATOR_ENV)
    try:
        yield environment
    finally:
        environment.stop()


def manifests(first: int, count: int) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Topic",
            "metadata": {"name": f"scale-{n:05d}"},
            "spec": {
                "volume": "demo-volume",
                "partitions": 1,
                # Every other one compacted: thousands of empty compacted partitions, whose
                # reported cleaner state once flipped between idle and LogCleaningInProgress
                # from one status read to the next (the worker's cleaner holds them for its
                # retention pass), so the operator rewrote their status on every pass.
                "config": {"cleanup.policy": "compact" if n % 2 else "delete"}
                | ({} if n % 2 else {"retention.ms": 86_400_000 + n}),
            },
        }
        for n in range(first, first + count)
    ]


def kind_of(write: Write) -> str:
    path = write.path
    for kind in ("configmaps", "events", "storagevolumes", "pods", "statefulsets"):
        if f"/{kind}" in path:
            return kind
    if "/topics" in path:
        return "topics/status" if path.endswith("/status") else "topics"
    return "other"


def operator_writes(writes: list[Write]) -> list[Write]:
    """Writes by the operator: not kubectl's, not the fake kubelet's (pods)."""
    return [w for w in writes if not w.user_agent.startswith("kubectl") and kind_of(w) != "pods"]


class ReadyWatch:
    """Which Topics are Ready, from one watch of the Topics on a thread of its own (its own
    API client): a list once, then only the changes, whatever the count."""

    def __init__(self, env: Env) -> None:
        self._api = kubernetes.client.ApiClient(env.api.configuration)
        self._custom = kubernetes.client.CustomObjectsApi(self._api)
        self._ready: dict[str, int] = {}  # name -> the generation it is Ready at
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.events = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="ready-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            listed = self._custom.list_namespaced_custom_object(GROUP, VERSION, NS, "topics")
            for item in listed["items"]:
                self._see(item, deleted=False)
            version = listed["metadata"]["resourceVersion"]
            watch = kubernetes.watch.Watch()
            while not self._stop.is_set():
                for event in watch.stream(
                    self._custom.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    NS,
                    "topics",
                    resource_version=version,
                    timeout_seconds=60,
                ):
                    self.events += 1
                    self._see(event["object"], deleted=event["type"] == "DELETED")
                    if self._stop.is_set():
                        break
                version = watch.resource_version or version
        except BaseException as exc:  # reported by count()
            self.error = exc
        finally:
            self._api.close()

    def _see(self, topic: dict[str, Any], *, deleted: bool) -> None:
        name = topic["metadata"]["name"]
        generation = next(
            (
                int(c.get("observedGeneration") or 0)
                for c in (topic.get("status") or {}).get("conditions") or ()
                if c["type"] == "Ready" and c["status"] == "True"
            ),
            None,
        )
        with self._lock:
            if deleted or generation is None:
                self._ready.pop(name, None)
            else:
                self._ready[name] = generation

    def count(self) -> int:
        """Topics Ready now (the watch's view)."""
        assert self.error is None, f"the watch of the Topics failed: {self.error!r}"
        assert self._thread.is_alive(), "the watch of the Topics stopped"
        with self._lock:
            return len(self._ready)

    def generation(self, name: str) -> int | None:
        with self._lock:
            return self._ready.get(name)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def worker_partitions(env: Env) -> int:
    """The partitions the worker holds, from its summary view (counts, no partition list); -1
    while it does not answer in time (busy creating thousands of partitions: the wait's
    deadline bounds that)."""
    pod = env.kubelet.pods[(NS, "lk-demo-volume-0")]
    url = f"http://{pod.ip}:8080/v1/status?view=summary"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            status = json.load(response)
    except (urllib.error.URLError, OSError):
        return -1
    return int(status["partitionSummary"]["count"])


def report(figures: dict[str, Any]) -> None:
    print("\nSCALE " + json.dumps(figures, sort_keys=True))


def apply_phase(
    env: Env, watch: ReadyWatch, first: int, count: int, base_partitions: int, budget_s: float
) -> dict[str, Any]:
    """Apply Topics ``first`` .. ``first + count - 1``, wait until each is on the worker and
    Ready; the figures, with the operator's writes from the apply until then."""
    path = env.root / f"topics-{first}.yaml"
    path.write_text(yaml.safe_dump_all(manifests(first, count)), encoding="utf-8")
    mark = len(env.cluster.server.writes)
    started = time.monotonic()
    applied = tool(env, "kubectl", "apply", "-f", str(path), timeout_s=60 + count * 0.1)
    assert applied.stdout.count("created") == count
    apply_s = time.monotonic() - started
    total = first + count
    wait(
        env,
        lambda: worker_partitions(env) == base_partitions + total,
        f"{total} partitions on the worker",
        budget_s,
    )
    on_worker_s = time.monotonic() - started
    wait(env, lambda: watch.count() == total, f"{total} Topics Ready", budget_s)
    ready_s = time.monotonic() - started
    writes = operator_writes(env.cluster.call(lambda: env.cluster.server.writes[mark:]))
    shard_writes = [w for w in writes if kind_of(w) == "configmaps"]
    return {
        "topics": count,
        "apply_s": round(apply_s, 1),
        "all_on_worker_s": round(on_worker_s, 1),
        "all_ready_s": round(ready_s, 1),
        "operator_writes": len(writes),
        "operator_writes_by_kind": dict(collections.Counter(kind_of(w) for w in writes)),
        "operator_write_bytes": sum(w.body_bytes for w in writes),
        "shard_writes": len(shard_writes),
        "shard_write_bytes": sum(w.body_bytes for w in shard_writes),
        "largest_shard_write_bytes": max(w.body_bytes for w in shard_writes),
        "writes_per_topic": round(len(writes) / count, 3),
        "write_bytes_per_topic": round(sum(w.body_bytes for w in writes) / count, 1),
    }


def test_thousands_of_topics_reach_the_worker_with_linear_writes(env: Env) -> None:
    volume, _ = examples()
    volume["spec"]["worker"]["configReloadIntervalMs"] = 500
    env.custom.create_namespaced_custom_object(GROUP, VERSION, NS, "storagevolumes", volume)
    env.kubelet.wait_ready(NS, "lk-demo-volume-0")
    # Settled: the volume's own pass (children, 32 empty shards) is done.
    env.wait(lambda: ready(env), "volume Ready")
    env.wait(lambda: worker_partitions(env) >= 0, "the worker's status")
    base_partitions = worker_partitions(env)  # its own topics' (__consumer_offsets ...)
    budget_s = 120 + TOPICS * 0.3
    watch = ReadyWatch(env)
    try:
        started = time.monotonic()
        first = apply_phase(env, watch, 0, TOPICS // 4, base_partitions, budget_s)
        second = apply_phase(
            env, watch, TOPICS // 4, TOPICS - TOPICS // 4, base_partitions, budget_s
        )
        total_s = time.monotonic() - started
        sizes = [
            len(json.dumps(c.data or {}))
            for c in env.core.list_namespaced_config_map(
                NS, label_selector=topic_set.SHARD_LABEL
            ).items
        ]
        figures = {
            "topics": TOPICS,
            "first_apply": first,
            "second_apply": second,
            "all_ready_s": round(total_s, 1),
            "largest_shard_bytes": max(sizes),
            "shards": len(sizes),
            "watch_events": watch.events,
        }
        report(figures)
        assert len(sizes) == topic_set.SHARDS
        assert max(sizes) < topic_set.SHARD_BYTES_MAX
        for phase in (first, second):
            count = phase["topics"]
            assert phase["operator_writes"] <= WRITES_PER_TOPIC_MAX * count, figures
            assert phase["shard_writes"] <= count, figures
            assert phase["shard_write_bytes"] <= SHARD_BYTES_PER_TOPIC_MAX * count, figures
            assert phase["largest_shard_write_bytes"] <= ENTRY_WRITE_BYTES_MAX, figures
        # Linear: the second apply costs per Topic what the first did, though four times as
        # many Topics were there (the shard bytes allow a longer name's few bytes more).
        for key in ("writes_per_topic", "write_bytes_per_topic"):
            assert second[key] <= LINEAR_RATIO_MAX * first[key], (key, figures)
        shard_per_topic = [p["shard_write_bytes"] / p["topics"] for p in (first, second)]
        assert shard_per_topic[1] <= shard_per_topic[0] + 16, figures

        # The worker's figures (its first cleaner and retention passes over thousands of new
        # partitions) settle: the operator then writes nothing for a window of three status
        # passes. An operator that kept writing (a flapping cleaner state) never gets one.
        settle_started = time.monotonic()
        quiet_window(env, 3 * STATUS_INTERVAL_S, budget_s)
        settled_s = time.monotonic() - settle_started

        # A change to one Topic writes its entry (one patch of one shard) and its own status.
        changed_name = f"scale-{7:05d}"
        mark = len(env.cluster.server.writes)
        env.custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, "topics", changed_name, {"spec": {"partitions": 2}}
        )
        wait(
            env,
            lambda: worker_partitions(env) == base_partitions + TOPICS + 1,
            "the new partition on the worker",
            budget_s,
        )
        wait(env, lambda: watch.generation(changed_name) == 2, "the changed Topic Ready", budget_s)
        # One more status pass: whatever the change makes the operator write is written.
        quiet_window(env, 2 * STATUS_INTERVAL_S, budget_s)
        later = operator_writes(env.cluster.call(lambda: env.cluster.server.writes[mark:]))
        by_kind = collections.Counter(kind_of(w) for w in later)
        report(
            {
                "settled_s": round(settled_s, 1),
                "change_writes": dict(by_kind),
                "change_write_bytes": sum(w.body_bytes for w in later),
            }
        )
        (changed,) = [w for w in later if kind_of(w) == "configmaps"]
        name = topic_set.shard_name("demo-volume", topic_set.shard_of(changed_name))
        assert changed.path.endswith(f"/configmaps/{name}") and changed.method == "PATCH"
        assert changed.body_bytes <= ENTRY_WRITE_BYTES_MAX
        topic_writes = [w for w in later if kind_of(w) in ("topics", "topics/status")]
        assert all(
            w.path.split("?")[0].removesuffix("/status").endswith(f"/topics/{changed_name}")
            for w in topic_writes
        ), [w.path for w in topic_writes]
        assert 1 <= by_kind["topics/status"] <= CHANGE_STATUS_WRITES_MAX, by_kind
        assert by_kind["events"] <= CHANGE_STATUS_WRITES_MAX, by_kind
        # And the volume's totals (one more partition): its summary, no per-Topic figure.
        assert by_kind["storagevolumes"] <= 2, by_kind
        assert set(by_kind) <= {"configmaps", "topics", "topics/status", "events", "storagevolumes"}
    finally:
        watch.stop()

    # An operator restart resumes every Topic and writes no shard and no Topic status.
    env.stop_operator()
    resumed_from = env.logs().count("Handler 'topic_changed' succeeded")
    mark = len(env.cluster.server.writes)
    started = time.monotonic()
    env.start_operator(OPERATOR_ENV)
    wait(
        env,
        lambda: env.logs().count("Handler 'topic_changed' succeeded") - resumed_from >= TOPICS,
        "every Topic resumed",
        budget_s,
    )
    resumed = operator_writes(env.cluster.call(lambda: env.cluster.server.writes[mark:]))
    by_kind = collections.Counter(kind_of(w) for w in resumed)
    report({"restart_resumed_s": round(time.monotonic() - started, 1), "restart_writes": by_kind})
    assert by_kind["configmaps"] == 0 and by_kind["topics/status"] == 0, by_kind


def wait(env: Env, check: Callable[[], bool], what: str, timeout_s: float) -> None:
    """Env.wait, polling every second (each check is one request)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(1.0)
    raise AssertionError(f"timed out waiting for {what}\n{env.logs()[-6000:]}")


def quiet_window(env: Env, window_s: float, timeout_s: float) -> None:
    """Wait until the operator wrote nothing for ``window_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        before = len(env.cluster.server.writes)
        time.sleep(window_s)
        late = operator_writes(env.cluster.call(lambda b=before: env.cluster.server.writes[b:]))
        if not late:
            return
        assert time.monotonic() < deadline, collections.Counter(kind_of(w) for w in late)


def ready(env: Env) -> bool:
    condition = env.condition("storagevolumes", "demo-volume", "Ready")
    return condition is not None and condition["status"] == "True"
