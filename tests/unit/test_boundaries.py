"""Rules import-linter cannot express, checked on the source text."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGES = [
    "storagecore",
    "logkeeper",
    "storageworker",
    "operator/storageoperator",
    "storagepipeline",
]
DURABILITY = ROOT / "storagecore" / "durability.py"


def _sources() -> list[Path]:
    return [
        p
        for package in PACKAGES
        for p in (ROOT / package).rglob("*.py")
        if (ROOT / package).exists()
    ]


def test_only_the_durability_module_fsyncs_or_renames() -> None:
    banned = {
        ("os", "fsync"),
        ("os", "fdatasync"),
        ("os", "replace"),
        ("os", "rename"),
        ("os", "renames"),
    }
    offenders = []
    for path in _sources():
        if path == DURABILITY:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and (node.value.id, node.attr) in banned
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} os.{node.attr}")
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "rename"
                and not (isinstance(node.value, ast.Name) and node.value.id == "durability")
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} .rename()")
    assert offenders == []


def test_no_operator_package_shadows_the_standard_library() -> None:
    assert not (ROOT / "operator" / "__init__.py").exists()


def test_sources_were_scanned() -> None:
    assert len(_sources()) > 20
