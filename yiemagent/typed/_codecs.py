"""A codec per Python type: the JSON Schema the model sees, and JSON values -> that type.

Beyond the spec: the one place that turns types into JSON Schema and JSON into values,
under ``tool()`` (README "Tools from functions"). Each annotation compiles once, at decoration, into a ``Codec``: the
JSON Schema the model sees and a ``decode`` function that turns a JSON value that passed
that schema into the declared Python type (a dataclass parameter receives a dataclass,
an Enum parameter the member, a tuple a tuple, a set a set). Only the standard library's
``typing`` and ``inspect`` are used; a pydantic model (pydantic stays optional) brings its
own schema and validation.

What maps to what:

========================================  ==============================================
annotation                                schema
========================================  ==============================================
``str`` / ``int`` / ``float`` / ``bool``  ``string`` / ``integer`` / ``number`` / ``boolean``
``None``                                  ``null``
``Any``, ``object``, no annotation        ``{}`` (any JSON value, in containers of its own)
``list[T]``, ``Sequence[T]``              ``array`` of T
``tuple[A, B]`` / ``tuple[T, ...]``       ``array`` with ``prefixItems`` / of T
``set[T]``, ``frozenset[T]``              ``array`` with ``uniqueItems`` (T hashable)
``dict[str, V]``, ``Mapping[str, V]``     ``object`` with ``additionalProperties`` V
``Union[A, B]``, ``A | B``, ``Optional``  ``anyOf``
``Literal[...]``, ``Enum`` subclasses     ``enum`` of the (JSON scalar) values
dataclasses, ``TypedDict``, ``NamedTuple``  ``object`` with ``properties``/``required``, closed
pydantic ``BaseModel`` (when installed)     its ``model_json_schema()``, ``$defs`` inlined
``datetime``/``date``/``time``/``UUID``   ``string`` with its ``format``; ``Path``: ``string``
``Annotated[T, "text"]``                  T's schema with ``"description": "text"``
========================================  ==============================================

A union decodes with the first branch (in declared order) whose schema the value
passes, except that a JSON number written with a fraction part prefers a ``float``
branch over an ``int`` one.

Deviation: a recursive type (a dataclass that contains itself) raises
``InexpressibleType``: the schema is written inline, without ``$defs``/``$ref``, because
several LLM servers handle references poorly.

Thread safety: ``codec_for`` builds fresh objects on every call; a ``Codec`` is
immutable and may be used from any thread.
"""

from __future__ import annotations

import collections.abc as abc
import dataclasses
import datetime as dt
import enum
import json
import pathlib
import sys
import types
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import jsonschema

from .._bounds import json_copy

__all__ = ["NO_DEFAULT", "Codec", "InexpressibleType", "codec_for", "json_default", "to_json_value", "type_name"]

_NONE_TYPE = type(None)
# Required[...] / NotRequired[...] (Python 3.11+): required-ness is read from the class
_TYPEDDICT_MARKERS = tuple(m for m in (getattr(typing, "Required", None), getattr(typing, "NotRequired", None)) if m)
_JSON_SCALARS = (str, int, float, bool, _NONE_TYPE)
_SEQUENCES = {list, abc.Sequence, abc.MutableSequence, abc.Iterable, abc.Collection}
_SETS = {set, frozenset, abc.Set, abc.MutableSet}
_MAPPINGS = {dict, abc.Mapping, abc.MutableMapping}
# string-valued types: (format or None, decode)
_STRING_TYPES: dict[type, tuple[Optional[str], Callable[[str], Any]]] = {
    dt.datetime: ("date-time", dt.datetime.fromisoformat),
    dt.date: ("date", dt.date.fromisoformat),
    dt.time: ("time", dt.time.fromisoformat),
    uuid.UUID: ("uuid", uuid.UUID),
    pathlib.Path: (None, pathlib.Path),
    pathlib.PurePath: (None, pathlib.PurePath),
}


class InexpressibleType(Exception):
    """A type JSON Schema cannot express (or that this module does not map); ``tool()`` re-raises it as ``ToolDefinitionError``."""

    def __init__(self, tp: Any, why: str = "JSON Schema cannot express it") -> None:
        super().__init__(f"{type_name(tp)}: {why}")
        self.tp = tp
        self.why = why


@dataclass(frozen=True)
class Codec:
    """The schema of one annotation and the function from a validated JSON value to the declared type.

    ``hashable`` says whether decoded values can be set members (``set[T]`` needs it).
    """

    schema: dict[str, Any]
    decode: Callable[[Any], Any]
    hashable: bool = True


def type_name(tp: Any) -> str:
    """An annotation as a reader writes it: ``int``, ``list[int]``, ``Callable[[int], str]``."""
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__qualname__ if tp.__module__ not in ("builtins",) else tp.__name__
    return repr(tp).replace("typing.", "").replace("collections.abc.", "")


def _identity(value: Any) -> Any:
    return value


def _match_choice(value: Any, choices: list[Any], raw: list[Any]) -> Any:
    """The choice whose JSON value equals ``value`` (booleans never equal numbers, as in JSON Schema)."""
    for choice, json_value in zip(choices, raw, strict=True):
        if json_value == value and isinstance(json_value, bool) == isinstance(value, bool):
            return choice
    raise ValueError(f"{value!r} is not one of {raw!r}")


def _choices_schema(tp: Any, raw: list[Any]) -> dict[str, Any]:
    for value in raw:
        if not isinstance(value, _JSON_SCALARS) or (isinstance(value, float) and value != value):
            raise InexpressibleType(tp, f"its value {value!r} is not a JSON string, number, boolean or null")
    schema: dict[str, Any] = {"enum": raw}
    kinds = {_json_kind(v) for v in raw}
    if len(kinds) == 1:
        schema["type"] = kinds.pop()
    return schema


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "null" if value is None else "string"


def _literal_codec(tp: Any) -> Codec:
    choices = list(typing.get_args(tp))
    raw = [c.value if isinstance(c, enum.Enum) else c for c in choices]
    schema = _choices_schema(tp, raw)
    return Codec(schema, lambda v: _match_choice(v, choices, raw))


def _enum_codec(tp: type[enum.Enum]) -> Codec:
    members = list(tp)
    if not members:
        raise InexpressibleType(tp, "an Enum with no members has no value to send")
    raw = [m.value for m in members]
    schema = _choices_schema(tp, raw)
    return Codec(schema, lambda v: _match_choice(v, members, raw))


def _union_codec(tp: Any, stack: tuple[Any, ...]) -> Codec:
    branches = [_compile(arg, stack) for arg in typing.get_args(tp)]
    validators = [jsonschema.Draft202012Validator(b.schema) for b in branches]
    # a number with a fraction part goes to a float branch before an int branch that
    # would also accept it (JSON Schema counts 3.0 as an integer)
    integer_only = [b.schema.get("type") == "integer" for b in branches]

    # the first branch that takes null (declared order, as for any value), found once
    null_branch = next((i for i, v in enumerate(validators) if v.is_valid(None)), None)

    def decode(value: Any) -> Any:
        if value is None and null_branch is not None:  # Optional's common case, without a validator
            return branches[null_branch].decode(value)
        candidates = [i for i, v in enumerate(validators) if v.is_valid(value)]
        if not candidates:
            raise ValueError(f"{value!r} matches none of {type_name(tp)}")
        if isinstance(value, float):
            candidates = [i for i in candidates if not integer_only[i]] or candidates
        return branches[candidates[0]].decode(value)

    return Codec({"anyOf": [b.schema for b in branches]}, decode, all(b.hashable for b in branches))


def _object_codec(
    tp: Any, stack: tuple[Any, ...], hints: dict[str, Any], required: list[str], defaults: dict[str, Any], build: Callable[[dict[str, Any]], Any], hashable: bool
) -> Codec:
    if tp in stack:
        raise InexpressibleType(tp, "it refers to itself; recursive types are not supported (the schema is written inline)")
    stack = (*stack, tp)
    codecs = {name: _compile(hint, stack) for name, hint in hints.items()}
    properties: dict[str, Any] = {}
    for name, codec in codecs.items():
        properties[name] = dict(codec.schema)
        if name in defaults:
            encoded = json_default(defaults[name])
            if encoded is not NO_DEFAULT:
                properties[name]["default"] = encoded
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required

    def decode(value: dict[str, Any]) -> Any:
        return build({k: codecs[k].decode(v) for k, v in value.items()})

    return Codec(schema, decode, hashable and all(c.hashable for c in codecs.values()))


def _dataclass_codec(tp: type, stack: tuple[Any, ...]) -> Codec:
    hints = _resolved_hints(tp)
    fields = [f for f in dataclasses.fields(tp) if f.init]
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    required = [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    hashable = tp.__hash__ is not None  # eq=True without frozen=True sets __hash__ to None
    return _object_codec(tp, stack, {f.name: hints.get(f.name, Any) for f in fields}, required, defaults, lambda kw: tp(**kw), hashable)


def _typeddict_codec(tp: type, stack: tuple[Any, ...]) -> Codec:
    hints = _resolved_hints(tp)
    required = [k for k in hints if k in tp.__required_keys__]  # type: ignore[attr-defined]
    return _object_codec(tp, stack, hints, required, {}, dict, False)


def _namedtuple_codec(tp: type, stack: tuple[Any, ...]) -> Codec:
    hints = _resolved_hints(tp)
    defaults = dict(tp._field_defaults)  # type: ignore[attr-defined]
    names = list(tp._fields)  # type: ignore[attr-defined]
    required = [n for n in names if n not in defaults]
    return _object_codec(tp, stack, {n: hints.get(n, Any) for n in names}, required, defaults, lambda kw: tp(**kw), True)


def _resolved_hints(tp: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(tp, include_extras=True)
    except Exception as exc:  # NameError for a forward reference that cannot be resolved, and kin
        raise InexpressibleType(tp, f"its annotations cannot be resolved ({type(exc).__name__}: {exc})") from exc


def _tuple_codec(tp: Any, args: tuple[Any, ...], stack: tuple[Any, ...]) -> Codec:
    if tp is tuple or (len(args) == 2 and args[1] is Ellipsis):
        item = _compile(args[0] if args else Any, stack)
        return Codec({"type": "array", "items": item.schema}, lambda v: tuple(item.decode(x) for x in v), item.hashable)
    if not args or args == ((),):  # tuple[()]: the empty tuple
        return Codec({"type": "array", "maxItems": 0}, lambda v: ())
    items = [_compile(a, stack) for a in args]
    schema = {"type": "array", "prefixItems": [c.schema for c in items], "items": False, "minItems": len(items)}
    return Codec(schema, lambda v: tuple(c.decode(x) for c, x in zip(items, v, strict=True)), all(c.hashable for c in items))


def _mapping_codec(tp: Any, args: tuple[Any, ...], stack: tuple[Any, ...]) -> Codec:
    key_type, value_type = args if args else (str, Any)
    value = _compile(value_type, stack)
    schema: dict[str, Any] = {"type": "object", "additionalProperties": value.schema}
    base_key = _strip_annotated(key_type)
    if base_key is str or base_key is Any:
        decode_key: Callable[[str], Any] = _identity
    else:
        key = _compile(key_type, stack)
        if key.schema.get("type") != "string":
            raise InexpressibleType(tp, f"its keys are {type_name(key_type)}; JSON object keys are strings (use str, a str Literal or a str Enum)")
        schema["propertyNames"] = key.schema
        decode_key = key.decode
    return Codec(schema, lambda v: {decode_key(k): value.decode(x) for k, x in v.items()}, False)


def _strip_annotated(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = tp.__origin__
    return tp


def _compile(tp: Any, stack: tuple[Any, ...]) -> Codec:
    """The codec of one annotation; ``stack`` holds the classes being compiled (to refuse recursion)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        inner = _compile(args[0], stack)
        texts = [m for m in tp.__metadata__ if isinstance(m, str)]
        if not texts:
            return inner
        return Codec({**inner.schema, "description": texts[0]}, inner.decode, inner.hashable)
    if origin is not None and origin in _TYPEDDICT_MARKERS:  # TypedDict markers; required is read from the class
        return _compile(args[0], stack)
    if tp is Any or tp is object:
        return Codec({}, json_copy, False)
    if tp is None or tp is _NONE_TYPE:
        return Codec({"type": "null"}, _identity)
    if tp is bool:
        return Codec({"type": "boolean"}, _identity)
    if tp is int:  # int(3.0) is 3 (JSON 3.0 is an integer to JSON Schema); int and float give an exact int or float itself back
        return Codec({"type": "integer"}, int)
    if tp is float:
        return Codec({"type": "number"}, float)
    if tp is str:
        return Codec({"type": "string"}, _identity)
    if origin is typing.Literal:
        return _literal_codec(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _union_codec(tp, stack)
    if isinstance(tp, typing.NewType):
        return _compile(tp.__supertype__, stack)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_codec(tp)
    if tp in _STRING_TYPES:
        fmt, decode = _STRING_TYPES[tp]
        return Codec({"type": "string", **({"format": fmt} if fmt else {})}, decode)
    container = origin if origin is not None else tp
    if container is tuple:
        return _tuple_codec(tp, args, stack)
    if container in _SEQUENCES:
        item = _compile(args[0] if args else Any, stack)
        return Codec({"type": "array", "items": item.schema}, lambda v: [item.decode(x) for x in v], False)
    if container in _SETS:
        item = _compile(args[0] if args else Any, stack)
        if not item.hashable:
            raise InexpressibleType(tp, f"its members ({type_name(args[0] if args else Any)}) are not hashable")
        build = frozenset if container is frozenset else set
        return Codec({"type": "array", "items": item.schema, "uniqueItems": True}, lambda v: build(item.decode(x) for x in v), container is frozenset)
    if container in _MAPPINGS:
        return _mapping_codec(tp, args, stack)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_codec(tp, stack)
    if isinstance(tp, type) and typing.is_typeddict(tp):
        return _typeddict_codec(tp, stack)
    if isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields"):
        return _namedtuple_codec(tp, stack)
    if _is_pydantic_model(tp):
        return _pydantic_codec(tp)
    raise InexpressibleType(tp)


def _is_pydantic_model(tp: Any) -> bool:
    """A pydantic ``BaseModel`` subclass; pydantic is optional, and never imported here (a model class means it is)."""
    pydantic = sys.modules.get("pydantic")
    base = getattr(pydantic, "BaseModel", None)
    return base is not None and isinstance(tp, type) and issubclass(tp, base) and tp is not base


def _pydantic_codec(tp: Any) -> Codec:
    """A pydantic model: its own JSON Schema (``$defs`` written inline, as every schema here) and ``model_validate``.

    pydantic's ``ValidationError`` is a ``ValueError`` naming each failing field (``loc``).
    """
    try:
        raw = tp.model_json_schema()
    except Exception as exc:  # pydantic's PydanticInvalidForJsonSchema and kin
        raise InexpressibleType(tp, f"pydantic cannot write its JSON Schema ({type(exc).__name__}: {exc})") from exc
    definitions = raw.pop("$defs", {})
    schema = _inline_refs(tp, raw, definitions, ())
    return Codec(schema, tp.model_validate, getattr(tp, "__hash__", None) is not None)


def _inline_refs(tp: Any, node: Any, definitions: dict[str, Any], active: tuple[str, ...]) -> Any:
    """``node`` with each ``{"$ref": "#/$defs/X"}`` replaced by X; a model that refers to itself is refused."""
    if isinstance(node, list):
        return [_inline_refs(tp, item, definitions, active) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref[len("#/$defs/"):]
        if name in active or name not in definitions:
            raise InexpressibleType(tp, "it refers to itself; recursive types are not supported (the schema is written inline)")
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return {**_inline_refs(tp, definitions[name], definitions, (*active, name)), **_inline_refs(tp, rest, definitions, active)}
    return {k: _inline_refs(tp, v, definitions, active) for k, v in node.items()}


def codec_for(tp: Any) -> Codec:
    """The ``Codec`` of annotation ``tp``.

    Raises:
        InexpressibleType: ``tp`` (or a type inside it) has no JSON Schema here; the
            exception names that type and why.
    """
    return _compile(tp, ())


NO_DEFAULT: Any = object()  # json_default's answer for a value with no JSON form


def json_default(value: Any) -> Any:
    """``value`` as JSON for a schema's ``"default"``, or ``NO_DEFAULT`` when it has no JSON form."""
    try:
        return to_json_value(value)
    except (TypeError, ValueError):
        return NO_DEFAULT


def to_json_value(value: Any) -> Any:
    """A Python value as plain JSON data (the inverse of decoding).

    Dataclasses and NamedTuples become objects, Enums their value, tuples and sets
    arrays (a set sorted, by value or else by JSON text, so the text is stable), datetimes,
    dates, times, UUIDs and paths strings.

    Raises:
        TypeError: the value (or a part of it) has no JSON form; the message names its type.
        ValueError: a float that is NaN or infinite (not JSON).
    """
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{value!r} is not a JSON number")
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, enum.Enum):
        return to_json_value(value.value)
    if _is_pydantic_model(type(value)):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {k: to_json_value(v) for k, v in typing.cast(typing.NamedTuple, value)._asdict().items()}  # a tuple with _fields: a namedtuple
    if isinstance(value, abc.Mapping):
        return {_json_key(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        items = [to_json_value(v) for v in value]
        try:
            return sorted(items)
        except TypeError:  # mixed kinds (1 and "a"): order by JSON text, still stable
            return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, pathlib.PurePath)):
        return str(value)
    raise TypeError(f"a value of type {type(value).__name__} has no JSON form")


def _json_key(key: Any) -> str:
    """A dict key as the json module writes it: strings as they are, ``1`` -> ``"1"``, ``None`` -> ``"null"``."""
    if isinstance(key, enum.Enum):
        key = key.value
    if isinstance(key, str):
        return key
    if isinstance(key, (int, float)) or key is None:  # bool is an int
        return json.dumps(to_json_value(key))
    raise TypeError(f"a dict key of type {type(key).__name__} has no JSON form")
