"""Instruction counts under valgrind's callgrind, shared by the benchmarks: a noise-free second
figure beside the timings (the same binary and inputs give the same count on a loaded machine).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def callgrind_total(command: list[str], out_file: Path) -> int:
    """Instructions (Ir) executed by ``command`` under callgrind, children not traced."""
    env = dict(os.environ, PYTHONHASHSEED="0")  # the same hashing, the same instructions
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--trace-children=no",
         f"--callgrind-out-file={out_file}", *command],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"callgrind of {command} exited {done.returncode}:\n{done.stderr}")
    for line in out_file.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {out_file}")
