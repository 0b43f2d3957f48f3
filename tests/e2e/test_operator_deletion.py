"""End to end, deletion: the deletion policy honoured through the finalizer (Retain keeps the
data and reports it, Delete removes it), 409 and 500 answers retried, and a deletion with the
worker gone released with a Warning event."""

from __future__ import annotations

import kubernetes
import pytest

from tests.e2e.operator_env import GROUP, NS, VERSION, Env, examples, ready

pytestmark = pytest.mark.e2e


def test_deletion_policy_and_retried_errors(env: Env) -> None:
    volume, _ = examples()
    env.custom.create_namespaced_custom_object(GROUP, VERSION, NS, "storagevolumes", volume)
    for name, policy in (("kept", "Retain"), ("dropped", "Delete")):
        env.custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            "topics",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Topic",
                "metadata": {"name": name},
                "spec": {"volume": "demo-volume", "partitions": 1, "deletionPolicy": policy},
            },
        )
    env.kubelet.wait_ready(NS, "lk-demo-volume-0")
    for name in ("kept", "dropped"):
        env.wait(lambda n=name: ready(env, "topics", n), f"{name} Ready")
    pod = env.kubelet.pods[(NS, "lk-demo-volume-0")]
    assert (pod.data_dir / "logs" / "dropped-0").is_dir()

    # A 500 and a 409 on the next ConfigMap writes: retried, the change still lands.
    env.cluster.call(lambda: env.cluster.server.inject("PATCH", "/configmaps/", 500))
    env.cluster.call(lambda: env.cluster.server.inject("PATCH", "/configmaps/", 409))
    for name in ("kept", "dropped"):
        env.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "topics", name)

    def gone(name: str) -> bool:
        try:
            env.get("topics", name)
        except kubernetes.client.ApiException as exc:
            return exc.status == 404
        return False

    env.wait(lambda: gone("kept") and gone("dropped"), "both Topics deleted")
    status = env.worker_status()
    assert status["orphanedLogs"] == ["kept-0"]  # Retain: the data stays, reported
    assert not any(p["topic"] == "dropped" for p in status["partitions"])  # Delete: gone
    assert (pod.data_dir / "logs" / "kept-0").is_dir()
    assert not (pod.data_dir / "logs" / "dropped-0").exists()
    injected = [w for w in env.cluster.server.writes if w.status in (409, 500)]
    assert len(injected) >= 2
    assert "retrying" in env.logs()

    # With the worker gone, a deletion does not hang: the finalizer is released with a Warning
    # event that says what may be left.
    env.custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        NS,
        "topics",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Topic",
            "metadata": {"name": "late"},
            "spec": {"volume": "demo-volume", "partitions": 1, "deletionPolicy": "Delete"},
        },
    )
    env.wait(lambda: ready(env, "topics", "late"), "late Ready")
    pod.process.terminate()
    pod.process.wait(30)
    env.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "topics", "late")
    env.wait(lambda: gone("late"), "the finalizer released without the worker", timeout_s=30)
    events = env.core.list_namespaced_event(NS).items
    warnings = [e for e in events if e.reason == "DeletedUnconfirmed"]
    assert warnings and "late" in warnings[0].message and warnings[0].type == "Warning"
