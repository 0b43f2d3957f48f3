"""An import-linter contract type ``allowed``: an allow-list of what some modules may import.

import-linter's ``forbidden`` contract names what may not be imported, so a module added to the
imported package later is allowed until someone remembers to list it. This contract turns the
rule around: every direct import from ``source_modules`` (and their descendants) into
``governed_modules`` must land in ``allowed_modules`` (or their descendants); anything else in
the governed packages, present or future, is refused. Imports outside the governed packages are
not this contract's business (a ``forbidden`` contract covers them).

Registered in ``.importlinter`` under ``contract_types`` (``lint-imports`` puts the working
directory on ``sys.path``, which is how it finds this module). Not part of any distribution.
"""

from __future__ import annotations

from typing import Any

import grimp
from importlinter import Contract, ContractCheck, fields, output


def _with_descendants(graph: grimp.ImportGraph, modules: list[Any]) -> set[str]:
    found: set[str] = set()
    for module in modules:
        found.add(module.name)
        found.update(graph.find_descendants(module.name))
    return found


class AllowedImportsContract(Contract):
    type_name = "allowed"

    source_modules = fields.ListField(subfield=fields.ModuleField())
    governed_modules = fields.ListField(subfield=fields.ModuleField())
    allowed_modules = fields.ListField(subfield=fields.ModuleField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        sources = _with_descendants(graph, self.source_modules)  # type: ignore[arg-type]
        governed = _with_descendants(graph, self.governed_modules)  # type: ignore[arg-type]
        allowed = _with_descendants(graph, self.allowed_modules)  # type: ignore[arg-type]
        illegal: list[dict[str, Any]] = []
        for importer in sorted(sources):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                if imported in governed and imported not in allowed and imported not in sources:
                    details = graph.get_import_details(importer=importer, imported=imported)
                    illegal.append(
                        {
                            "importer": importer,
                            "imported": imported,
                            "line_numbers": tuple(d["line_number"] for d in details),
                        }
                    )
        return ContractCheck(kept=not illegal, metadata={"illegal": illegal})

    def render_broken_contract(self, check: ContractCheck) -> None:
        allowed = ", ".join(m.name for m in self.allowed_modules)  # type: ignore[attr-defined]
        output.print_error(f"Imports outside the allow-list ({allowed}):", bold=False)
        output.new_line()
        for link in check.metadata["illegal"]:
            lines = ", ".join(map(str, link["line_numbers"]))
            importer, imported = link["importer"], link["imported"]
            output.print_error(f"- {importer} -> {imported} (l.{lines})", bold=False)
            output.new_line()
