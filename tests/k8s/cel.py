"""CEL rules of CRD schemas (``x-kubernetes-validations``), evaluated as the API server does,
with cel-python: property names escaped the Kubernetes way (``.`` → ``__dot__``), transition
rules (those using ``oldSelf``) only on updates of a value that existed before."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import celpy

_ESCAPES = (("__", "__underscores__"), (".", "__dot__"), ("-", "__dash__"), ("/", "__slash__"))


def escape(name: str) -> str:
    for raw, escaped in _ESCAPES:
        name = name.replace(raw, escaped)
    return name


def _escaped(value: Any) -> Any:
    if isinstance(value, dict):
        return {escape(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    return value


@functools.cache
def _program(rule: str) -> Any:
    environment = celpy.Environment()
    return environment.program(environment.compile(rule))


def compile_rule(rule: str) -> None:
    """Raise if ``rule`` does not compile."""
    _program(rule)


def evaluate(rule: str, value: Any, old: Any = None) -> bool:
    activation = {"self": celpy.json_to_cel(_escaped(value))}
    if old is not None:
        activation["oldSelf"] = celpy.json_to_cel(_escaped(old))
    return bool(_program(rule).evaluate(activation))


def violations(
    schema: dict[str, Any], value: Any, old: Any = None, path: str = ""
) -> Iterator[str]:
    """Messages of every rule that fails on ``value`` (and ``old`` for transition rules),
    walking the schema's properties and items. A value equal to the old one is not checked
    again, as the API server's validation ratcheting (GA in 1.33) does: a status or metadata
    write leaves the spec's rules alone."""
    if old is not None and value == old:
        return
    for rule in schema.get("x-kubernetes-validations", ()):
        text = rule["rule"]
        if "oldSelf" in text and old is None:
            continue
        if not evaluate(text, value, old):
            yield f"{path or '<root>'}: {rule.get('message', text)}"
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name in value:
                yield from violations(
                    sub,
                    value[name],
                    old.get(name) if isinstance(old, dict) else None,
                    f"{path}.{name}",
                )
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            yield from violations(schema["items"], item, None, f"{path}[{index}]")
