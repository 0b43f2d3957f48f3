"""A compact job's rounds on a worker (storageworker.external_rounds) on a manual clock: the
pause nests with an admin hold, one job per partition, a lease that passes ends the job (its
pause and pins go), finish refuses a partition whose segments changed since the plan."""

from __future__ import annotations

import pytest

from storagecore import TopicPartition, files
from storagecore.cleaner.manager import CleaningState
from storagecore.errors import ConfigError
from tests.unit.storageworker.test_worker import COMPACTED, Setup, fill, setup, topic_yaml

__all__ = ["setup"]  # the fixture, shared with the worker's tests

TP = TopicPartition("c", 0)


def test_a_lease_that_passes_ends_the_job(setup: Setup) -> None:
    setup.declare(topic_yaml("c", 1, COMPACTED))
    worker = setup.start()
    assert worker.cleaner is not None and worker.external_rounds is not None
    rounds = worker.external_rounds
    fill(worker, TP)
    worker.control("pause-cleaning", "c")  # an admin hold: the job's pause nests with it
    begun = rounds.begin(rounds.chosen(["c"], []), lease_ms=60_000)
    (round_,) = begun["rounds"]
    assert round_["plan"]["groups"] and all(
        f"/{files.PINS_DIR}/" in path for path in round_["read_paths"]
    )
    assert worker.cleaner.manager.state(TP) == (CleaningState.PAUSED, 2)
    assert rounds.busy() == {"c-0": begun["job"]}
    with pytest.raises(ConfigError, match="c-0 already in a compact job"):
        rounds.begin([TP], lease_ms=60_000)
    setup.clock.advance(30_000)
    worker.reload()
    assert rounds.busy() == {"c-0": begun["job"]}  # not yet
    setup.clock.advance(31_000)
    worker.reload()  # the reload task ends jobs whose lease passed
    assert rounds.busy() == {} and rounds.aborted == 1
    assert worker.cleaner.manager.state(TP) == (CleaningState.PAUSED, 1)  # the hold stays
    assert not list((setup.root / "data" / files.PINS_DIR).glob("*"))
    with pytest.raises(ConfigError, match="no compact job"):
        rounds.finish(begun["job"], {"c-0": []})


def test_finish_refuses_segments_that_changed_and_bad_sizes(setup: Setup) -> None:
    setup.declare(topic_yaml("c", 1, COMPACTED))
    worker = setup.start()
    assert worker.cleaner is not None and worker.external_rounds is not None
    rounds = worker.external_rounds
    fill(worker, TP)
    begun = rounds.begin([TP], lease_ms=60_000)
    groups = len(begun["rounds"][0]["plan"]["groups"])
    # Sizes for the wrong number of groups: refused, nothing swapped, cleaning resumed.
    assert rounds.finish(begun["job"], {"c-0": [0] * (groups + 1)}) == {
        "c-0": f"failed: {groups + 1} cleaned sizes for {groups} groups"
    }
    assert worker.cleaner.manager.state(TP) == (None, 0)
    # Copies that do not exist (never written): refused by the size check.
    begun = rounds.begin([TP], lease_ms=60_000)
    outcome = rounds.finish(begun["job"], {"c-0": [123] * groups})
    assert outcome["c-0"].startswith("failed: c-0: cleaned copy") and "-1 bytes" in outcome["c-0"]
    # The worker's own cleaner ran between plan and finish: the segments changed.
    begun = rounds.begin([TP], lease_ms=60_000)
    worker.cleaner.manager.resume(TP)  # (only to let the test's clean run)
    assert worker.cleaner.clean_log(TP) is not None
    worker.cleaner.manager.pause(TP)
    assert rounds.finish(begun["job"], {"c-0": [0] * groups}) == {"c-0": "changed"}
    assert worker.cleaner.manager.state(TP) == (None, 0)
