"""End to end, the worker's NetworkPolicy (created with the volume, following the spec,
removed when turned off) and the operator's own /metrics and liveness endpoint."""

from __future__ import annotations

import socket
import urllib.request
from typing import Any

import kubernetes
import pytest

from tests.e2e.operator_env import GROUP, NS, VERSION, Env, examples, ready

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    """The operator's /metrics: sample (name with labels) → value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_network_policy_follows_the_volume_and_the_operator_counts(env: Env) -> None:
    """The worker's NetworkPolicy is created with the volume (owned by it: the garbage
    collector, which the fake does not run, removes it with the volume), follows a change of
    spec.kafka.allowedNamespaces, refuses bad names at admission, and is deleted when the
    operator runs with NetworkPolicies turned off. The operator's /metrics counts handler runs,
    a handler error and failed worker status reads."""
    networking = kubernetes.client.NetworkingV1Api(env.api)
    port, liveness = free_port(), free_port()
    env.stop_operator()
    env.start_operator(
        {
            "LOGKEEPER_OPERATOR_NAMESPACE": "ops",
            "LOGKEEPER_OPERATOR_POD_LABELS": "app.kubernetes.io/name=logkeeper,"
            "app.kubernetes.io/instance=lk,app.kubernetes.io/component=operator",
            "LOGKEEPER_NETWORK_POLICY_METRICS_NAMESPACES": "monitoring",
        },
        "--metrics-address",
        f"127.0.0.1:{port}",
        "--liveness",
        f"http://127.0.0.1:{liveness}/healthz",
    )
    volume, _ = examples()
    env.custom.create_namespaced_custom_object(GROUP, VERSION, NS, "storagevolumes", volume)

    def policy() -> dict[str, Any]:
        read = networking.read_namespaced_network_policy("lk-demo-volume", NS)
        return dict(env.api.sanitize_for_serialization(read))

    def peers(port_number: int) -> list[dict[str, Any]]:
        (rule,) = [r for r in policy()["spec"]["ingress"] if r["ports"][0]["port"] == port_number]
        return list(rule["_from"] if "_from" in rule else rule["from"])

    env.wait(lambda: policy() is not None, "the NetworkPolicy")
    created = policy()
    owner = env.get("storagevolumes", "demo-volume")["metadata"]["uid"]
    assert [o["uid"] for o in created["metadata"]["ownerReferences"]] == [owner]
    assert created["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "logkeeper",
        "logkeeper.io/volume": "demo-volume",
    }
    (kafka_peer,) = peers(9092)
    assert kafka_peer["namespaceSelector"]["matchExpressions"][0]["values"] == [NS]
    operator_peer, monitoring_peer = peers(8080)
    assert operator_peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "ops"
    }
    assert operator_peer["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "lk"
    assert monitoring_peer["namespaceSelector"]["matchExpressions"][0]["values"] == ["monitoring"]

    # A spec change: the policy follows.
    env.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        NS,
        "storagevolumes",
        "demo-volume",
        {"spec": {"kafka": {"allowedNamespaces": ["apps", NS]}}},
    )
    env.wait(
        lambda: (
            peers(9092)[0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["apps", NS]
        ),
        "the NetworkPolicy to follow spec.kafka.allowedNamespaces",
    )
    # A bad namespace name is refused at admission, naming the field.
    with pytest.raises(kubernetes.client.ApiException) as refused:
        env.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            "storagevolumes",
            "demo-volume",
            {"spec": {"kafka": {"allowedNamespaces": ["Team_A"]}}},
        )
    assert refused.value.status == 422
    assert "spec.kafka.allowedNamespaces" in refused.value.body and "Team_A" in refused.value.body

    # The operator's metrics: handler runs, failed worker status reads (the worker stopped),
    # then a handler error (a 403 on the status timer's Topic list).
    env.kubelet.wait_ready(NS, "lk-demo-volume-0")
    env.wait(lambda: ready(env, "storagevolumes", "demo-volume"), "volume Ready")
    runs = 'logkeeper_operator_handler_runs_total{handler="%s"}'
    errors = 'logkeeper_operator_handler_errors_total{handler="%s"}'
    first = scrape(port)
    # kopf's own liveness endpoint answers beside the metrics.
    with urllib.request.urlopen(f"http://127.0.0.1:{liveness}/healthz", timeout=5) as response:
        assert response.status == 200
    assert first[runs % "volume_changed"] >= 2  # created, then the spec change
    assert first[runs % "report_status"] >= 1
    assert first[errors % "topic_deleted"] == 0
    status_errors = "logkeeper_operator_worker_status_errors_total"
    before = scrape(port)[status_errors]
    pod = env.kubelet.pods[(NS, "lk-demo-volume-0")]
    pod.process.terminate()
    pod.process.wait(30)
    env.wait(lambda: scrape(port)[status_errors] > before, "failed status reads counted")
    env.cluster.call(lambda: env.cluster.server.inject("GET", f"/namespaces/{NS}/topics", 403))
    # (last: kopf runs a timer that raised again only after its 60 s backoff)
    env.wait(
        lambda: scrape(port)[errors % "report_status"] > first[errors % "report_status"],
        "the timer's error counted",
    )

    # NetworkPolicies turned off: the restarted operator removes the volume's.
    env.stop_operator()
    env.start_operator({"LOGKEEPER_NETWORK_POLICY_ENABLED": "false"})

    def removed() -> bool:
        try:
            policy()
        except kubernetes.client.ApiException as exc:
            return exc.status == 404
        return False

    env.wait(removed, "the NetworkPolicy removed")
    assert "Deleted NetworkPolicy default/lk-demo-volume" in env.logs()
