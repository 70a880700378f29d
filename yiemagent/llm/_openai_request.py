"""The chat-completions request body for OpenAI's API and every server that speaks it (spec §14 llmCall).

``build_openai_request`` turns a dict made by ``format_msg_for_llm`` into the body
``OpenAIClient`` sends (module ``openai``); ``OpenAIClient`` reads the reply with
module ``_openai_reply``.

Custom and legacy calls (docs/failures.md "OpenAI custom and legacy calls") go back the
way the server sent them: a custom call as a custom call, a legacy call as an assistant
``function_call`` answered by a ``function`` message.

Images (docs/api.md "Images"): a user message's images go as ``image_url`` parts in its
content, in order. A ``tool`` message takes text only, so the images of a batch of tool
results follow the batch in one user message, each after a text part naming the call it
came from. An image the API would refuse (a type other than PNG, JPEG, GIF, WebP; more
than 20 MB of base64) goes as a text part saying so.

The fields a server documents as wanted back (``ECHOED_FIELDS``) and its refusal go back
unchanged, in the same field, to that server alone (docs/streaming.md "Reasoning sent back").

A typed answer asked of the provider (docs/api.md "Native typed answers") is the formatted
dict's ``response_format`` ``json_schema``, sent as it is, or in llama-cpp-python's form
(``{"type": "json_object", "schema": ...}``) when the client's ``native_output`` says so.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any, Optional

from ..extraction import arguments_json, parse_tool_arguments
from ..types import split_data_url
from ._openai_reply import API, CUSTOM, ECHOED_FIELDS, LEGACY
from ._wire import content_text, unsendable

# What a reply's own server gets back beside them: its refusal (OpenAI's assistant ``refusal``).
_ORIGIN_FIELDS = (*ECHOED_FIELDS, "refusal")
# The keys OpenAI's schema allows on each message role; our extras ("name", "is_error" on tool messages) are not sent.
_MESSAGE_KEYS: dict[object, tuple[str, ...]] = {  # looked up by whatever a message's "role" holds
    "system": ("role", "content", "name"),
    "developer": ("role", "content", "name"),
    "user": ("role", "content", "name"),
    "assistant": ("role", "content", "name", "tool_calls", "function_call", "refusal"),
    "tool": ("role", "content", "tool_call_id"),
    "function": ("role", "content", "name"),
}


def _custom_input(function: dict[str, Any]) -> str:
    """A custom call's free-text input from the formatted call's arguments (``{"input": text}``)."""
    value = parse_tool_arguments(function.get("arguments"))[0].get("input", "")
    return value if isinstance(value, str) else arguments_json(value)


def _wire_calls(message: dict[str, Any], wire: dict[str, Any], legacy_ids: set[str]) -> None:
    """An assistant message's calls as the server sent them: custom calls as custom calls, a legacy call as ``function_call``."""
    calls = [c for c in wire.get("tool_calls") or [] if isinstance(c, dict)]
    if all(c.get("type", "function") == "function" for c in calls):
        return  # the common case: sent as they are
    if len(calls) == 1 and calls[0].get("type") == LEGACY:
        function = calls[0].get("function") or {}
        del wire["tool_calls"]
        wire["function_call"] = {"name": function.get("name", ""), "arguments": function.get("arguments", "{}")}
        legacy_ids.add(calls[0].get("id", ""))
        return
    entries = []
    for call in calls:
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        if call.get("type") == CUSTOM:
            entries.append({"id": call.get("id", ""), "type": CUSTOM, "custom": {"name": function.get("name", ""), "input": _custom_input(function)}})
        elif call.get("type", "function") == "function":
            entries.append(call)
        else:  # a legacy call that shares its message with others: the modern form is the only one that can hold them all
            entries.append({**call, "type": "function"})
    wire["tool_calls"] = entries


MAX_IMAGE_BYTES = 20 * 1024 * 1024
"""OpenAI's cap on one image (20 MB), counted here on its base64 text."""


def _sendable_image(part: Any) -> Any:
    """An ``image_url`` part as it is, or a text part naming why the API would refuse its image (docs/api.md "Images")."""
    image_url = part.get("image_url") if isinstance(part, dict) and part.get("type") == "image_url" else None
    parts = split_data_url(image_url.get("url") if isinstance(image_url, dict) else image_url)
    note = unsendable(*parts, MAX_IMAGE_BYTES, "OpenAI's chat completions API") if parts else None
    return {"type": "text", "text": note} if note else part


def _tool_images_message(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One user message holding the images of a batch of tool results, each after a text part naming its call."""
    parts: list[Any] = []
    for result in results:
        for index, image in enumerate((i for i in result["images"] if isinstance(i, dict)), 1):
            label = f"Image {index} of the result of tool call {result.get('tool_call_id', '')} ({result.get('name') or 'tool'}):"
            parts += [{"type": "text", "text": label}, _sendable_image(image)]
    return {"role": "user", "content": parts}


def _wire_messages(messages: Iterable[dict[str, Any]], provider: Optional[str] = None) -> list[dict[str, Any]]:
    """The request's messages: each formatted message on the wire, and after each batch of tool results one user message with their images.

    Every call's result comes first, in call order, as chat completions require the
    ``tool`` messages to follow the assistant message directly.
    """
    legacy_ids: set[str] = set()  # ids of legacy calls sent as function_call: their results go as "function" messages
    wires: list[dict[str, Any]] = []
    with_images: list[dict[str, Any]] = []  # the results of the current batch that hold images
    for message in messages:
        if message.get("role") != "tool" and with_images:
            wires.append(_tool_images_message(with_images))
            with_images = []
        wires.append(_wire_message(message, legacy_ids, provider))
        if message.get("role") == "tool" and isinstance(message.get("images"), list) and message["images"]:
            with_images.append(message)
    if with_images:
        wires.append(_tool_images_message(with_images))
    return wires


def _echo_to_origin(message: dict[str, Any], wire: dict[str, Any], provider: Optional[str]) -> None:
    """The reply's own fields back on its assistant message, when this request goes to the server that sent them.

    ``reasoning_echo`` (``formatting.assistant_message_to_openai``) names the api and provider
    of the reply; its fields go back unchanged, in the field they came in, and each tool
    call's ``extra_content`` on that call, only when both match this client's: a field is
    never sent to a server that did not produce it (a history moved to another provider by
    ``FallbackLLM``, a session resumed with another client). docs/streaming.md "Reasoning sent back".
    """
    echo = message.get("reasoning_echo")
    if not isinstance(echo, dict) or provider is None or echo.get("api") != API or echo.get("provider") != provider:
        return
    fields = echo.get("fields")
    if isinstance(fields, dict):
        wire.update((key, fields[key]) for key in _ORIGIN_FIELDS if key in fields)
    extras = echo.get("tool_calls")
    calls = wire.get("tool_calls")
    if isinstance(extras, list) and any(extras) and isinstance(calls, list):
        extras = extras[: len(calls)] + [None] * (len(calls) - len(extras))
        wire["tool_calls"] = [
            {**call, "extra_content": extra} if isinstance(extra, dict) and isinstance(call, dict) else call for call, extra in zip(calls, extras, strict=True)
        ]


def _wire_message(message: dict[str, Any], legacy_ids: set[str], provider: Optional[str] = None) -> dict[str, Any]:
    role = message.get("role")
    if role == "tool" and message.get("tool_call_id") in legacy_ids:  # the answer to a legacy function_call
        return {"role": "function", "name": message.get("name") or "", "content": content_text(message.get("content"))}
    wire = {k: message[k] for k in _MESSAGE_KEYS.get(role, tuple(message)) if k in message}
    if role == "tool":
        wire["content"] = content_text(message.get("content"))  # decision 9: one string
    elif role == "user" and isinstance(wire.get("content"), list):
        wire["content"] = [_sendable_image(part) for part in wire["content"]]
    elif role == "assistant":
        _wire_calls(message, wire, legacy_ids)
        _echo_to_origin(message, wire, provider)
        if (wire.get("tool_calls") or wire.get("function_call")) and not wire.get("content"):
            wire["content"] = ""  # not null: llama.cpp's server answers 500 to null beside tool calls
    return wire


NATIVE_BY_HOST = {"api.openai.com": "json_schema"}
"""``OpenAIClient.native_output`` when it is not given: the servers known to take a ``json_schema`` ``response_format`` (docs/api.md "Native typed answers")."""
_NATIVE_FORMS = ("json_schema", "json_object")


def sent_response_format(body: dict[str, Any], native_output: Optional[str]) -> None:
    """A ``json_schema`` ``response_format`` in the form the server takes: llama-cpp-python's ``{"type": "json_object", "schema": ...}`` for ``native_output`` "json_object".

    llama-cpp-python's server refuses the ``json_schema`` type (its answer: "Input should be
    'text' or 'json_object'") and constrains the reply to the schema given beside
    ``json_object``. Any other ``response_format`` is sent as it is.
    """
    wanted = body.get("response_format")
    if native_output != "json_object" or not isinstance(wanted, dict) or wanted.get("type") != "json_schema":
        return
    spec = wanted.get("json_schema")
    body["response_format"] = {"type": "json_object", "schema": spec.get("schema", {}) if isinstance(spec, dict) else {}}


def build_openai_request(
    formatted: dict[str, Any], model: str, defaults: Optional[dict[str, Any]] = None, provider: Optional[str] = None
) -> dict[str, Any]:
    """The chat-completions request body for a dict made by ``format_msg_for_llm``.

    Keys of ``formatted`` beyond ``messages`` and ``tools`` (``tool_choice``,
    ``temperature``, ``max_tokens``, …) are passed to the server as they are, over the
    client's ``defaults``; ``model`` may be overridden the same way. ``formatted`` is not
    modified. ``provider`` is the server's (``OpenAIClient.provider``): an assistant
    message that this provider sent gets back its reasoning fields and refusal unchanged
    (``ECHOED_FIELDS``); no other does (docs/streaming.md "Reasoning sent back").
    """
    body: dict[str, Any] = {"model": model, **copy.deepcopy(defaults or {})}
    for key, value in formatted.items():
        if key not in ("messages", "tools"):
            body[key] = value
    body["messages"] = _wire_messages(formatted.get("messages", []), provider)
    if formatted.get("tools"):
        body["tools"] = formatted["tools"]
    return body
