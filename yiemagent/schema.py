"""JSON Schema checking and argument validation with the jsonschema library.

Spec: §8.1 "Validate arguments" (validateRequiredArgs); decision 4 — the default validator
checks the whole ``input_schema``, not only its ``required`` list.

Compiled validators are cached per schema object, so a tool's schema is compiled once,
not on every call.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any, Optional

import jsonschema
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator

from ._bounds import cap_text, preview, short_repr
from .errors import ToolSchemaError

__all__ = ["check_input_schema", "compiled_validator", "validate_required_args"]

_CACHE_SIZE = 1024
# id(schema) -> (schema, validator). The schema itself is kept so that its id cannot be
# reused by another object while the entry lives; the identity check below makes a
# stale id harmless anyway.
_cache: OrderedDict[int, tuple[Any, Validator]] = OrderedDict()
_cache_lock = threading.Lock()  # guards _cache


def check_input_schema(tool_name: str, schema: Any) -> None:
    """Raise ``ToolSchemaError`` naming the tool if ``schema`` is not valid JSON Schema.

    The metaschema is the one the schema names in ``$schema``, else Draft 2020-12. A
    top-level ``"type"`` must be ``"object"`` (spec §7: the arguments are one object).
    """
    if not isinstance(schema, dict):
        raise ToolSchemaError(f"tool {tool_name!r}: input_schema must be a JSON object (dict), got {type(schema).__name__}")
    if "type" in schema and schema["type"] != "object":
        # a tool's arguments are always one JSON object (spec §7); every LLM API rejects another top-level type
        raise ToolSchemaError(f"tool {tool_name!r}: input_schema must describe an object (\"type\": \"object\"), got \"type\": {schema['type']!r}")
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator_class.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise ToolSchemaError(f"tool {tool_name!r}: input_schema is not a valid JSON Schema at {where}: {exc.message}") from exc


def compiled_validator(schema: dict[str, Any]) -> Validator:
    """The cached jsonschema validator for this schema object."""
    key = id(schema)
    with _cache_lock:
        entry = _cache.get(key)
        if entry is not None and entry[0] is schema:
            _cache.move_to_end(key)
            return entry[1]
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = validator_class(schema)
    with _cache_lock:
        _cache[key] = (schema, validator)
        if len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return validator


def _field_of(error: jsonschema.ValidationError) -> str:
    """The argument a validation error is about, as a path like ``units`` or ``items/0``."""
    path = "/".join(str(p) for p in error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict):
        # "required" errors sit on the parent object; name the missing field itself.
        missing = [name for name in error.validator_value if name not in error.instance]
        if missing:
            return "/".join(filter(None, [path, str(missing[0])]))
    return path or "(arguments)"


def validate_required_args(args: Any, input_schema: dict[str, Any]) -> Optional[str]:
    """Validate ``args`` against the whole ``input_schema``; None when valid.

    Spec: §8.1 default ``validateRequiredArgs(args, inputSchema)``.
    Deviation: decision 4 — every keyword of the schema is checked, not only
    ``required``.

    Returns an error text that names each failing field and shows the arguments that
    were received, e.g. ``city: 'city' is a required property. Received arguments:
    {}``.
    """
    validator = compiled_validator(input_schema)
    problems = sorted((_field_of(e), e.message) for e in validator.iter_errors(args))
    if not problems:
        return None
    # error texts echo model input: each part is capped (docs/failures.md), the whole text by the pipeline
    lines = "; ".join(f"{field}: {cap_text(message, 300)}" for field, message in problems[:20])
    # preview() bounds the depth and turns keys into str, so only a value JSON cannot hold
    # reaches _shown; the text is for the model to read, not to parse back
    received = json.dumps(preview(args), ensure_ascii=False, sort_keys=True, default=_shown)
    return f"{lines}. Received arguments: {cap_text(received, 1000)}"


def _shown(value: Any) -> str:
    """A value JSON cannot hold, in words: its bounded repr, or its type if even repr fails."""
    try:
        return short_repr(value)
    except Exception:  # a hostile __repr__ must not turn a validation error into a crash
        return f"<{type(value).__name__} object>"
