"""A real writer process killed with SIGKILL in a loop while appending with flushes.

After every kill the directory is reloaded: every offset the writer reported as flushed is
readable with the content it wrote, nothing invalid is ever returned, the log accepts appends
again, and ``verify`` finds no error. The next writer reopens the same directory (recovering it
itself) and goes on. Run both ways a roll flushes: at the roll (the tools) and on the
manager's flush thread (the worker's, storagecore.roll_flush), where kills also land while roll
flushes are pending.
"""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import pytest

from storagecore import LogManager, TopicPartition
from storagecore.tools.verify import verify_log_dir
from tests.conftest import batch
from tests.integration.storagecore.helpers.processes import run_and_kill

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HELPER = Path(__file__).parent / "helpers" / "appender.py"
ROUNDS = int(os.environ.get("SIGKILL_ROUNDS", "8"))


@pytest.mark.parametrize("roll_flush", ["at the roll", "background"])
def test_sigkill_loop(tmp_path: Path, roll_flush: str) -> None:
    data = tmp_path / "data"
    rng = random.Random(1234)
    flushed: dict[tuple[int, int], str] = {}
    mode = ["background"] if roll_flush == "background" else []
    for run in range(ROUNDS):
        output = run_and_kill(HELPER, str(data), str(run), *mode, rng=rng, wait_s=(0.2, 0.8))
        lines = output.splitlines()
        complete = lines if output.endswith("\n") else lines[:-1]  # a line cut by the kill
        for line in complete:
            first, last, digest = line.split()
            flushed[(int(first), int(last))] = digest

        with LogManager([data]) as manager:
            log = manager.get_log(TopicPartition("crash", 0))
            by_offset = {r.offset: r.value for r in log.records()}
            for (first, last), digest in flushed.items():
                values = [by_offset.get(offset) for offset in range(first, last + 1)]
                assert None not in values, f"run {run}: flushed offsets {first}..{last} lost"
                assert hashlib.sha256(b"".join(values)).hexdigest()[:16] == digest  # type: ignore[arg-type]
            assert sorted(by_offset) == list(range(log.log_end_offset))
            end = log.log_end_offset
            assert log.append(batch(1)).first_offset == end
        report = verify_log_dir(data)
        assert report.ok, [str(f) for f in report.errors]
    assert len(flushed) > ROUNDS, "the writer should have flushed in most rounds"
