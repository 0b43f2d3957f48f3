"""The parts both CustomResourceDefinitions share: the group and version, the CRD around a
spec and a status schema, the metav1.Condition list and the status fields both resources start
with, printer columns. Pure data; :mod:`storageoperator.crds` assembles and writes the CRDs.
"""

from __future__ import annotations

from typing import Any, Final

GROUP: Final = "logkeeper.io"
VERSION: Final = "v1alpha1"

Schema = dict[str, Any]


CONDITION: Final[Schema] = {
    "type": "object",
    "description": "A metav1.Condition.",
    "required": ["type", "status", "lastTransitionTime", "reason", "message"],
    "properties": {
        "type": {"type": "string", "maxLength": 316, "description": "CamelCase condition type."},
        "status": {
            "type": "string",
            "enum": ["True", "False", "Unknown"],
            "description": "True, False or Unknown.",
        },
        "observedGeneration": {
            "type": "integer",
            "format": "int64",
            "minimum": 0,
            "description": "The generation this condition was set for.",
        },
        "lastTransitionTime": {
            "type": "string",
            "format": "date-time",
            "description": "When the status last changed.",
        },
        "reason": {
            "type": "string",
            "maxLength": 1024,
            "minLength": 1,
            "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            "description": "CamelCase reason.",
        },
        "message": {"type": "string", "maxLength": 32768, "description": "Human-readable."},
    },
}

CONDITIONS: Final[Schema] = {
    "type": "array",
    "description": "Ready, Progressing, Degraded, CleaningPaused, RetentionPaused, "
    "ReconciliationPaused.",
    "maxItems": 16,
    "items": CONDITION,
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}

#: What the status of both resources starts with.
STATUS_COMMON: Final[Schema] = {
    "observedGeneration": {
        "type": "integer",
        "format": "int64",
        "description": "The generation last acted on.",
    },
    "conditions": CONDITIONS,
}


def column(name: str, path: str, kind: str) -> dict[str, str]:
    return {"name": name, "jsonPath": path, "type": kind}


def custom_resource_definition(
    *,
    plural: str,
    kind: str,
    short_names: list[str],
    description: str,
    spec: Schema,
    status: Schema,
    columns: list[dict[str, str]],
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "logkeeper"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": plural,
                "singular": kind.lower(),
                "kind": kind,
                "listKind": f"{kind}List",
                "shortNames": short_names,
                "categories": ["logkeeper"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "properties": {
                                "apiVersion": {"type": "string", "description": "API version."},
                                "kind": {"type": "string", "description": "Kind."},
                                "metadata": {"type": "object", "description": "Metadata."},
                                "spec": spec,
                                "status": status,
                            },
                            "required": ["spec"],
                        }
                    },
                }
            ],
        },
    }
