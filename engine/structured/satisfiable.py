"""Whether a JSON schema has a finite instance at all.

``{"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}`` admits only
infinite text (``{"a":{"a":{"a":...``): every prefix is valid, so the mask never stops the
model, and the request ran until a grammar limit failed it. :func:`infinite_only` finds such
schemas before a request runs: a node is satisfiable by a finite value when its own keywords
are (a type with a scalar, or an object whose required properties are, or an array whose
first ``minItems`` items are) and its ``$ref``, ``allOf`` and ``anyOf``/``oneOf`` parts are;
``$ref`` targets start unsatisfiable and are raised to a fixed point (a grammar's productive
symbols, in schema terms). References it cannot resolve (other documents, anchors) count as
satisfiable: it refuses only what it can prove.
"""

from __future__ import annotations

import json
from urllib.parse import unquote

SCALARS = frozenset({"string", "number", "integer", "boolean", "null"})


def infinite_only(schema) -> bool:
    """True when ``schema`` (already depth-checked) provably has no finite instance."""
    targets: dict[str, object] = {}
    _collect_refs(schema, schema, targets)
    finite = {ref: False for ref in targets}
    changed = True
    while changed:
        changed = False
        for ref, node in targets.items():
            if not finite[ref] and _finite(node, finite):
                finite[ref] = changed = True
    return not _finite(schema, finite)


def json_blocks(grammar: str) -> list:
    """The JSON schemas of a Lark grammar's ``%json { ... }`` terms (unreadable ones skipped)."""
    out, decoder, at = [], json.JSONDecoder(), 0
    while (at := grammar.find("%json", at)) >= 0:
        start = grammar.find("{", at)
        at += 5
        if start < 0:
            break
        try:
            value, _ = decoder.raw_decode(grammar, start)
        except (ValueError, RecursionError):
            continue
        out.append(value)
    return out


def _resolve(root, ref: str):
    """The node a local ``$ref`` (``#`` or ``#/json/pointer``) names, or ``None``."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None
    node = root
    for part in ref[2:].split("/"):
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _collect_refs(root, node, targets: dict) -> None:
    """Every resolvable local ``$ref`` reachable from ``node``, into ``targets``."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, list):
            stack.extend(n)
            continue
        if not isinstance(n, dict):
            continue
        ref = n.get("$ref")
        if isinstance(ref, str) and ref not in targets:
            target = _resolve(root, ref)
            if target is not None:
                targets[ref] = target
                stack.append(target)
        stack.extend(v for k, v in n.items() if k not in ("enum", "const", "default", "examples"))


def _finite(node, finite: dict) -> bool:
    """Whether ``node`` has a finite instance, given which ``$ref`` targets do."""
    if node is False:
        return False
    if not isinstance(node, dict):
        return True
    ref = node.get("$ref")
    if isinstance(ref, str) and not finite.get(ref, True):
        return False
    for key in ("allOf",):
        parts = node.get(key)
        if isinstance(parts, list) and not all(_finite(p, finite) for p in parts):
            return False
    for key in ("anyOf", "oneOf"):
        parts = node.get(key)
        if isinstance(parts, list) and parts and not any(_finite(p, finite) for p in parts):
            return False
    types = node.get("type")
    types = {types} if isinstance(types, str) else set(types) if isinstance(types, list) else set()
    if not types or types & SCALARS:
        return True
    return ("object" in types and _object_finite(node, finite)) or \
        ("array" in types and _array_finite(node, finite))


def _object_finite(node: dict, finite: dict) -> bool:
    props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
    extra = node.get("additionalProperties", True)
    required = node.get("required") if isinstance(node.get("required"), list) else []
    return all(_finite(props.get(name, extra), finite) for name in required
               if isinstance(name, str))


def _array_finite(node: dict, finite: dict) -> bool:
    least = node.get("minItems", 0)
    if not isinstance(least, int) or least <= 0:
        return True
    prefix = node.get("prefixItems")
    items = node.get("items", True)
    if isinstance(items, list):  # draft 4's tuple form
        prefix, items = items, node.get("additionalItems", True)
    prefix = prefix if isinstance(prefix, list) else []
    return all(_finite(p, finite) for p in prefix[:least]) and \
        (least <= len(prefix) or _finite(items, finite))
