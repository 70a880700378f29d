"""A client for OpenAI's Responses API, taking the same OpenAI-format dict (spec §14 llmCall).

OpenAI's API for its reasoning models: the reasoning items a model writes before a tool
call are kept across the tool loop, which chat completions cannot carry (docs/streaming.md
"The Responses API"). The request is built from ``format_msg_for_llm``'s dict: the
leading system messages as ``instructions``, user messages (and a later system message)
as input messages (images as ``input_image`` parts), an assistant turn as its items
(``message``, ``function_call`` by ``call_id``; a custom call as ``custom_tool_call``), a
tool result as ``function_call_output`` (a tool's images inside its output, as
``input_image`` parts). Replies are read in ``_responses_reply``.

Reasoning (docs/conformance.md, OpenAI's "Reasoning models" guide, "Keeping reasoning items
in context" and "Encrypted reasoning items"): with ``store=False`` (the default: the
provider keeps nothing) the request asks for ``include: ["reasoning.encrypted_content"]``
when it asks for reasoning (``"reasoning"`` in the options or the formatted dict: a model
that does not reason answers 400 "Encrypted content is not supported with this model").
An assistant turn this server produced goes back item for item in its order: each
reasoning item whole, immediately followed by the item that followed it (the API answers
400 for a reasoning item without it), the message and calls with their ids. All or
nothing (``_own_items``): when any of it cannot go (a reasoning item without its id, its
summary, or under ``store=False`` its ``encrypted_content``, for which the API answers
"Item not found"; a follower a hook removed), the turn goes as another server's would,
without reasoning and without ids (the API answers 400 for a call whose reasoning item
is missing). A turn from another server goes without reasoning (the rule of
``llm/openai.py``: a field is never sent to a server that did not produce it).

Per-request options are those of ``OpenAIClient`` (keys of the options and of the
formatted dict beyond ``messages`` and ``tools`` go into the body), translated where the
Responses API names them otherwise: ``max_tokens`` and ``max_completion_tokens`` are
``max_output_tokens``; ``reasoning_effort`` is ``reasoning.effort``; a named
``tool_choice`` is ``{"type": "function", "name"}``; ``response_format`` (chat's
``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``) is
``text.format`` (``{"type": "json_schema", "name", "schema", "strict"}``). Function tools
go with ``strict`` False unless their definition says otherwise (the Responses API
defaults it to true, and refuses a schema strict mode cannot take).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any, Optional

from ._client import DEFAULT_DEADLINE_S, DEFAULT_MAX_REPLY_BYTES, StreamAccumulator
from ._responses_reply import API, ResponsesStream, parse_responses_response
from ._sse import DEFAULT_MAX_EVENT_BYTES
from ._wire import Emit, content_text, join_url
from .openai import CUSTOM, OpenAIClient, _custom_input, _sendable_image
from ..types import AssistantMessage

__all__ = ["OpenAIResponsesClient", "ResponsesStream", "build_responses_request", "parse_responses_response"]

ENCRYPTED_REASONING = "reasoning.encrypted_content"
_REASONING_KEYS = ("type", "id", "summary", "content", "encrypted_content", "status")  # a reasoning item's documented fields
_RENAMED = {"max_tokens": "max_output_tokens", "max_completion_tokens": "max_output_tokens"}


def _listed(value: Any) -> list[Any]:
    """``value`` when it is a list, else [] (a formatted dict is read leniently, as ``OpenAIClient`` reads it)."""
    return value if isinstance(value, list) else []


def _input_part(part: Any) -> Optional[dict[str, Any]]:
    """A chat content part as a Responses input part: text as ``input_text``, an image as ``input_image`` (or the text saying why it was not sent)."""
    if not isinstance(part, dict):
        return None
    part = dict(_sendable_image(part))
    if part.get("type") == "text" and isinstance(part.get("text"), str):
        return {"type": "input_text", "text": part["text"]}
    if part.get("type") == "image_url":
        image_url = part.get("image_url")
        url = image_url.get("url") if isinstance(image_url, dict) else image_url
        detail = image_url.get("detail") if isinstance(image_url, dict) and isinstance(image_url.get("detail"), str) else "auto"
        return {"type": "input_image", "image_url": url if isinstance(url, str) else "", "detail": detail}
    return dict(part)  # a part already in the Responses form (input_text, input_image, input_file): as the user sent it


def _user_item(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        return {"role": "user", "content": [p for p in (_input_part(part) for part in content) if p is not None]}
    return {"role": "user", "content": content if isinstance(content, str) else ""}


def _output_item(message: dict[str, Any], custom_ids: set[Any]) -> dict[str, Any]:
    """A tool result as ``function_call_output`` (``custom_tool_call_output`` for a custom call): its text, or its text and images as input parts (docs/api.md "Images")."""
    text = content_text(message.get("content"))
    images = message.get("images")
    output: Any = text
    if isinstance(images, list) and images:
        output = [{"type": "input_text", "text": text}] if text else []
        output += [p for p in (_input_part(image) for image in images) if p is not None]
    kind = "custom_tool_call_output" if message.get("tool_call_id") in custom_ids else "function_call_output"
    return {"type": kind, "call_id": message.get("tool_call_id", ""), "output": output}


def _call_item(call: dict[str, Any], item_id: Optional[str] = None) -> dict[str, Any]:
    """A tool call as ``function_call``, or a custom call (gpt-5's free-text tools) as ``custom_tool_call`` with its input."""
    function = call["function"] if isinstance(call.get("function"), dict) else {}
    item: dict[str, Any] = {"call_id": call.get("id", ""), "name": function.get("name", "")}
    if call.get("type") == CUSTOM:
        item = {"type": "custom_tool_call", **item, "input": _custom_input(function)}
    else:
        arguments = function.get("arguments", "{}")
        item = {"type": "function_call", **item, "arguments": arguments if isinstance(arguments, str) else "{}"}
    if item_id:
        item["id"] = item_id
    return item


def _message_item(text: str, refusal: Optional[str], item_id: Optional[str] = None) -> Optional[dict[str, Any]]:
    """The assistant's text (and refusal) as an output message; with the id its server gave it, the form that server sent."""
    if item_id is None:
        return {"role": "assistant", "content": text} if text else None
    parts: list[dict[str, Any]] = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}] if text else []
    if refusal:
        parts.append({"type": "refusal", "refusal": refusal})
    return {"type": "message", "role": "assistant", "id": item_id, "status": "completed", "content": parts} if parts else None


def _own_echo(message: dict[str, Any], provider: Optional[str]) -> Optional[dict[str, Any]]:
    """The fields of an assistant turn this server produced (``reasoning_echo``), or None for any other turn."""
    echo = message.get("reasoning_echo")
    if not isinstance(echo, dict) or provider is None or echo.get("api") != API or echo.get("provider") != provider:
        return None
    fields = echo.get("fields")
    return fields if isinstance(fields, dict) else None


def _text_parts(parts: Any, kind: str) -> bool:
    """Whether ``parts`` is a list of ``{"type": kind, "text": str}`` parts, as a reasoning item's summary and content are documented."""
    return isinstance(parts, list) and all(isinstance(p, dict) and p.get("type") == kind and isinstance(p.get("text"), str) for p in parts)


def _reasoning_item(entry: dict[str, Any], store: bool) -> Optional[dict[str, Any]]:
    """A reasoning item as it goes back, its documented fields as they came; None when the API would refuse it.

    It needs its id and its summary (a list of ``summary_text`` parts), and under
    ``store=False`` its ``encrypted_content`` (else "Item not found").
    """
    encrypted = entry.get("encrypted_content")
    if not isinstance(entry.get("id"), str) or not _text_parts(entry.get("summary"), "summary_text"):
        return None
    if not (isinstance(encrypted, str) or (store and encrypted is None)):
        return None
    if "content" in entry and entry["content"] is not None and not _text_parts(entry["content"], "reasoning_text"):
        return None
    return {key: entry[key] for key in _REASONING_KEYS if key in entry and key != "status"}


def _own_items(output: list[Any], text: str, refusal: Optional[str], calls: dict[Any, dict[str, Any]], store: bool) -> Optional[list[dict[str, Any]]]:
    """The items of a turn this server produced, in its order, with their ids; None when it cannot go back so.

    All or nothing: each reasoning item must go, immediately followed by the item that
    followed it, which the API names by its id (it answers 400 for a reasoning item without
    its follower, and for a call or message whose reasoning item is missing). A turn where
    any of it is gone (a hook removed a call, a reasoning item the API would refuse, an
    item of a server tool this client does not send) goes back as a turn of another server.
    ``calls`` loses the calls placed here.
    """
    items: list[Optional[dict[str, Any]]] = []  # one per output entry: what goes back for it, None for nothing
    placed: set[str] = set()
    for entry in output:
        kind = entry.get("type") if isinstance(entry, dict) else None
        item_id = entry.get("id") if isinstance(entry, dict) and isinstance(entry.get("id"), str) else None
        if kind == "reasoning":
            reasoning = _reasoning_item(entry, store)
            if reasoning is None:
                return None
            items.append(reasoning)
        elif kind == "message" and "message" not in placed and item_id is not None:
            items.append(_message_item(text, refusal, item_id))
            placed.add("message")
        elif kind in ("function_call", "custom_tool_call") and item_id is not None and isinstance(entry.get("call_id"), str) and entry["call_id"] in calls.keys() - placed:
            items.append(_call_item(calls[entry["call_id"]], item_id))
            placed.add(entry["call_id"])
        else:
            items.append(None)
    for item, follower in zip(items, [*items[1:], None], strict=True):
        if item is not None and item.get("type") == "reasoning" and follower is None:
            return None
    for call_id in placed - {"message"}:
        del calls[call_id]
    return [item for item in items if item is not None] + ([] if "message" in placed else [m for m in [_message_item(text, None)] if m])


def _assistant_items(message: dict[str, Any], provider: Optional[str], store: bool) -> Iterator[dict[str, Any]]:
    """An assistant turn's items: in the order its server sent them when it is this server's and can go back so (``_own_items``), else text then calls."""
    text = content_text(message.get("content"))
    calls = {c.get("id"): c for c in _listed(message.get("tool_calls")) if isinstance(c, dict)}
    fields = _own_echo(message, provider) or {}
    refusal, output = fields.get("refusal"), fields.get("output")
    own = _own_items(output, text, refusal if isinstance(refusal, str) else None, calls, store) if isinstance(output, list) else None
    if own is None:
        item = _message_item(text, None)
        own = [item] if item is not None else []
    yield from own
    yield from (_call_item(call) for call in calls.values())


def _input(messages: Any, provider: Optional[str], store: bool) -> tuple[list[str], list[dict[str, Any]]]:
    """``(instructions, input items)``: the system messages before any other are the request's ``instructions``."""
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    custom_ids: set[Any] = set()  # the ids of custom calls: their results go as custom_tool_call_output
    for message in messages if isinstance(messages, list) else []:  # a list: format_msg_for_llm's
        role = message.get("role") if isinstance(message, dict) else None
        if role in ("system", "developer") and not items:
            instructions.append(content_text(message.get("content")))
        elif role in ("system", "developer"):
            items.append({"role": role, "content": content_text(message.get("content"))})
        elif role == "user":
            items.append(_user_item(message))
        elif role == "assistant":
            items.extend(_assistant_items(message, provider, store))
            custom_ids.update(c.get("id") for c in _listed(message.get("tool_calls")) if isinstance(c, dict) and c.get("type") == CUSTOM)
        elif role == "tool":
            items.append(_output_item(message, custom_ids))
    return instructions, items


def _tool(tool: Any) -> Optional[dict[str, Any]]:
    """A chat function definition as a Responses function tool; a tool already in the Responses form (``web_search``…) as it is."""
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    if not isinstance(function, dict):
        return tool
    declared = {"type": "function", "name": function.get("name"), "parameters": function.get("parameters") or {"type": "object", "properties": {}}}
    if function.get("description"):
        declared["description"] = function["description"]
    declared["strict"] = bool(function.get("strict", False))
    return declared


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return {"type": "function", "name": choice["function"].get("name")}
    return choice


def _text_format(response_format: Any) -> Any:
    """Chat's ``response_format`` as the Responses API's ``text.format``: a JSON schema's name, schema and strict beside its type."""
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema" and isinstance(response_format.get("json_schema"), dict):
        return {"type": "json_schema", **response_format["json_schema"]}
    return response_format


def build_responses_request(
    formatted: dict[str, Any], model: str, defaults: Optional[dict[str, Any]] = None, provider: Optional[str] = None, *, store: bool = False
) -> dict[str, Any]:
    """The Responses API request body for a dict made by ``format_msg_for_llm`` (see the module docstring).

    ``defaults`` (the client's options) and the formatted dict's keys beyond ``messages``
    and ``tools`` go into the body, the formatted dict's winning; ``store`` unless they
    name it. ``provider`` is the server's (``OpenAIResponsesClient.provider``): an
    assistant turn it produced goes back with its reasoning items. ``formatted`` is not
    modified.
    """
    body: dict[str, Any] = {"model": model, **copy.deepcopy(defaults or {})}
    for key, value in formatted.items():
        if key not in ("messages", "tools"):
            body[key] = copy.deepcopy(value)
    for old, new in _RENAMED.items():
        if old in body:
            value = body.pop(old)
            body.setdefault(new, value)
    if "reasoning_effort" in body:
        effort = body.pop("reasoning_effort")
        reasoning = body["reasoning"] if isinstance(body.get("reasoning"), dict) else {}
        body["reasoning"] = {"effort": effort, **reasoning}
    if "response_format" in body:
        text = body["text"] if isinstance(body.get("text"), dict) else {}
        body["text"] = {**text, "format": _text_format(body.pop("response_format"))}
    if "tool_choice" in body:
        body["tool_choice"] = _tool_choice(body["tool_choice"])
    body.setdefault("store", store)
    if body["store"] is False and body.get("reasoning"):
        include = body["include"] if isinstance(body.get("include"), list) else []
        body["include"] = include if ENCRYPTED_REASONING in include else [*include, ENCRYPTED_REASONING]
    instructions, body["input"] = _input(formatted.get("messages", []), provider, body["store"] is not False)
    if any(instructions):
        body.setdefault("instructions", "\n\n".join(text for text in instructions if text))
    tools = [t for t in (_tool(tool) for tool in [*_listed((defaults or {}).get("tools")), *_listed(formatted.get("tools"))]) if t is not None]
    body.pop("tools", None)
    if tools:
        body["tools"] = tools
    return body


class OpenAIResponsesClient(OpenAIClient):
    """``llm_call`` for OpenAI's Responses API: POST ``{base_url}/responses``.

    Takes the OpenAI-format dict of ``format_msg_for_llm``. ``store`` (default False) asks
    OpenAI to keep nothing: reasoning then travels as encrypted content (module docstring).
    ``options`` are request defaults (``reasoning``, ``max_output_tokens``,
    ``parallel_tool_calls``, built-in tools in ``tools``…). Everything else is
    ``OpenAIClient``'s, whose settings, transport, retries, caps, deadline and masking of
    credentials it inherits; only the request and the reading of replies differ.

    Thread safety: a client may serve several agents and threads at once.
    """

    _LABEL = "OpenAI Responses"

    def __init__(
        self,
        model: str,
        api_key: Optional[str] = None,
        *,
        base_url: str = "https://api.openai.com/v1",
        stream: bool = False,
        store: bool = False,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_retry_delay_ms: float = 60000,
        backoff_factor: float = 0.5,
        options: Optional[dict[str, Any]] = None,
        headers: Optional[dict[str, str]] = None,
        deadline_s: Optional[float] = DEFAULT_DEADLINE_S,
        max_event_bytes: Optional[int] = DEFAULT_MAX_EVENT_BYTES,
        max_reply_bytes: Optional[int] = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        self.store = store
        super().__init__(
            base_url, model, api_key, timeout=timeout, max_retries=max_retries, max_retry_delay_ms=max_retry_delay_ms, backoff_factor=backoff_factor, options=options,
            headers=headers, stream=stream, deadline_s=deadline_s, max_event_bytes=max_event_bytes, max_reply_bytes=max_reply_bytes,
        )  # fmt: skip

    @property
    def url(self) -> str:
        return join_url(self.base_url, "/responses")

    def __repr__(self) -> str:
        base_url = self._transport.secrets.redact(self.base_url)
        return f"OpenAIResponsesClient(model={self.model!r}, base_url={base_url!r}, store={self.store!r}, {self._repr_tail()})"

    def _body(self, formatted: dict[str, Any]) -> dict[str, Any]:
        body = build_responses_request(formatted, self.model, self.options, self.provider, store=self.store)
        if self.stream:
            body.setdefault("stream", True)
        return body

    def _parse(self, reply: Any) -> AssistantMessage:
        return parse_responses_response(reply, self.provider)

    def _accumulator(self, emit: Emit) -> StreamAccumulator:
        return ResponsesStream(self.provider, emit)
