"""Tool-call extraction from an LLM response (spec §7).

Both formats of spec §7 are read — a ``{"type": "tool_calls", "tool_calls": [...]}``
block and single ``{"type": "tool_call", ...}`` blocks — with ``name`` and ``arguments``
either at the top level of a call or under ``"function"`` (decision 2), because servers
disagree (shared/fixtures/README.md).

Arguments may be a dict, a JSON string, a double-encoded JSON string, an empty string,
``null`` or missing; the last three mean ``{}``. Anything else that is not a JSON object
is not a crash: the call carries ``arguments_error`` and is answered with an error
result saying what was wrong with the JSON.

A missing or empty id is replaced by a synthetic one that is stable — the same message
always yields the same ids, so the tool results and the assistant message agree when the
history is sent back — and unique within the conversation.

Decision 15: whatever the model sent, the calls extracted can be sent back. Arguments
that are not strict JSON (NaN, nesting deeper than ``MAX_ARGUMENTS_DEPTH``, a set, an integer longer
than Python reads or writes, ``1e400``, a lone surrogate) are an ``arguments_error``, like
invalid JSON. ``parse_tool_arguments`` is the one place where arguments become a dict and
``arguments_json`` the one place where they become text again (docs/failures.md,
"Arguments a model sends"): every client, the formatter and the OfflineLLM go through
them, so no argument the model sent can fail anywhere later. An id longer than
``MAX_ID_CHARS`` is replaced by
a synthetic one; a name is cut to ``MAX_NAME_CHARS``; and a later call of the same reply
that repeats an earlier id is renamed ``<id>_2``, ``<id>_3``... (docs/failures.md), so
each result answers exactly one call.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from typing import Any, Optional

from ._bounds import MAX_ARGUMENTS_DEPTH, JSONTooDeepError, NotJSONError, _plainly_json, cap_text, clean_str, json_safe, loads_json, short_repr
from ._format_cache import cached_calls, remember_calls
from .types import AgentToolCall, AssistantMessage

__all__ = ["arguments_json", "extract_tool_calls", "parse_tool_arguments"]

logger = logging.getLogger("yiemagent.extraction")

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_MAX_DECODE_DEPTH = 3
_JSON_TYPE_NAMES = {list: "an array", dict: "an object", int: "a number", float: "a number", bool: "a boolean"}
"""The JSON words for what a model sent, in the errors it reads."""
MAX_ID_CHARS = 128
"""A longer tool-call id is replaced by a synthetic one (servers bound ids: OpenAI at 40)."""
MAX_NAME_CHARS = 128
"""A longer tool name is cut: no tool has such a name, and the name goes back every round."""
CALL_TYPES = ("function", "custom", "function_call")
"""``AgentToolCall.type``: a function call; an OpenAI custom tool call (free-text input, the
tool gets ``{"input": text}``); a legacy OpenAI ``function_call``. Each goes back as it came
(docs/failures.md "OpenAI custom and legacy calls")."""


def parse_tool_arguments(raw: Any) -> tuple[dict[str, Any], Optional[str]]:
    """Turn a call's raw arguments into a dict: ``(arguments, None)`` or ``({}, problem)``.

    Spec: §7 (``arguments::Dict{String,Any}``); decisions 2 and 15.

    ``raw`` may be anything a server or a model sent: a dict, a JSON string (double-encoded
    too), ``""``/``None`` (``{}``). The arguments returned are strict JSON that can be sent
    again; every other outcome is a ``problem`` the model can read, naming the place
    ("arguments/city is an integer of 5000 digits..."). Never raises.
    """
    try:
        return _parse_arguments(raw)
    except Exception as exc:  # a last net: a hostile mapping or value may raise anything while read
        return {}, f"the arguments could not be read ({type(exc).__name__}: {cap_text(str(exc), 200)}). Send the arguments as one JSON object"


def _parse_arguments(raw: Any) -> tuple[dict[str, Any], Optional[str]]:
    value = raw
    for _ in range(_MAX_DECODE_DEPTH):
        if value is None:
            return {}, None
        if isinstance(value, dict):
            break
        if not isinstance(value, str):
            break
        text = value.strip()
        if not text:
            return {}, None
        try:
            value = loads_json(text, constants=True)
        except json.JSONDecodeError as exc:
            reason = exc.msg.removesuffix(" at")  # "Unterminated string starting at", "Invalid control character at"
            return {}, (
                f"the arguments are not valid JSON ({reason} at line {exc.lineno} column {exc.colno}); "
                f"received {short_repr(raw, 300)}. Send the arguments as one JSON object"
            )
        except JSONTooDeepError:
            return {}, "the arguments are nested too deeply to be read. Send the arguments as one flatter JSON object"
    if not isinstance(value, dict):
        kind = _JSON_TYPE_NAMES.get(type(value), f"a {type(value).__name__}")
        return {}, f"the arguments must be a JSON object, got {kind}: {short_repr(raw, 300)}"
    if _plainly_json(value, MAX_ARGUMENTS_DEPTH):  # what json_safe returns as it is, in its one walk (the common case)
        return value, None
    try:
        return json_safe(value, max_depth=MAX_ARGUMENTS_DEPTH, _path="arguments", strict_text=True), None
    except NotJSONError as exc:
        return {}, f"{exc}. Send the arguments as one JSON object of plain JSON values"


_ARGUMENTS_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def _one_shot_encoder() -> Callable[[Any], str]:
    """``_ARGUMENTS_ENCODER.encode``, with json's C encoder made once instead of at every call (as ``encode`` does).

    ``json.dumps(value, ensure_ascii=False, allow_nan=False)`` of a value that holds no
    container twice over: the same text, or the same ``TypeError`` or ``ValueError``. The C
    encoder is json's own (``json.encoder.c_make_encoder``, what ``encode`` runs); it is
    taken only where it exists and writes a probe as ``encode`` does, else ``encode`` itself.
    It checks no circular reference: a dict that holds itself raises ``RecursionError``
    where ``encode`` raises ``ValueError``.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    encoder = _ARGUMENTS_ENCODER
    try:
        chunks = make(None, encoder.default, json.encoder.encode_basestring, None, encoder.key_separator, encoder.item_separator, False, False, False)  # type: ignore[misc]
        probe = {"a": [1, 2.5, None, True, "é\n\"", {"b": -0.0}]}
        if "".join(chunks(probe, 0)) == encoder.encode(probe):
            return lambda value: "".join(chunks(value, 0))
    except Exception:  # noqa: BLE001  another Python's json: its own encode is the answer
        pass
    return encoder.encode


json_text = _one_shot_encoder()
"""``json.dumps(value, ensure_ascii=False, allow_nan=False)``, with json's C encoder made once (``_one_shot_encoder``)."""
_encode_arguments = json_text


def arguments_json(arguments: Any) -> str:
    """Arguments as the JSON text that goes back to a server (decision 9); ``"{}"`` for what cannot.

    Arguments from ``parse_tool_arguments`` can always be written; anything else that
    cannot (a caller's own dict holding NaN) goes back as ``"{}"`` rather than raise.
    """
    try:
        return _encode_arguments(arguments)  # json.dumps(arguments, ensure_ascii=False, allow_nan=False), built once
    except (TypeError, ValueError, RecursionError):
        logger.warning("tool-call arguments that are not strict JSON were sent back as {}: %s", short_repr(arguments))
        return "{}"


def _synthetic_id(response: AssistantMessage, position: int, call: dict[str, Any]) -> str:
    """A 9-character alphanumeric id, derived from the message and the call's position.

    Nine alphanumerics is the strictest id format a server here asks for (Mistral).
    """
    try:
        body = json.dumps(call, sort_keys=True, default=repr)
    except (ValueError, TypeError, RecursionError):  # keys of mixed types, nesting too deep: the position is enough
        body = ""
    seed = f"{response.timestamp.isoformat()}|{position}|{body[:4096]}"
    number = int.from_bytes(hashlib.blake2b(seed.encode(), digest_size=8).digest(), "big")
    chars = []
    for _ in range(9):
        number, digit = divmod(number, 62)
        chars.append(_ALPHABET[digit])
    return "".join(chars)


def _custom_arguments(custom: dict[str, Any]) -> tuple[dict[str, Any], Optional[str]]:
    """A custom call's free-text input as the tool's arguments: ``{"input": text}``."""
    text = custom.get("input", "")
    if text is None:
        text = ""
    if not isinstance(text, str):
        kind = _JSON_TYPE_NAMES.get(type(text), f"a {type(text).__name__}")
        return {}, f"the input of a custom tool call must be text, got {kind}: {short_repr(text, 300)}"
    return parse_tool_arguments({"input": text})


def _to_tool_call(response: AssistantMessage, position: int, data: dict[str, Any]) -> AgentToolCall:
    kind: str = data["type"] if data.get("type") in CALL_TYPES else "function"
    custom = data.get("custom")
    function = data.get("function")
    source = custom if kind == "custom" and isinstance(custom, dict) else function if isinstance(function, dict) else data
    name = source.get("name")
    if not isinstance(name, str):
        outer = data.get("name")
        name = outer if isinstance(outer, str) else ""
    name = clean_str(name[:MAX_NAME_CHARS])  # no lone surrogate: the name goes back as UTF-8
    if source is custom:
        arguments, problem = _custom_arguments(custom)
    else:
        arguments, problem = parse_tool_arguments(source.get("arguments", data.get("arguments")))
    call_id = data.get("id")
    if not isinstance(call_id, str) or not call_id or len(call_id) > MAX_ID_CHARS:
        call_id = _synthetic_id(response, position, data)
    call_id = clean_str(call_id)
    return AgentToolCall(call_id, name, arguments, kind, problem)


def _unique_ids(calls: list[AgentToolCall]) -> list[AgentToolCall]:
    """Rename each later call that repeats an earlier id: ``<id>_2``, ``<id>_3``... (never an id in use)."""
    seen = {c.id for c in calls}
    if len(seen) == len(calls):
        return calls
    taken: set[str] = set()
    unique = []
    for call in calls:
        if call.id in taken:
            n = 2
            while f"{call.id}_{n}" in seen:
                n += 1
            new_id = f"{call.id}_{n}"
            seen.add(new_id)
            logger.debug("tool call id %r repeated in one reply; the later call is renamed %r", call.id, new_id)
            call = AgentToolCall(new_id, call.name, call.arguments, call.type, call.arguments_error)  # the type goes back with it
        taken.add(call.id)
        unique.append(call)
    return unique


def extract_tool_calls(response: AssistantMessage) -> tuple[bool, list[AgentToolCall], AssistantMessage]:
    """Find the tool calls in an LLM response, in order.

    Spec: §7 "Extraction Logic"; §6 step 5.

    Returns ``(has_tool_calls, tool_calls, assistant_msg)`` where ``assistant_msg`` is the
    response itself. Blocks that are not tool calls (text, images, "thinking") are
    skipped; an entry of a ``tool_calls`` list that is not an object is skipped with a
    warning, since it has no id to answer. Ids are unique within the reply (a repeat
    is renamed, see the module docstring).

    A message is a frozen value, so its calls are read once and kept with it (the
    formatting cache's slot, ``_format_cache.remember_calls``): a reply's arguments are
    parsed by ``normalize_reply`` and never again (docs/performance.md "W1"). The list
    returned is the caller's own.
    """
    known = cached_calls(response)
    if known is not None:  # read before (normalize_reply reads every reply): each argument is parsed once
        return bool(known), list(known), response
    calls: list[AgentToolCall] = []
    position = 0
    for block in response.content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "tool_calls":
            entries = block.get("tool_calls") or []
            if not isinstance(entries, list):
                logger.warning("ignored a tool_calls block whose tool_calls is %s, not a list", type(entries).__name__)
                continue
            for entry in entries:
                if not isinstance(entry, dict):
                    logger.warning("ignored a tool call that is %s, not an object: %s", type(entry).__name__, short_repr(entry))
                    continue
                calls.append(_to_tool_call(response, position, entry))
                position += 1
        elif kind == "tool_call":
            calls.append(_to_tool_call(response, position, block))
            position += 1
    calls = _unique_ids(calls)
    remember_calls(response, tuple(calls))
    return bool(calls), calls, response
