"""The CRDs: generated files in sync, structural, bounds equal to storagecore's rules, CEL rules
that compile and decide right, printer columns, and the examples valid."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from storagecore.config import IGNORED_TOPIC_CONFIG_KEYS, TOPIC_CONFIG_KEYS, LogConfig
from storagecore.errors import ConfigError
from storageoperator import crds
from tests.k8s.cel import compile_rule, violations

ROOT = Path(__file__).parents[3]


def spec_schema(crd: dict[str, Any]) -> dict[str, Any]:
    version = crd["spec"]["versions"][0]
    return dict(version["schema"]["openAPIV3Schema"])


def test_committed_files_are_generated_and_the_chart_copy_is_identical() -> None:
    for name, crd in crds.all_crds().items():
        expected = crds.render(crd)
        assert (ROOT / "crds" / name).read_text(encoding="utf-8") == expected, name
        chart = ROOT / "charts" / "logkeeper" / "crds" / name
        assert chart.read_bytes() == (ROOT / "crds" / name).read_bytes(), name


def walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    nodes = [(path, schema)]
    for name, sub in (schema.get("properties") or {}).items():
        nodes += walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        nodes += walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        nodes += walk(schema["additionalProperties"], f"{path}{{}}")
    return nodes


@pytest.mark.parametrize("name", sorted(crds.all_crds()))
def test_structural_with_descriptions(name: str) -> None:
    for path, node in walk(spec_schema(crds.all_crds()[name])):
        if node.get("x-kubernetes-int-or-string"):
            continue
        assert "type" in node, f"{name}{path}: no type"
        if path.count(".") <= 6 and not path.endswith("{}"):
            assert node.get("description"), f"{name}{path}: no description"
        if node["type"] == "array":
            assert "maxItems" in node, f"{name}{path}: unbounded list"


def test_every_kafka_key_has_a_schema_and_nothing_else() -> None:
    assert set(crds.TOPIC_CONFIG_SCHEMA) == set(TOPIC_CONFIG_KEYS) | set(IGNORED_TOPIC_CONFIG_KEYS)


@pytest.mark.parametrize("key", sorted(TOPIC_CONFIG_KEYS))
def test_schema_bounds_are_storagecores(key: str) -> None:
    """A value at each bound is accepted by storagecore, one past it refused (the schema
    refuses it too: jsonschema with the same bound)."""
    schema = crds.TOPIC_CONFIG_SCHEMA[key]
    if schema["type"] == "integer":
        bounds = [("minimum", -1)] + ([("maximum", 1)] if "maximum" in schema else [])
        for bound, step in bounds:
            edge = schema[bound]
            LogConfig.from_topic_config({key: edge})
            with pytest.raises(ConfigError, match=key):
                LogConfig.from_topic_config({key: edge + step})
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(edge + step, schema)
    elif "enum" in schema:
        for value in schema["enum"]:
            LogConfig.from_topic_config({key: value})
        with pytest.raises(ConfigError, match=key):
            LogConfig.from_topic_config({key: "bogus"})
    elif schema["type"] == "number":
        LogConfig.from_topic_config({key: schema["minimum"]})
        LogConfig.from_topic_config({key: schema["maximum"]})
        with pytest.raises(ConfigError, match=key):
            LogConfig.from_topic_config({key: schema["maximum"] + 0.5})


def all_rules() -> list[str]:
    return [
        rule["rule"]
        for crd in crds.all_crds().values()
        for _, node in walk(spec_schema(crd))
        for rule in node.get("x-kubernetes-validations", ())
    ]


def test_every_cel_rule_compiles() -> None:
    rules = all_rules()
    assert len(rules) == 6
    for rule in rules:
        compile_rule(rule)


def topic(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "logkeeper.io/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": "t"},
        "spec": spec,
    }


TOPIC_SCHEMA = spec_schema(crds.topic_crd())


@pytest.mark.parametrize(
    ("new", "old", "message"),
    [
        ({"volume": "v", "partitions": 2}, {"volume": "v", "partitions": 3}, "cannot decrease"),
        ({"volume": "w", "partitions": 3}, {"volume": "v", "partitions": 3}, "volume is immutable"),
        (
            {"volume": "v", "topicName": "a"},
            {"volume": "v", "topicName": "b"},
            "topicName is immutable",
        ),
        (
            {"volume": "v", "config": {"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5}},
            None,
            "must not exceed",
        ),
        ({"volume": "v", "topicName": ".."}, None, "not . or .."),
    ],
)
def test_cel_rules_refuse(new: dict[str, Any], old: dict[str, Any] | None, message: str) -> None:
    found = list(violations(TOPIC_SCHEMA, topic(new), topic(old) if old else None))
    assert any(message in v for v in found), found


def test_cel_rules_accept_the_good() -> None:
    good = {
        "volume": "v",
        "partitions": 4,
        "config": {"min.compaction.lag.ms": 5, "max.compaction.lag.ms": 5},
    }
    assert list(violations(TOPIC_SCHEMA, topic(good), topic({**good, "partitions": 3}))) == []
    bad = {
        "kind": "StorageVolume",
        "spec": {"size": "1Gi", "compactionWindows": {"windows": ["25:00-10:00"]}},
    }
    errors = [e.message for e in schema_validator(crds.storage_volume_crd()).iter_errors(bad)]
    assert any("does not match" in e for e in errors), errors


def schema_validator(crd: dict[str, Any]) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(spec_schema(crd))


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")))
def test_examples_are_valid(path: Path) -> None:
    for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        crd = {"Topic": crds.topic_crd(), "StorageVolume": crds.storage_volume_crd()}[
            document["kind"]
        ]
        errors = [e.message for e in schema_validator(crd).iter_errors(document)]
        assert errors == [], (path.name, errors)
        assert list(violations(spec_schema(crd), document)) == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"volume": "v", "partitions": 0}, "less than the minimum"),
        ({"volume": "v", "config": {"retention.ms": -2}}, "less than the minimum"),
        ({"volume": "v", "config": {"min.cleanable.dirty.ratio": 1.5}}, "greater than the maximum"),
        ({"volume": "v", "config": {"cleanup.policy": "shred"}}, "is not one of"),
        ({"volume": "v", "deletionPolicy": "Maybe"}, "is not one of"),
        ({"partitions": 1}, "'volume' is a required property"),
    ],
)
def test_schema_refuses(spec: dict[str, Any], message: str) -> None:
    errors = [e.message for e in schema_validator(crds.topic_crd()).iter_errors(topic(spec))]
    assert any(message in e for e in errors), errors


@pytest.mark.parametrize(
    ("prefixes", "valid"),
    [(["wordcount-", "connect-"], True), ([""], True), (["a/b"], False), (["a b"], False)],
)
def test_client_topic_prefixes_are_checked_as_the_worker_checks_them(
    prefixes: list[str], valid: bool
) -> None:
    from storagecore.errors import ConfigError
    from storageworker.settings import parse_settings

    volume = {
        "apiVersion": "logkeeper.io/v1alpha1",
        "kind": "StorageVolume",
        "metadata": {"name": "v"},
        "spec": {"size": "1Gi", "clientTopicPrefixes": prefixes},
    }
    errors = list(schema_validator(crds.storage_volume_crd()).iter_errors(volume))
    assert (errors == []) is valid, errors
    try:
        parse_settings(volume)
    except ConfigError:
        assert not valid
    else:
        assert valid


def json_path(document: Any, path: str) -> Any:
    """The subset of kubectl's JSONPath that printer columns use: dotted fields and one
    ``[?(@.field=="value")]`` filter on a list."""
    value = document
    for part in re.findall(r'\.([A-Za-z0-9_]+)(\[\?\(@\.(\w+)=="([^"]+)"\)\])?', path):
        name, filtered, field, wanted = part
        value = (value or {}).get(name)
        if filtered:
            value = next((item for item in value or () if item.get(field) == wanted), None)
    return value


@pytest.mark.parametrize("name", sorted(crds.all_crds()))
def test_printer_columns_resolve_on_a_reported_resource(name: str) -> None:
    crd = crds.all_crds()[name]
    sample = {
        "metadata": {"creationTimestamp": "2026-11-21T00:00:00Z"},
        "spec": {"volume": "v", "partitions": 3, "size": "1Gi"},
        "status": {
            "conditions": [
                {"type": "Progressing", "status": "False"},
                {"type": "Ready", "status": "True"},
            ],
            "partitions": 3,
            "sizeBytes": 4096,
            "maxDirtyRatio": 0.25,
        },
    }
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    values = {c["name"]: json_path(sample, c["jsonPath"]) for c in columns}
    assert values["Ready"] == "True"
    assert values["Dirty"] == 0.25 and values["Age"] == "2026-11-21T00:00:00Z"
    assert all(value is not None for value in values.values()), values
    # Every column path also names a field the schema declares.
    schema = spec_schema(crd)
    for column in columns:
        node: Any = schema
        for field in re.findall(r"\.([A-Za-z0-9_]+)", column["jsonPath"]):
            if field in ("type", "status") and node.get("type") == "array":
                break
            node = (node.get("items") or node).get("properties", {}).get(field)
            assert node is not None or field == "creationTimestamp", (name, column)
            if node is None:
                break
