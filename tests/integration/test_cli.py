"""The console script as a user runs it: real subprocesses, real files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples" / "topics.yaml"


def run(*args: str, stdin: str = "", check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "logkeeper.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def jsonl(*objects: object) -> str:
    return "".join(json.dumps(o) + "\n" for o in objects)


def test_help_lists_every_subcommand() -> None:
    out = run("--help").stdout
    for command in ("produce", "consume", "dump-log", "verify", "retention", "clean", "demo"):
        assert command in out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_then_consume_round_trip(tmp_path: Path, codec: str) -> None:
    lines = [
        {"key": "a", "value": "1", "timestamp": 1_700_000_000_000, "headers": {"h": "x"}},
        {"key": None, "value": "no key"},
        {"key": "a", "value": None},
        {"key": "b", "value": "ünïcode"},
    ]
    produced = run(
        "produce",
        "--dir",
        str(tmp_path),
        "--topic",
        "t",
        "--compression",
        codec,
        "--batch-records",
        "3",
        stdin=jsonl(*lines),
    )
    assert [json.loads(line) for line in produced.stdout.splitlines()] == [
        {"partition": 0, "offset": i} for i in range(4)
    ]
    consumed = [
        json.loads(line)
        for line in run("consume", "--dir", str(tmp_path), "--topic", "t").stdout.splitlines()
    ]
    assert [(c["offset"], c["key"], c["value"]) for c in consumed] == [
        (0, "a", "1"),
        (1, None, "no key"),
        (2, "a", None),
        (3, "b", "ünïcode"),
    ]
    assert consumed[0]["timestamp"] == 1_700_000_000_000 and consumed[0]["headers"] == {"h": "x"}
    window = run(
        "consume", "--dir", str(tmp_path), "--topic", "t", "--from", "1", "--to", "3"
    ).stdout
    assert [json.loads(line)["offset"] for line in window.splitlines()] == [1, 2]


def test_produce_stops_at_a_bad_line_after_appending_the_lines_before_it(tmp_path: Path) -> None:
    bad = run(
        "produce",
        "--dir",
        str(tmp_path),
        "--topic",
        "t",
        stdin=jsonl({"key": "a", "value": "1"}) + "{not json\n" + jsonl({"key": "b", "value": "2"}),
        check=False,
    )
    assert bad.returncode == 2 and "stdin line 2: not JSON" in bad.stderr
    assert "stdin lines 1-1 were appended (offsets 0-0), nothing after them" in bad.stderr
    consumed = run("consume", "--dir", str(tmp_path), "--topic", "t").stdout.splitlines()
    assert [json.loads(c)["value"] for c in consumed] == ["1"]
    first_bad = run(
        "produce",
        "--dir",
        str(tmp_path / "other"),
        "--topic",
        "t",
        stdin="{not json\n",
        check=False,
    )
    assert (
        "stdin line 1: not JSON" in first_bad.stderr and "nothing was appended" in first_bad.stderr
    )
    assert not (tmp_path / "other" / "t-0").exists()
    wrong_type = run(
        "produce",
        "--dir",
        str(tmp_path),
        "--topic",
        "t",
        stdin=jsonl({"key": 5, "value": "1"}),
        check=False,
    )
    assert "stdin line 1: key must be a string or null" in wrong_type.stderr


def test_produce_with_topics_file_applies_spec_config(tmp_path: Path) -> None:
    result = run(
        "produce",
        "--dir",
        str(tmp_path),
        "--topic",
        "user-profiles",
        "--topics",
        str(EXAMPLES),
        stdin=jsonl({"key": None, "value": "x"}),
        check=False,
    )
    assert result.returncode == 2
    assert "stdin lines 1-1: user-profiles-0" in result.stderr
    assert "compacted topic cannot accept a record without a key" in result.stderr
    assert not (tmp_path / "user-profiles-0").exists()  # nothing created for a rejected produce
    missing = run(
        "produce",
        "--dir",
        str(tmp_path),
        "--topic",
        "orders",
        "--partition",
        "3",
        "--topics",
        str(EXAMPLES),
        stdin=jsonl({"key": "k", "value": "x"}),
        check=False,
    )
    assert "has 3 partitions" in missing.stderr and "partition 3 does not exist" in missing.stderr
    bad_key = run(
        "produce",
        "--dir",
        str(tmp_path),
        "--topic",
        "t",
        "--config",
        "retention.mss=5",
        stdin=jsonl({"key": "k", "value": "x"}),
        check=False,
    )
    assert "unknown topic config key 'retention.mss'" in bad_key.stderr


def test_dump_log_prints_kafka_dump_log_lines(tmp_path: Path) -> None:
    run(
        "produce",
        "--dir",
        str(tmp_path),
        "--topic",
        "t",
        stdin=jsonl(
            {"key": "k1", "value": "v1", "timestamp": 1_700_000_000_000},
            {"key": "k2", "value": None, "timestamp": 1_700_000_000_005},
        ),
    )
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    out = run("dump-log", "--records", str(segment)).stdout.splitlines()
    assert out[0] == f"Dumping {segment}"
    assert out[1] == "Log starting offset: 0"
    assert out[2].startswith(
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 "
        "producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: "
        "false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 "
        "CreateTime: 1700000000005 size: 81 magic: 2 compresscodec: none crc: "
    )
    assert out[2].endswith(" isvalid: true")
    assert out[3] == (
        "| offset: 0 CreateTime: 1700000000000 keySize: 2 valueSize: 2 sequence: -1 "
        "headerKeys: [] key: k1 payload: v1"
    )
    assert out[4].endswith("key: k2 payload: null")
    checkpoint = run("dump-log", str(tmp_path / "recovery-point-offset-checkpoint")).stdout
    assert "topic: t partition: 0 offset: 2" in checkpoint
    index = run("dump-log", str(tmp_path / "t-0" / "00000000000000000000.timeindex")).stdout
    assert "timestamp: 1700000000005 offset: 1" in index
    unknown = run("dump-log", str(tmp_path / ".lock"), check=False)
    assert unknown.returncode == 2 and "don't know how to dump" in unknown.stderr


def test_verify_reports_and_exits_nonzero(tmp_path: Path) -> None:
    run(
        "produce",
        "--dir",
        str(tmp_path),
        "--topic",
        "t",
        stdin=jsonl(*({"key": str(i), "value": "v" * 50} for i in range(200))),
    )
    ok = run("verify", "--dir", str(tmp_path))
    assert "1 partitions, 1 segments, 200 records: OK" in ok.stdout
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[100] ^= 0xFF
    segment.write_bytes(bytes(data))
    bad = run("verify", "--dir", str(tmp_path), check=False)
    assert bad.returncode == 1
    assert f"ERROR {segment}: position 0: batch at offset 0: CRC mismatch" in bad.stdout
    report = json.loads(run("verify", "--dir", str(tmp_path), "--json", check=False).stdout)
    assert report[0]["ok"] is False and report[0]["findings"][0]["severity"] == "error"


def test_consume_of_unknown_topic_is_a_clear_error(tmp_path: Path) -> None:
    result = run("consume", "--dir", str(tmp_path), "--topic", "nope", check=False)
    assert result.returncode == 2 and "no log for nope-0" in result.stderr


def test_locked_dir_is_a_clear_error(tmp_path: Path) -> None:
    from storagecore import LogManager

    with LogManager([tmp_path]):
        result = run("consume", "--dir", str(tmp_path), "--topic", "t", check=False)
    assert result.returncode == 2 and "is locked by another process" in result.stderr


def test_demo_runs_and_verifies(tmp_path: Path) -> None:
    out = run("demo", "--dir", str(tmp_path / "demo"), "--records", "20000", "--linger", "0").stdout
    assert "Read back 20000 records (all of them)." in out
    assert "verify: OK" in out
    assert "compaction audit.events-0: dirty section [0," in out and "UNCLEANABLE" not in out
    assert "torn tail cut" in out
    # Part 2: the worker, its URLs, the workload, and the before/after report.
    assert re.search(r"status:  http://127\.0\.0\.1:\d+/v1/status", out)
    assert re.search(r"Produced \d+ records \(\d+ tombstones\)", out)
    assert "later the worker has settled (before -> after):" in out
    rows = {
        line.split()[0]: line.split()
        for line in out.splitlines()
        if re.match(r"  (orders|user-profiles|audit\.events)-\d ", line) and "->" in line
    }
    # Compaction kept the latest record per key and removed every tombstone past its horizon;
    # time retention (7 days on the fast clock) emptied the orders partitions.
    profiles = rows["user-profiles-0"]
    assert int(profiles[3]) < int(profiles[1]) and profiles[6] == "0"
    assert rows["orders-1"][3] == "0" and int(rows["orders-1"][15]) > int(rows["orders-1"][13])
    assert re.search(r"cleaner: [1-9]\d* rounds, \d+ records read, [1-9]\d* removed", out)
    assert re.search(r"retention: [1-9]\d* segments deleted", out)
    assert "Worker stopped cleanly" in out
    refused = run("demo", "--dir", str(ROOT / "storagecore"), check=False)
    assert refused.returncode != 0 and "was not made by the demo" in refused.stderr


def test_retention_dry_run_then_apply(tmp_path: Path) -> None:
    data = tmp_path / "data"
    topics = tmp_path / "topics.yaml"
    topics.write_text(
        "apiVersion: logkeeper.io/v1alpha1\nkind: Topic\nmetadata: {name: t}\n"
        "spec: {config: {segment.bytes: 400, retention.ms: 1000}}\n"
    )
    # Timestamps 1000..2900: at now=3000 with retention.ms=1000 only the older segments expire.
    lines = jsonl(
        *({"key": str(i), "value": "v" * 40, "timestamp": 1_000 + 100 * i} for i in range(20))
    )
    run(
        "produce",
        "--dir",
        str(data),
        "--topic",
        "t",
        "--topics",
        str(topics),
        "--batch-records",
        "1",
        stdin=lines,
    )
    segments = sorted(p.name for p in (data / "t-0").glob("*.log"))
    assert len(segments) > 2
    dry = run(
        "retention", "--dir", str(data), "--topics", str(topics), "--dry-run", "--now-ms", "3000"
    ).stdout
    assert "t-0: would delete" in dry and "retention.ms: largest timestamp" in dry
    assert sorted(p.name for p in (data / "t-0").glob("*.log")) == segments  # nothing changed
    report = json.loads(
        run(
            "retention", "--dir", str(data), "--topics", str(topics), "--now-ms", "3000", "--json"
        ).stdout
    )
    assert report[0]["log_start_offset_after"] > 0 and report[0]["segments"]
    remaining = sorted(p.name for p in (data / "t-0").iterdir())
    assert not any(name.endswith(".deleted") for name in remaining)
    consumed = run("consume", "--dir", str(data), "--topic", "t").stdout.splitlines()
    assert json.loads(consumed[0])["offset"] == report[0]["log_start_offset_after"]


def test_clean_compacts_until_nothing_is_cleanable(tmp_path: Path) -> None:
    data = tmp_path / "data"
    topics = tmp_path / "topics.yaml"
    topics.write_text(
        "apiVersion: logkeeper.io/v1alpha1\nkind: Topic\nmetadata: {name: c}\n"
        "spec: {config: {cleanup.policy: compact, segment.bytes: 600}}\n"
        "---\napiVersion: logkeeper.io/v1alpha1\nkind: Topic\nmetadata: {name: d}\n"
        "spec: {config: {segment.bytes: 600}}\n"
    )
    lines = jsonl(*({"key": f"k{i % 5}", "value": f"v{i}"} for i in range(60)))
    for topic in ("c", "d"):
        run(
            "produce", "--dir", str(data), "--topic", topic, "--topics", str(topics),
            "--batch-records", "1", stdin=lines,
        )  # fmt: skip
    out = run("clean", "--dir", str(data), "--topics", str(topics)).stdout
    assert "Log cleaner thread 0 cleaned log c-0 (dirty section = [0," in out
    assert "size reduction" in out and "over 1 compacted partition(s)" in out
    consumed = [
        json.loads(line)
        for line in run("consume", "--dir", str(data), "--topic", "c").stdout.splitlines()
    ]
    active_base = max(int(p.stem) for p in (data / "c-0").glob("*.log"))
    cleaned = [r for r in consumed if r["offset"] < active_base]
    assert len({r["key"] for r in cleaned}) == len(cleaned), "one record per key below the head"
    assert len(run("consume", "--dir", str(data), "--topic", "d").stdout.splitlines()) == 60
    again = json.loads(run("clean", "--dir", str(data), "--topics", str(topics), "--json").stdout)
    assert again == {"rounds": [], "uncleanable": {}}
    checkpoint = (data / "cleaner-offset-checkpoint").read_text().split("\n")
    assert checkpoint[:2] == ["0", "1"] and checkpoint[2] == f"c 0 {active_base}"


def test_clean_reports_a_corrupt_partition(tmp_path: Path) -> None:
    data = tmp_path / "data"
    topics = tmp_path / "topics.yaml"
    topics.write_text(
        "apiVersion: logkeeper.io/v1alpha1\nkind: Topic\nmetadata: {name: c}\n"
        "spec: {config: {cleanup.policy: compact, segment.bytes: 600}}\n"
    )
    lines = jsonl(*({"key": f"k{i % 5}", "value": f"v{i}"} for i in range(60)))
    run(
        "produce", "--dir", str(data), "--topic", "c", "--topics", str(topics),
        "--batch-records", "1", stdin=lines,
    )  # fmt: skip
    first = data / "c-0" / "00000000000000000000.log"
    raw = bytearray(first.read_bytes())
    raw[70] ^= 0xFF
    first.write_bytes(bytes(raw))
    result = run("clean", "--dir", str(data), "--topics", str(topics), check=False)
    assert result.returncode == 1
    assert "c-0: UNCLEANABLE: CorruptRecordError" in result.stdout
    assert "00000000000000000000.log at position 0" in result.stdout
    assert first.read_bytes() == bytes(raw), "nothing rewritten from a corrupt segment"
    bad = run("clean", "--dir", str(data), "--topics", str(topics), "--topic", "nope", check=False)
    assert bad.returncode == 2 and "--topic nope: not declared" in bad.stderr


def test_clean_refuses_a_dedupe_buffer_below_the_minimum(tmp_path: Path) -> None:
    result = run("clean", "--dir", str(tmp_path), "--dedupe-buffer-bytes", "1000", check=False)
    assert result.returncode == 2
    assert (
        "--dedupe-buffer-bytes: 1000 bytes for 1 cleaner thread(s) is below the minimum of "
        "1048576 bytes per thread" in result.stderr
    )


def test_a_reader_that_goes_away_is_not_an_error(tmp_path: Path) -> None:
    """`logkeeper consume | head -1`: the pipe closes long before the output ends; the command
    exits 0 without a message (it used to report the BrokenPipeError and exit 2)."""
    run(
        "produce",
        "--dir",
        str(tmp_path),
        "--topic",
        "t",
        stdin=jsonl(*({"key": f"k{i}", "value": "v" * 200} for i in range(3000))),
    )
    with subprocess.Popen(
        [sys.executable, "-m", "logkeeper.cli", "consume", "--dir", str(tmp_path), "--topic", "t"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ) as consumer:
        assert consumer.stdout is not None and consumer.stderr is not None
        first = consumer.stdout.readline()
        consumer.stdout.close()  # as `head -1` does after its line
        stderr = consumer.stderr.read()
        assert consumer.wait(timeout=120) == 0, stderr
    assert json.loads(first)["offset"] == 0
    assert stderr == b""
