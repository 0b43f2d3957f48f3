"""The console script pauses the cyclic garbage collector while it starts (building the parser,
``clean``'s imports), never beyond: a command runs, and a worker serves, with it on."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from logkeeper import cli
from logkeeper.cli import tools


def test_the_collector_is_on_when_a_command_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[bool] = []

    def record(_args: object) -> int:
        seen.append(gc.isenabled())
        return 0

    monkeypatch.setattr(tools, "cmd_verify", record)
    assert gc.isenabled()
    assert cli.main(["verify", "--dir", str(tmp_path)]) == 0
    assert seen == [True]
    assert gc.isenabled()


def test_the_collector_is_on_after_a_clean_and_after_a_bad_one(tmp_path: Path) -> None:
    assert cli.main(["clean", "--dir", str(tmp_path)]) == 0  # nothing to clean
    assert gc.isenabled()
    assert cli.main(["clean", "--dir", str(tmp_path / "absent")]) == 2  # an error, reported
    assert gc.isenabled()
