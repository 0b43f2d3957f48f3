"""The chart's alerts and dashboards (issue 20): the PrometheusRule renders, `promtool check
rules` accepts it, `promtool test rules` (alerts_test.yaml) shows every alert pending, firing and
quiet on synthetic series, every alert has a runbook in docs/runbooks.md, and every metric that a
rule or a dashboard panel queries is one a real worker exports (the operator's own metrics are
checked against its registry). promtool comes from Debian's prometheus package (setup.sh)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from storagecore import TopicPartition
from storageworker.controls import PAUSE_CLEANING
from storageworker.kafka.counters import KafkaCounters
from storageworker.kafka.metrics import KafkaCollector
from storageworker.metrics import WorkerCollector
from tests.unit.storageoperator.test_packaging import CHART, ROOT, needs_helm, render
from tests.unit.storageworker.test_worker import COMPACTED, Setup, fill, topic_yaml

ALERTS = CHART / "files" / "alerts.yaml"
DASHBOARDS = sorted((CHART / "files" / "dashboards").glob("*.json"))
ALERT_TESTS = Path(__file__).with_name("alerts_test.yaml")
RUNBOOKS = ROOT / "docs" / "runbooks.md"
RUNBOOK_BASE = "https://runbooks.example/logkeeper.md"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="see test_promtool_is_installed")
#: Series Prometheus makes itself, not an exporter.
SCRAPE_SERIES = {"up"}


def test_promtool_is_installed() -> None:
    """scripts/setup.sh installs Debian's prometheus package; without it the rule tests skip."""
    assert PROMTOOL is not None, "promtool missing: run scripts/setup.sh dev"


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"]]


def rendered_rule(*values: str) -> dict[str, Any]:
    (rule,) = [o for o in render(*values) if o["kind"] == "PrometheusRule"]
    return rule


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120
    )


@needs_helm
def test_rule_and_dashboards_render_only_when_enabled() -> None:
    kinds = [o["kind"] for o in render()]
    assert "PrometheusRule" not in kinds and "ConfigMap" not in kinds
    rule = rendered_rule(
        "--set", "metrics.prometheusRule.enabled=true",
        "--set", "metrics.prometheusRule.additionalLabels.release=kps",
    )  # fmt: skip
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "ops" and rule["metadata"]["labels"]["release"] == "kps"
    assert [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]] == [
        r["alert"] for r in rules()
    ]
    maps = [
        o
        for o in render(
            "--set", "metrics.dashboards.enabled=true", "--set", "metrics.dashboards.folder=Kafka"
        )
        if o["kind"] == "ConfigMap"
    ]  # fmt: skip
    assert len(maps) == len(DASHBOARDS) == 2
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["annotations"] == {"grafana_folder": "Kafka"}
        ((name, text),) = config_map["data"].items()
        assert json.loads(text) == json.loads((CHART / "files" / "dashboards" / name).read_text())


@needs_helm
@needs_promtool
def test_promtool_checks_and_tests_every_alert(tmp_path: Path) -> None:
    rule = rendered_rule(
        "--set", "metrics.prometheusRule.enabled=true",
        "--set", f"metrics.prometheusRule.runbookBaseUrl={RUNBOOK_BASE}",
    )  # fmt: skip
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]), encoding="utf-8")
    shutil.copy(ALERT_TESTS, tmp_path / ALERT_TESTS.name)
    checked = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", ALERT_TESTS.name, cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_is_tested_firing_and_quiet_and_has_a_runbook() -> None:
    cases = [
        case
        for test in yaml.safe_load(ALERT_TESTS.read_text(encoding="utf-8"))["tests"]
        for case in test["alert_rule_test"]
    ]
    runbooks = RUNBOOKS.read_text(encoding="utf-8")
    headings = {line[3:].strip() for line in runbooks.splitlines() if line.startswith("## ")}
    for rule in rules():
        name = rule["alert"]
        mine = [case for case in cases if case["alertname"] == name]
        assert any(case["exp_alerts"] for case in mine), f"{name}: no firing case"
        assert any(not case["exp_alerts"] for case in mine), f"{name}: no quiet case"
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], name
        assert annotations["runbook_url"] == f"__RUNBOOK_BASE__#{name.lower()}", name
        assert name in headings, f"{name} has no '## {name}' section in {RUNBOOKS}"
        assert rule["labels"]["severity"] in {"critical", "warning"}, name


def queried_metrics(expression: str) -> set[str]:
    """The metric names an expression reads (identifiers followed by a selector, a range or
    the end of a term, not function names or label names; Grafana's variables are dropped)."""
    expression = re.sub(r"\$\w+", "", expression)
    without_strings = re.sub(r'"[^"]*"', '""', expression)
    without_labels = re.sub(r"\{[^}]*\}", "{}", without_strings)
    without_grouping = re.sub(
        r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", without_labels
    )
    names = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", without_grouping))
    keywords = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
    return {n for n in names if n not in keywords and not re.fullmatch(r"\d+[smhdwy]?", n)}


def dashboard_expressions() -> list[str]:
    found = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text(encoding="utf-8"))
        found += [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
        found += [
            v["definition"].removeprefix("label_values(").rsplit(",", 1)[0]
            for v in board["templating"]["list"]
            if v["type"] == "query"
        ]
    return found


@needs_promtool
def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    """Each panel's query, with Grafana's variables filled in, passes `promtool check rules` as a
    recording rule."""
    concrete = [
        e.replace("$__rate_interval", "5m").replace("$job", ".*").replace("$topic", ".*")
        for e in dashboard_expressions()
    ]
    group = {
        "name": "dashboards",
        "rules": [{"record": f"panel:{i}", "expr": e} for i, e in enumerate(concrete)],
    }
    (tmp_path / "panels.yaml").write_text(yaml.safe_dump({"groups": [group]}), encoding="utf-8")
    checked = promtool("check", "rules", "panels.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def exported_names(exposition: CollectorRegistry | bytes) -> set[str]:
    """Sample names of every family in an exposition (or a registry's): the family's TYPE
    decides the suffixes, counters as ``_total``, histograms as ``_bucket``/``_sum``/``_count``."""
    names = set()
    if isinstance(exposition, CollectorRegistry):
        exposition = generate_latest(exposition)
    for line in exposition.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            if kind == "histogram":
                names.update(name + s for s in ("_bucket", "_sum", "_count"))
            else:
                names.add(name if kind != "counter" or name.endswith("_total") else name + "_total")
    return names


def test_every_queried_metric_is_exported_by_a_real_worker(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    setup.declare(topic_yaml("orders", 2, COMPACTED), topic_yaml("logs", 1, {"retention.ms": 1}))
    worker = setup.start()
    try:
        assert worker.log_manager is not None
        for tp in (TopicPartition("orders", 0), TopicPartition("logs", 0)):
            fill(worker, tp)
        registry = CollectorRegistry()
        registry.register(WorkerCollector(worker))
        registry.register(KafkaCollector(KafkaCounters()))
        exported = exported_names(registry)
    finally:
        worker.shutdown()
    queried = set().union(
        *(queried_metrics(r["expr"]) for r in rules()),
        *(queried_metrics(e) for e in dashboard_expressions()),
    )
    operator = {n for n in queried if n.startswith("logkeeper_operator_")}
    missing = queried - exported - operator - SCRAPE_SERIES
    assert not missing, f"queried but not exported by a worker: {sorted(missing)}"
    assert queried_metrics('sum by (job) (rate(a_total{x="y"}[5m])) / b > on(job) c') == {
        "a_total", "b", "c"
    }  # fmt: skip


def test_worker_reports_disk_retention_and_cleaning_state(tmp_path: Path) -> None:
    """The figures the alerts read, with their values: directories, retention due, pauses,
    the compacted topic's ratio threshold and the compaction window."""
    setup = Setup(tmp_path)
    annotations = {PAUSE_CLEANING: "true"}
    setup.declare(
        topic_yaml("orders", 1, COMPACTED),
        topic_yaml("logs", 1, {"retention.ms": 1000, "segment.bytes": 1024}),
        topic_yaml("held", 1, COMPACTED, annotations=annotations),
    )
    worker = setup.start()
    try:
        assert worker.log_manager is not None
        for topic in ("orders", "logs", "held"):
            fill(worker, TopicPartition(topic, 0))
        setup.clock.advance(10_000)  # every sealed segment of "logs" is past retention.ms
        registry = CollectorRegistry()
        registry.register(WorkerCollector(worker))
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect()
            for s in family.samples
        }
        data_dir = str(setup.root / "data")
        disk = shutil.disk_usage(data_dir)
        assert samples[("logkeeper_dir_online", (("dir", data_dir),))] == 1.0
        assert samples[("logkeeper_dir_capacity_bytes", (("dir", data_dir),))] == disk.total
        free = samples[("logkeeper_dir_free_bytes", (("dir", data_dir),))]
        assert abs(free - disk.free) < 64 * 1024 * 1024
        log = worker.log_manager.get_log(TopicPartition("logs", 0))
        due = sum(s.size_bytes for s in log.segments[:-1])
        assert due > 0

        def of(name: str, topic: str) -> float:
            return samples[(name, (("partition", "0"), ("topic", topic)))]

        assert of("logkeeper_log_retention_due_bytes", "logs") == due
        assert of("logkeeper_log_retention_due_bytes", "orders") == 0
        assert of("logkeeper_log_cleaning_paused", "held") == 1.0
        assert of("logkeeper_log_cleaning_paused", "orders") == 0.0
        assert of("logkeeper_log_retention_paused", "logs") == 0.0
        assert of("logkeeper_log_min_cleanable_dirty_ratio", "orders") == 0.01
        assert (
            "logkeeper_log_min_cleanable_dirty_ratio",
            (("partition", "0"), ("topic", "logs")),
        ) not in samples
        assert samples[("logkeeper_compaction_window_open", ())] == 1.0
        worker._run_retention()
        after = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect()
            for s in family.samples
        }
        assert (
            after[("logkeeper_log_retention_due_bytes", (("partition", "0"), ("topic", "logs")))]
            == 0
        )
    finally:
        worker.shutdown()
