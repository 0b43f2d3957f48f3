"""A real cleaner process killed with SIGKILL at random moments, in a loop.

Between kills the test appends more keyed records (so there is always dirty data and the
cleaner is always mid-round somewhere: building its map, writing ``.cleaned`` files, renaming
through the swap protocol, deleting). After every kill the directory is reloaded and must read
as a valid state of the log: only records that were written, at their own offsets, in order,
and for every key its latest record (never both old and new copies of a segment, never
neither). ``verify`` finds no error.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from storagecore import LogManager, NewRecord, TopicPartition, build_batch
from storagecore.tools.verify import verify_log_dir
from tests.integration.storagecore.helpers.cleaner_process import CONFIG
from tests.integration.storagecore.helpers.processes import run_and_kill

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HELPER = Path(__file__).parent / "helpers" / "cleaner_process.py"
ROUNDS = int(os.environ.get("SIGKILL_ROUNDS", "8"))
TP = TopicPartition("compacted", 0)


def top_up(data: Path, written: dict[int, tuple[bytes, bytes]], rng: random.Random) -> None:
    with LogManager([data], default_config=CONFIG) as manager:
        log = manager.get_or_create_log(TP)
        for _ in range(rng.randrange(150, 400)):
            key = b"key-%d" % rng.randrange(60)
            offset = log.log_end_offset
            value = b"%s@%d" % (key, offset)
            assert log.append(build_batch([NewRecord(key=key, value=value)])).first_offset == offset
            written[offset] = (key, value)
        log.roll()


def test_cleaner_sigkill_loop(tmp_path: Path) -> None:
    data = tmp_path / "data"
    rng = random.Random(4321)
    written: dict[int, tuple[bytes, bytes]] = {}
    swaps_seen = 0
    for run in range(ROUNDS):
        top_up(data, written, rng)
        before = len(list((data / "compacted-0").glob("*.log")))
        run_and_kill(HELPER, str(data), rng=rng, wait_s=(0.05, 0.6))

        latest: dict[bytes, int] = {}
        for offset, (key, _) in sorted(written.items()):
            latest[key] = offset
        with LogManager([data], default_config=CONFIG) as manager:
            log = manager.get_log(TP)
            records = list(log.records())
            offsets = [r.offset for r in records]
            assert offsets == sorted(set(offsets)), f"run {run}: duplicate or unordered offsets"
            for record in records:
                assert written[record.offset] == (record.key, record.value), (
                    f"run {run}: offset {record.offset} holds something never written there"
                )
            present = set(offsets)
            missing = [o for o in latest.values() if o not in present]
            assert not missing, f"run {run}: latest records lost at offsets {missing}"
            if len(records) < len(written):
                swaps_seen += 1
            assert log.log_end_offset == max(written) + 1
        leftovers = [
            p.name
            for p in (data / "compacted-0").iterdir()
            if p.name.endswith((".cleaned", ".swap", ".deleted"))
        ]
        assert not leftovers, f"run {run}: the loader left {leftovers}"
        report = verify_log_dir(data)
        assert report.ok, [str(f) for f in report.errors]
        assert before > 0
    assert swaps_seen > 0, "the cleaner should have completed swaps in some rounds"
