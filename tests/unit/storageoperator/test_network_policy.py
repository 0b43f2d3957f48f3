"""The workers' NetworkPolicy: who it admits on which port (judged by a small evaluator of
NetworkPolicy semantics, so that a peer merged or split the wrong way fails), the settings
from the environment with the chart's defaults, and the CRD field that lists namespaces."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from storageoperator import crds, render
from storageoperator.network_policy import (
    ENV,
    METRICS_NAMESPACES_DEFAULT,
    OPERATOR_POD_LABELS_DEFAULT,
    NetworkPolicySettings,
    SettingError,
    network_policy,
)
from storageworker.settings import load_settings

ROOT = Path(__file__).parents[3]
OPERATOR_LABELS = {
    "app.kubernetes.io/name": "logkeeper",
    "app.kubernetes.io/instance": "lk",
    "app.kubernetes.io/component": "operator",
}
SETTINGS = NetworkPolicySettings(
    metrics_namespaces=("monitoring",),
    operator_namespace="ops",
    operator_pod_labels=tuple(OPERATOR_LABELS.items()),
)
VOLUME: dict[str, Any] = {
    "apiVersion": "logkeeper.io/v1alpha1",
    "kind": "StorageVolume",
    "metadata": {"name": "v1", "namespace": "team-a", "uid": "u-1"},
    "spec": {"size": "1Gi"},
}
WORKER = render.labels("v1")  # the labels of the worker pod (the StatefulSet's template)


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or ():
        assert expression["operator"] == "In", expression
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def admits(policy: dict[str, Any], port: int, namespace: str, pod_labels: dict[str, str]) -> bool:
    """Whether a connection from a pod (``namespace``, ``pod_labels``) to ``port`` of the
    worker pod is allowed, by the NetworkPolicy rules of the API reference."""
    spec = policy["spec"]
    assert _selects(spec["podSelector"], WORKER), "the policy must select the worker"
    assert spec["policyTypes"] == ["Ingress"]
    namespace_labels = {"kubernetes.io/metadata.name": namespace}
    for rule in spec.get("ingress") or ():
        assert rule.get("from"), "a rule without peers would admit every pod"
        if not any(p["port"] == port and p["protocol"] == "TCP" for p in rule["ports"]):
            continue
        for peer in rule["from"]:
            if "namespaceSelector" in peer:
                in_namespace = _selects(peer["namespaceSelector"], namespace_labels)
            else:
                in_namespace = namespace == VOLUME["metadata"]["namespace"]
            if in_namespace and _selects(peer.get("podSelector") or {}, pod_labels):
                return True
    return False


def test_default_policy_admits_the_operator_the_monitoring_and_the_own_namespace() -> None:
    policy = network_policy(VOLUME, SETTINGS)
    assert policy is not None
    assert policy["apiVersion"] == "networking.k8s.io/v1" and policy["kind"] == "NetworkPolicy"
    assert policy["metadata"] == {"name": "lk-v1", "labels": render.labels("v1")}
    sts = render.stateful_set(VOLUME, "img")
    assert policy["spec"]["podSelector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    kafka, http = render.KAFKA_PORT, render.HTTP_PORT
    # Kafka: any pod of the volume's own namespace, nobody else.
    assert admits(policy, kafka, "team-a", {"app": "client"})
    assert not admits(policy, kafka, "team-b", {"app": "client"})
    assert not admits(policy, kafka, "ops", OPERATOR_LABELS)
    # HTTP: the operator pod (its namespace AND its labels) and the monitoring namespace.
    assert admits(policy, http, "ops", OPERATOR_LABELS)
    assert not admits(policy, http, "ops", {**OPERATOR_LABELS, "app.kubernetes.io/instance": "x"})
    assert not admits(policy, http, "team-a", OPERATOR_LABELS)
    assert admits(policy, http, "monitoring", {"app": "prometheus"})
    assert not admits(policy, http, "team-a", {"app": "client"})
    # No other port.
    assert not admits(policy, 22, "team-a", {"app": "client"})


def test_listed_namespaces_replace_the_default_for_kafka_only() -> None:
    volume = copy.deepcopy(VOLUME)
    volume["spec"]["kafka"] = {"allowedNamespaces": ["apps", "streams"]}
    policy = network_policy(volume, SETTINGS)
    assert policy is not None
    for namespace in ("apps", "streams"):
        assert admits(policy, render.KAFKA_PORT, namespace, {})
        assert not admits(policy, render.HTTP_PORT, namespace, {})
    assert not admits(policy, render.KAFKA_PORT, "team-a", {})


def test_turned_off_renders_nothing() -> None:
    assert network_policy(VOLUME, NetworkPolicySettings(enabled=False)) is None


def test_no_http_peer_means_the_http_port_is_closed_not_open() -> None:
    lonely = NetworkPolicySettings(metrics_namespaces=(), operator_namespace=None)
    policy = network_policy(VOLUME, lonely)
    assert policy is not None
    assert [r["ports"][0]["port"] for r in policy["spec"]["ingress"]] == [render.KAFKA_PORT]
    assert not admits(policy, render.HTTP_PORT, "team-a", {})
    assert not admits(policy, render.HTTP_PORT, "monitoring", {})


def chart_values() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "charts/logkeeper/values.yaml").read_text()))


def test_settings_defaults_are_the_charts(tmp_path: Path) -> None:
    settings = NetworkPolicySettings.from_env({}, service_account_namespace=tmp_path / "none")
    values = chart_values()["networkPolicy"]
    assert settings.enabled is values["enabled"] is True
    assert list(settings.metrics_namespaces) == values["metricsNamespaces"]
    assert settings.metrics_namespaces == METRICS_NAMESPACES_DEFAULT
    assert settings.operator_namespace is None
    assert settings.operator_pod_labels == OPERATOR_POD_LABELS_DEFAULT
    # In a pod without the variable: the service account's namespace.
    (tmp_path / "namespace").write_text("ops\n")
    assert (
        NetworkPolicySettings.from_env({}, service_account_namespace=tmp_path / "namespace")
    ).operator_namespace == "ops"


def test_settings_from_the_environment(tmp_path: Path) -> None:
    settings = NetworkPolicySettings.from_env(
        {
            ENV["enabled"]: "false",
            ENV["metrics_namespaces"]: "monitoring, observability",
            ENV["operator_namespace"]: "ops",
            ENV["operator_pod_labels"]: "app.kubernetes.io/name=logkeeper,a=b",
        },
        service_account_namespace=tmp_path / "none",
    )
    assert settings == NetworkPolicySettings(
        enabled=False,
        metrics_namespaces=("monitoring", "observability"),
        operator_namespace="ops",
        operator_pod_labels=(("app.kubernetes.io/name", "logkeeper"), ("a", "b")),
    )
    # An empty list is a choice (nobody scrapes), not the default.
    empty = NetworkPolicySettings.from_env({ENV["metrics_namespaces"]: ""}, tmp_path / "none")
    assert empty.metrics_namespaces == ()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("enabled", "yes", "expected true or false"),
        ("metrics_namespaces", "monitoring,Bad_NS", "'Bad_NS' is not a namespace name"),
        ("operator_namespace", "-ops", "'-ops' is not a namespace name"),
        ("operator_pod_labels", "app=x,broken", "'broken' is not key=value"),
    ],
)
def test_bad_settings_are_refused_naming_the_variable(
    variable: str, value: str, message: str, tmp_path: Path
) -> None:
    with pytest.raises(SettingError, match=message) as refused:
        NetworkPolicySettings.from_env({ENV[variable]: value}, tmp_path / "none")
    assert ENV[variable] in str(refused.value)


def volume_errors(spec: dict[str, Any]) -> list[str]:
    schema = crds.storage_volume_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    document = {**VOLUME, "spec": {"size": "1Gi", **spec}}
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft7Validator(schema).iter_errors(document)
    ]


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["Team_A"], "spec.kafka.allowedNamespaces.0: 'Team_A' does not match"),
        (["apps", "-x"], "spec.kafka.allowedNamespaces.1: '-x' does not match"),
        (["a" * 64], "spec.kafka.allowedNamespaces.0: '" + "a" * 64 + "' is too long"),
        ([], "spec.kafka.allowedNamespaces: [] should be non-empty"),
    ],
)
def test_crd_refuses_bad_namespace_names_naming_the_field(names: list[str], message: str) -> None:
    errors = volume_errors({"kafka": {"allowedNamespaces": names}})
    assert any(e.startswith(message) for e in errors), errors


def test_crd_accepts_namespaces_and_the_worker_ignores_the_field() -> None:
    spec = {"kafka": {"allowedNamespaces": ["apps", "team-a"]}}
    assert volume_errors(spec) == []
    volume = {**VOLUME, "spec": {"size": "1Gi", **spec}}
    # The worker reads the StorageVolume from its ConfigMap and must not refuse the field.
    loaded = load_settings(render.settings(volume), source="settings.yaml")
    assert loaded.annotations == {}
