"""A JSON Schema validator for the subset ``continuous_test/run_report.schema.json`` uses.

Keywords: ``type``, ``properties``, ``required``, ``additionalProperties`` (false),
``items``, ``enum``, ``const``, ``minimum``, ``oneOf`` and ``$ref`` to ``#/$defs/...``;
annotations (``description``, ``title``, ``$schema``, ``$id``) are ignored.  Any
other keyword is an error, so the schema cannot use one that this check would
silently skip.  Semantics as in draft 2020-12: object keywords apply to objects
only, ``minimum`` to numbers only, and a bool is not a number.
"""
from __future__ import annotations

from typing import Any, Dict, List

ANNOTATIONS = {"description", "title", "$schema", "$id", "$defs"}
KEYWORDS = {"type", "properties", "required", "additionalProperties", "items", "enum", "const", "minimum", "oneOf",
            "$ref"}
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def errors(instance: Any, schema: Dict[str, Any]) -> List[str]:
    """Every way ``instance`` breaks ``schema`` (empty when it validates), each with its JSON path."""
    found: List[str] = []
    _check(instance, schema, schema, "$", found)
    return found


def _check(value: Any, schema: Dict[str, Any], root: Dict[str, Any], path: str, found: List[str]) -> None:
    unknown = set(schema) - KEYWORDS - ANNOTATIONS
    if unknown:
        raise ValueError(f"{path}: the schema uses keywords this validator does not know: {sorted(unknown)}")
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"{path}: only #/$defs/ references are supported, not {ref}")
        _check(value, root["$defs"][ref.split("/")[-1]], root, path, found)
    if "type" in schema:
        wanted = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(TYPES[t](value) for t in wanted):
            found.append(f"{path}: {value!r} is not of type {' or '.join(wanted)}")
            return
    _check_value(value, schema, path, found)
    if "oneOf" in schema:
        matching = [option for option in schema["oneOf"] if not errors_in(value, option, root, path)]
        if len(matching) != 1:
            found.append(f"{path}: {value!r} matches {len(matching)} of the oneOf options, not exactly one")
    if isinstance(value, dict):
        _check_object(value, schema, root, path, found)
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            _check(item, schema["items"], root, f"{path}[{index}]", found)


def _check_value(value: Any, schema: Dict[str, Any], path: str, found: List[str]) -> None:
    if "const" in schema and value != schema["const"]:
        found.append(f"{path}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and TYPES["number"](value) and value < schema["minimum"]:
        found.append(f"{path}: {value!r} is less than {schema['minimum']}")


def errors_in(value: Any, schema: Dict[str, Any], root: Dict[str, Any], path: str) -> List[str]:
    found: List[str] = []
    _check(value, schema, root, path, found)
    return found


def _check_object(value: Dict[str, Any], schema: Dict[str, Any], root: Dict[str, Any], path: str,
                  found: List[str]) -> None:
    for name in schema.get("required", []):
        if name not in value:
            found.append(f"{path}: {name!r} is required")
    properties = schema.get("properties", {})
    for name, item in value.items():
        if name in properties:
            _check(item, properties[name], root, f"{path}.{name}", found)
        elif schema.get("additionalProperties", True) is False:
            found.append(f"{path}: {name!r} is not a property the schema allows")
