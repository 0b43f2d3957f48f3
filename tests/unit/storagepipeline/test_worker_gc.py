"""The executors' garbage-collector freeze (storagepipeline.worker_gc): once per process, from
compact's task functions, and what it buys (a full collection that no longer walks the frozen
objects). Each case runs in a fresh interpreter, so this test process's heap is never frozen."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _run(code: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_freezes_once_per_process_and_again_in_a_forked_child() -> None:
    got = _run(
        """
import gc, json, os
from storagepipeline import worker_gc
before = gc.get_freeze_count()
first, second = worker_gc.freeze_long_lived(), worker_gc.freeze_long_lived()
frozen = gc.get_freeze_count()
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, b"1" if worker_gc.freeze_long_lived() else b"0")
    os._exit(0)
os.waitpid(pid, 0)
child = os.read(read, 1) == b"1"
print(json.dumps({"before": before, "first": first, "second": second, "frozen": frozen,
                  "child": child}))
"""
    )
    assert got["before"] == 0
    assert got["first"] is True and got["second"] is False
    assert isinstance(got["frozen"], int) and got["frozen"] > 10_000  # pyspark, storagecore...
    assert got["child"] is True


@pytest.mark.parametrize(
    "entry",
    [
        "from storagepipeline.compact import _clean_bin as entry; entry([])",
        "from storagepipeline.aggregated_map import _clean_on_executor as entry\n"
        "try:\n    entry((0, ([], [])))\nexcept ValueError:\n    pass  # no task: unpacking fails",
    ],
    ids=["compact-partition-task", "compact-aggregated-group-task"],
)
def test_compact_task_functions_freeze_the_worker_heap(entry: str) -> None:
    """What the executors run first thing: a test that fails if a task function stops
    freezing (the full collection after each task would walk every module's objects again)."""
    got = _run(
        f"""
import gc, json
{entry}
gc.collect()
print(json.dumps({{"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}}))
"""
    )
    assert isinstance(got["frozen"], int) and got["frozen"] > 10_000
    assert isinstance(got["tracked"], int) and got["tracked"] < got["frozen"] // 10
