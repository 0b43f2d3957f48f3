"""``--config KEY=VALUE`` on ``logkeeper retention`` and ``logkeeper clean``: Kafka's topic
config keys for every log of --dir (or the --topic ones), without --topics or over its
manifests' values, validated as a Topic's spec.config is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.test_cli import run

pytestmark = pytest.mark.integration


def produce(data: Path, topic: str, records: int, *, keys: int = 5) -> None:
    """``records`` one-record batches of keys k0..k{keys-1}, in segments of about 600 bytes."""
    lines = "".join(
        json.dumps({"key": f"k{i % keys}", "value": f"v{i}", "timestamp": 1_000 + i}) + "\n"
        for i in range(records)
    )
    run(
        "produce", "--dir", str(data), "--topic", topic, "--config", "segment.bytes=600",
        "--batch-records", "1", stdin=lines,
    )  # fmt: skip


def consumed(data: Path, topic: str) -> list[dict[str, object]]:
    out = run("consume", "--dir", str(data), "--topic", topic).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_clean_with_config_only_compacts_every_log(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for topic in ("a", "b"):
        produce(data, topic, 60)
    # Without a config every log has Kafka's default cleanup.policy=delete: nothing to clean.
    assert json.loads(run("clean", "--dir", str(data), "--json").stdout)["rounds"] == []
    out = run("clean", "--dir", str(data), "--config", "cleanup.policy=compact").stdout
    assert "cleaned log a-0" in out and "cleaned log b-0" in out
    assert "over 2 compacted partition(s)" in out
    for topic in ("a", "b"):
        records = consumed(data, topic)
        active_base = max(int(p.stem) for p in (data / f"{topic}-0").glob("*.log"))
        cleaned = [r for r in records if int(str(r["offset"])) < active_base]
        assert len({r["key"] for r in cleaned}) == len(cleaned), "one record per key"
        assert len(records) < 60


def test_clean_config_with_topic_applies_to_that_topic_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for topic in ("a", "b"):
        produce(data, topic, 60)
    out = run(
        "clean", "--dir", str(data), "--config", "cleanup.policy=compact", "--topic", "a"
    ).stdout
    assert "cleaned log a-0" in out and "b-0" not in out
    assert len(consumed(data, "a")) < 60
    assert len(consumed(data, "b")) == 60
    # A --topic with no log and no manifest is refused, naming it.
    bad = run(
        "clean", "--dir", str(data), "--config", "cleanup.policy=compact", "--topic", "nope",
        check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "--topic nope: not declared in --topics and no log in" in bad.stderr


def test_config_overrides_the_manifest(tmp_path: Path) -> None:
    data = tmp_path / "data"
    produce(data, "a", 60)
    topics = tmp_path / "topics.yaml"
    topics.write_text(
        "apiVersion: logkeeper.io/v1alpha1\nkind: Topic\nmetadata: {name: a}\n"
        "spec: {config: {cleanup.policy: delete, segment.bytes: 600}}\n"
    )
    # The manifest says delete: nothing is cleaned; --config's compact wins over it.
    kept = json.loads(run("clean", "--dir", str(data), "--topics", str(topics), "--json").stdout)
    assert kept["rounds"] == []
    compact = ("--config", "cleanup.policy=compact", "--json")
    report = json.loads(run("clean", "--dir", str(data), "--topics", str(topics), *compact).stdout)
    assert len(report["rounds"]) == 1 and report["uncleanable"] == {}
    assert len(consumed(data, "a")) < 60


def test_retention_with_config_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    produce(data, "t", 20)  # timestamps 1000..1019
    segments = sorted(p.name for p in (data / "t-0").glob("*.log"))
    assert len(segments) > 2
    # Kafka's default retention.ms (7 days) keeps everything at now=3000.
    default = run("retention", "--dir", str(data), "--dry-run", "--now-ms", "3000").stdout
    assert "t-0: nothing to delete" in default
    dry = run(
        "retention", "--dir", str(data), "--config", "retention.ms=1000", "--dry-run",
        "--now-ms", "3000",
    ).stdout  # fmt: skip
    assert "t-0: would delete" in dry and "retention.ms: largest timestamp" in dry
    assert sorted(p.name for p in (data / "t-0").glob("*.log")) == segments
    config = ("--config", "retention.ms=1000", "--now-ms", "3000", "--json")
    report = json.loads(run("retention", "--dir", str(data), *config).stdout)
    assert report[0]["log_start_offset_after"] > 0
    assert len(list((data / "t-0").glob("*.log"))) < len(segments)


@pytest.mark.parametrize("command", ["clean", "retention"])
@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("cleanup.polcy=compact", "unknown topic config key 'cleanup.polcy'"),
        ("cleanup.policy=compactt", "cleanup.policy"),
        ("retention.ms=soon", "retention.ms: expected an integer, got 'soon'"),
        ("min.cleanable.dirty.ratio=2", "min.cleanable.dirty.ratio"),
        ("segment.bytes", "--config 'segment.bytes': expected KEY=VALUE"),
    ],
)
def test_a_bad_config_is_refused_naming_it(
    tmp_path: Path, command: str, assignment: str, message: str
) -> None:
    data = tmp_path / "data"
    produce(data, "t", 10)
    before = {p.name: p.read_bytes() for p in (data / "t-0").iterdir()}
    result = run(command, "--dir", str(data), "--config", assignment, check=False)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    value = assignment.partition("=")[2]
    if value and "unknown" not in message:
        assert value in result.stderr, result.stderr  # the offending value is named too
    after = {p.name: p.read_bytes() for p in (data / "t-0").iterdir()}
    assert after == before, "nothing changed"
