"""The Kubernetes operator: ``StorageVolume`` and ``Topic`` resources → per-volume workers.

What belongs here: the CRDs (generated from :mod:`storageoperator.crds`, checked against
storagecore's config rules), pure functions from resources to child manifests
(:mod:`storageoperator.render`), from worker status to resource status and conditions
(:mod:`storageoperator.conditions`), and the thin kopf handlers that apply them
(:mod:`storageoperator.handlers`).

What must not: storage work (the worker does it), imports of storagecore beyond
``storagecore.config`` and ``storagecore.errors`` (an allow-list that import-linter enforces:
``.importlinter``, contract ``operator-is-an-app``), or of the worker and the pipeline. The
import name is ``storageoperator``; the folder ``operator/`` has no ``__init__.py`` (a package
named ``operator`` would shadow the standard library).
"""
