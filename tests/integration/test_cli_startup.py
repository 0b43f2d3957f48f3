"""What ``logkeeper clean`` loads: a clean of an uncompressed log imports no codec library and
no thread pool (they are imported on first use), none of the other applications, nor the parts
of the engine and of the console script that a clean does not use. Imports are most of the
command's start-up time, which benchmarks/bench_cleaner.py measures as part of the whole
process beside Kafka; this test keeps a heavy import from coming back unnoticed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from storagecore import LogConfig, LogManager, NewRecord, TopicPartition, build_batch

TOPICS = """\
apiVersion: logkeeper.io/v1alpha1
kind: Topic
metadata:
  name: events
spec:
  partitions: 1
  config:
    cleanup.policy: compact
"""

# Runs the console script's main in a fresh interpreter and reports the modules it loaded.
PROBE = """\
import json, sys
from logkeeper.cli import main
code = main(sys.argv[1:])
assert code == 0, code
print(json.dumps(sorted(sys.modules)))
"""


# Modules that `logkeeper clean` has no use for: the other applications and their libraries,
# the other subcommands' code, and engine parts a clean does not run.
NOT_FOR_CLEAN = {
    "pyarrow",
    "pyspark",
    "kafka",
    "kopf",
    "kubernetes",
    "prometheus_client",
    "storageworker",
    "storagepipeline",
    "storageoperator",
    "logkeeper.produce",
    "logkeeper.consume",
    "logkeeper.line_reader",
    "logkeeper.spark_jobs",
    "logkeeper.demo",
    "storagecore.tools",
    "storagecore.bulk_append",
    "concurrent.futures",
}


def top_packages(modules: set[str]) -> set[str]:
    """Every module and each of its parent packages (``a.b.c`` gives a, a.b and a.b.c)."""
    names: set[str] = set()
    for module in modules:
        parts = module.split(".")
        names.update(".".join(parts[:n]) for n in range(1, len(parts) + 1))
    return names


def run_probe(args: list[str]) -> tuple[set[str], str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True
    )
    return set(json.loads(done.stdout.splitlines()[-1])), done.stdout


def three_records_rolled(data: Path, config: LogConfig | None = None) -> None:
    """``events-0`` in ``data``: three records of one key, rolled (a dirty segment to clean)."""
    with LogManager([data], default_config=config or LogConfig()) as manager:
        log = manager.get_or_create_log(TopicPartition("events", 0))
        for n in range(3):
            log.append(build_batch([NewRecord(key=b"k", value=b"v%d" % n, timestamp=n)]))
        log.roll()


def test_clean_of_an_uncompressed_log_imports_no_codec_and_no_pool(tmp_path: Path) -> None:
    data = tmp_path / "data"
    three_records_rolled(data, LogConfig(cleanup_policy=("compact",)))
    topics = tmp_path / "topics.yaml"
    topics.write_text(TOPICS)
    modules, out = run_probe(["clean", "--dir", str(data), "--topics", str(topics)])
    assert "storagecore.cleaner.log_cleaner" in modules  # the probe ran the clean
    assert "1 round(s)" in out
    assert not modules & {"lz4", "lz4.frame", "zstandard", "cramjam", "concurrent.futures"}


def test_clean_imports_only_what_it_uses(tmp_path: Path) -> None:
    data = tmp_path / "data"
    three_records_rolled(data, LogConfig(cleanup_policy=("compact",)))
    topics = tmp_path / "topics.yaml"
    topics.write_text(TOPICS)
    modules, out = run_probe(["clean", "--dir", str(data), "--topics", str(topics)])
    assert "1 round(s)" in out
    assert "storagecore.cleaner.log_cleaner" in modules  # the probe ran the clean
    assert not top_packages(modules) & NOT_FOR_CLEAN, top_packages(modules) & NOT_FOR_CLEAN
    # The replaced segment's files were unlinked (on their thread) before the command ended.
    assert not list(data.rglob("*.deleted"))
    assert len(list((data / "events-0").glob("*.log"))) == 2
    # YAML is parsed only for the Topic manifests of --topics.
    assert "yaml" in modules
    modules, _ = run_probe(["clean", "--dir", str(data)])
    assert "yaml" not in modules


def test_clean_with_config_only_imports_no_yaml(tmp_path: Path) -> None:
    """``--config cleanup.policy=compact`` gives the clean its config without a manifest: the
    process compacts the log and never imports the YAML parser (95M instructions of start-up)."""
    data = tmp_path / "data"
    three_records_rolled(data)  # written with Kafka's default config (delete)
    modules, out = run_probe(["clean", "--dir", str(data), "--config", "cleanup.policy=compact"])
    assert "1 round(s) over 1 compacted partition(s)" in out
    assert "yaml" not in modules
    assert not top_packages(modules) & NOT_FOR_CLEAN, top_packages(modules) & NOT_FOR_CLEAN
    assert len(list((data / "events-0").glob("*.log"))) == 2


def test_the_parser_loads_only_the_engine_config() -> None:
    """Building the parser (every command does) imports the engine's config module for its
    defaults, and nothing else of storagecore: no log, cleaner or records."""
    code = (
        "import json, sys\n"
        "from logkeeper.cli import build_parser\n"
        "build_parser().parse_args(['verify', '--dir', '.'])\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = set(json.loads(done.stdout))
    assert {m for m in modules if m.startswith("storagecore")} == {
        "storagecore",
        "storagecore.config",
        "storagecore.errors",
    }
    assert not top_packages(modules) & NOT_FOR_CLEAN
