"""Fixtures of the e2e tests: ``env``, an Env (operator_env.py) with the operator's default
settings, stopped at the end. (test_operator_scale.py has its own, with its own settings.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.operator_env import Env


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    environment = Env(tmp_path)
    try:
        yield environment
    finally:
        environment.stop()
