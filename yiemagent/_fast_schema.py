"""A fast check of tool arguments for the common shapes of JSON Schema (spec §8.1 "Validate arguments").

Decision 4 checks a call's arguments against its tool's whole ``input_schema`` with
jsonschema. Most tools' schemas use a handful of keywords — ``type``, ``properties``,
``required``, ``additionalProperties``, ``items``, an ``enum`` of strings — and for those
``compile_fast_check`` builds, once per schema, a plain Python function that gives
jsonschema's verdict (valid or not) in a few checks. A schema with any other assertion
keyword, or a ``$schema`` other than draft 2020-12 (the default), gets None: jsonschema
alone checks it. The pipeline (``pipeline.validate_required_args``) asks jsonschema for the
errors whenever the arguments are not valid, so the text a model reads is jsonschema's.

The verdicts are held equal to jsonschema's ``Draft202012Validator.is_valid`` by a
hypothesis differential test over schemas of these shapes and arbitrary JSON values
(tests/extras/test_fast_schema.py; docs/performance.md "W1").
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any, Optional

__all__ = ["compile_fast_check"]

Check = Callable[[Any], bool]

_DRAFT_2020_12 = ("https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2020-12/schema#")
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly", "format"})
"""Keywords that assert nothing here (``format`` is an annotation unless a format checker is given, and the pipeline gives none)."""
_HANDLED = frozenset({"type", "properties", "required", "additionalProperties", "items", "enum"})


def _is_integer(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


_TYPES: dict[str, Check] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": _is_integer,
    "number": _is_number,
}


def compile_fast_check(schema: Any, *, top: bool = True) -> Optional[Check]:
    """A function giving jsonschema's verdict on a value for ``schema``, or None when the schema is not of a common shape.

    Never raises: a schema it does not understand, valid or not, gets None.
    """
    if schema is True or (isinstance(schema, dict) and not schema):
        return lambda value: True
    if schema is False:
        return lambda value: False
    if not isinstance(schema, dict):
        return None
    keys = set(schema)
    if top and "$schema" in keys:
        if schema["$schema"] not in _DRAFT_2020_12:
            return None
        keys.discard("$schema")
    keys -= _ANNOTATIONS
    if not keys <= _HANDLED:
        return None
    checks: list[Check] = []
    kind = schema.get("type")
    names = [kind] if isinstance(kind, str) else kind
    if kind is not None and (not isinstance(names, list) or not names or not all(isinstance(n, str) and n in _TYPES for n in names)):
        return None
    enum = "enum" in schema
    # a type check another check implies is left out (one call fewer per value): an enum of strings holds only strings,
    # and an object check made for "type": "object" refuses what is not a dict
    only_objects = names == ["object"]
    if names is not None and not (enum and "string" in names) and not only_objects:
        if len(names) == 1:
            checks.append(_TYPES[names[0]])
        else:
            alternatives = [_TYPES[n] for n in names]
            checks.append(lambda v: any(check(v) for check in alternatives))
    if enum:
        members = schema["enum"]
        if not isinstance(members, list) or not members or not all(isinstance(m, str) for m in members):
            return None
        checks.append(_Enum(frozenset(members)))
    object_check = _object_check(schema, only_objects)
    if object_check is None:
        return None
    if object_check is not _NOTHING:
        checks.append(object_check)
    if "items" in schema:
        item = compile_fast_check(schema["items"], top=False)
        if item is None:
            return None
        checks.append(lambda v: not isinstance(v, list) or all(item(x) for x in v))
    return _all_of(checks)


def _all_of(checks: list[Check]) -> Check:
    """One check passing when each of ``checks`` does (the common one or two without a loop)."""
    if not checks:
        return lambda value: True
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks
        return lambda value: first(value) and second(value)
    return lambda value: all(check(value) for check in checks)


class _Enum:
    """The check of an ``enum`` of strings; an object's check reads its ``members`` and checks a property without calling it."""

    __slots__ = ("members",)

    def __init__(self, members: frozenset[str]) -> None:
        self.members = members

    def __call__(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.members


_INLINE_TYPES: dict[Check, type] = {_TYPES["string"]: str, _TYPES["boolean"]: bool, _TYPES["object"]: dict, _TYPES["array"]: list, _is_integer: int}
"""The type checks that a value of one exact type passes: an object's check passes such a property's value without calling the check."""


def _inline(check: Check) -> tuple[Optional[type], Optional[frozenset[str]]]:
    """How an object's check checks a property without a call: (the exact type that passes the type check, the strings the value must be one of).

    A value of any other type is given to the property's check (an ``int`` subclass, a
    3.0 for "integer", a ``str`` subclass), which gives the verdict. (None, None): the
    property's check is always called.
    """
    if isinstance(check, _Enum):
        return str, check.members
    return _INLINE_TYPES.get(check), None


def _NOTHING(value: Any) -> bool:  # noqa: N802  a marker: the schema says nothing of objects
    return True


def _object_check(schema: dict[str, Any], only_objects: bool = False) -> Optional[Check]:
    """The check of ``properties``, ``required`` and ``additionalProperties`` (applied to dicts only), ``_NOTHING``, or None.

    ``only_objects``: the schema's type is "object": the check also refuses a value that is not a dict (it is then the type's check too).
    """
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return None
    compiled: dict[str, Check] = {}
    for name, sub in properties.items():
        sub_check = compile_fast_check(sub, top=False)
        if sub_check is None:
            return None
        compiled[name] = sub_check
    extra_check = compile_fast_check(extra, top=False)
    if extra_check is None:
        return None
    if not compiled and not required and extra is True:
        return _TYPES["object"] if only_objects else _NOTHING
    needed = tuple(required)
    # (name, type, members, check): a property's value of exactly its one type (and in an enum's members) is checked here, without a call
    items = tuple((name, *_inline(sub), sub) for name, sub in compiled.items())
    open_ended = extra is True or extra == {}
    closed = extra is False

    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return not only_objects
        for name in needed:
            if name not in value:
                return False
        for name, kind, members, sub in items:
            if name in value:
                item = value[name]
                if type(item) is not kind and not sub(item):  # kind None: never a value's type, the check is called
                    return False
                if members is not None and item not in members:
                    return False
        if open_ended:
            return True
        for name in value:
            if name not in compiled:
                if closed or not extra_check(value[name]):
                    return False
        return True

    return check
