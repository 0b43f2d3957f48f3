"""End to end with the real tools: helm installs the chart, kubectl applies the examples and
changes a Topic, invalid Topics are refused at admission (strict field validation, schema,
CEL), and helm uninstall leaves no operator objects behind."""

from __future__ import annotations

import kubernetes
import pytest

from tests.e2e.operator_env import NS, ROOT, Env, ready, tool

pytestmark = pytest.mark.e2e


def test_helm_install_kubectl_apply_examples_and_helm_uninstall(env: Env) -> None:
    # The chart against the fake: its CRDs already exist (the fixture applied crds/, as a
    # cluster upgraded by `kubectl apply --server-side -f crds/` has them).
    installed = tool(
        env,
        "helm",
        "install",
        "lk",
        str(ROOT / "charts" / "logkeeper"),
        "--namespace",
        "ops",
        "--create-namespace",
    )
    assert "STATUS: deployed" in installed.stdout
    deployment = env.apps.read_namespaced_deployment("lk-logkeeper", "ops")
    assert deployment.spec.template.spec.containers[0].args[1] == "operator"
    assert env.core.read_namespaced_service_account("lk-logkeeper", "ops") is not None
    networking = kubernetes.client.NetworkingV1Api(env.api)
    own_policy = networking.read_namespaced_network_policy("lk-logkeeper-operator", "ops")
    assert own_policy.spec.ingress[0].ports[0].port == "metrics"

    applied = tool(env, "kubectl", "apply", "-f", str(ROOT / "examples"))
    assert "storagevolume.logkeeper.io/demo-volume created" in applied.stdout
    env.kubelet.wait_ready(NS, "lk-demo-volume-0")
    for name in ("orders", "user-profiles", "audit-events"):
        env.wait(lambda n=name: ready(env, "topics", n), f"{name} Ready")
    listed = tool(env, "kubectl", "get", "lktopic", "-o", "name")
    assert sorted(listed.stdout.split()) == [
        "topic.logkeeper.io/audit-events",
        "topic.logkeeper.io/orders",
        "topic.logkeeper.io/user-profiles",
    ]
    # A config change through kubectl reaches the worker.
    tool(
        env,
        "kubectl",
        "patch",
        "lktopic",
        "orders",
        "--type=merge",
        "-p",
        '{"spec":{"config":{"retention.ms":3600000}}}',
    )
    env.wait(
        lambda: "retention.ms: 3600000" in env.topic_entry("orders"),
        "the ConfigMap to carry the change",
    )
    # Invalid Topics are refused at admission, naming the field: a typo'd key (strict field
    # validation), an out-of-range value (schema), a partition decrease (CEL).
    bad = env.root / "bad.yaml"
    bad.write_text(
        "apiVersion: logkeeper.io/v1alpha1\nkind: Topic\nmetadata: {name: bad}\n"
        "spec: {volume: demo-volume, config: {retention.mss: 5}}\n"
    )
    refused = tool(env, "kubectl", "apply", "-f", str(bad), check=False)
    assert refused.returncode != 0 and "retention.mss" in refused.stderr
    bad.write_text(
        "apiVersion: logkeeper.io/v1alpha1\nkind: Topic\nmetadata: {name: bad}\n"
        "spec: {volume: demo-volume, config: {min.cleanable.dirty.ratio: 2}}\n"
    )
    refused = tool(env, "kubectl", "apply", "-f", str(bad), check=False)
    assert refused.returncode != 0 and "min.cleanable.dirty.ratio" in refused.stderr
    refused = tool(
        env,
        "kubectl",
        "patch",
        "lktopic",
        "orders",
        "--type=merge",
        "-p",
        '{"spec":{"partitions":1}}',
        check=False,
    )
    assert refused.returncode != 0 and "cannot decrease" in refused.stderr

    # helm uninstall leaves no operator objects behind (the CRDs stay, as Helm does).
    tool(env, "helm", "uninstall", "lk", "--namespace", "ops")
    with pytest.raises(kubernetes.client.ApiException):
        env.apps.read_namespaced_deployment("lk-logkeeper", "ops")
    with pytest.raises(kubernetes.client.ApiException):
        networking.read_namespaced_network_policy("lk-logkeeper-operator", "ops")
    rbac = kubernetes.client.RbacAuthorizationV1Api(env.api)
    assert [
        r.metadata.name for r in rbac.list_cluster_role().items if "logkeeper" in r.metadata.name
    ] == []
    secrets = env.core.list_namespaced_secret("ops", label_selector="owner=helm").items
    assert secrets == []
    assert len(tool(env, "kubectl", "get", "crd", "-o", "name").stdout.split()) == 2
