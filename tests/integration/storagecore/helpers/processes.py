"""Start a helper script as a real process, wait until it says "ready", SIGKILL it."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).parents[4]


def run_and_kill(script: Path, *args: str, rng: random.Random, wait_s: tuple[float, float]) -> str:
    """Run ``script`` until it prints "ready", let it work for a random time in ``wait_s``,
    kill it with SIGKILL; return what it printed after "ready"."""
    process = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stdout is not None
    ready = process.stdout.readline()
    assert ready.startswith("ready"), process.stderr.read() if process.stderr else ready
    time.sleep(rng.uniform(*wait_s))
    process.send_signal(signal.SIGKILL)
    output, errors = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL, errors
    return output
