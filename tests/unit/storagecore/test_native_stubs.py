"""The ``.pyi`` stubs of the C extensions match the built modules (mypy's stubtest): a
function added, removed or re-signatured in C without its stub fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from storagecore.native import load_extension

MODULES = [
    "storagecore.cleaner._native",
    "storagecore.index._mapping",
    "storagecore.records._native",
]
ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", MODULES)
def test_stub_matches_the_built_module(name: str) -> None:
    if load_extension(name) is None:
        pytest.skip(f"{name} not loaded")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy.stubtest",
            name,
            "--mypy-config-file",
            str(ROOT / "pyproject.toml"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
