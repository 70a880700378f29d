"""What one LLM round does, and nothing more (docs/performance.md "W1"; spec §6).

Each argument a model sends is parsed once; a capability that is not configured puts no
step into a run; the argument a tool receives is still the one the model sent, checked.
"""

from __future__ import annotations

import json
import threading

from hypothesis import event, example, given, settings
from hypothesis import strategies as st

import yiemagent.extraction as extraction
import yiemagent.normalize as normalize
from yiemagent._bounds import NotJSONError, json_safe
from yiemagent import AgentTool, AgentToolResult, TextContent, YiemAgent, run_agent, take_response
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}


def _weather_tool(received: list) -> AgentTool:
    def execute(tool_call_id, args, signal, on_partial_result):
        received.append(args)
        return AgentToolResult([TextContent(f"sunny in {args['city']}")])

    return AgentTool("get_weather", "Weather", "The weather in a city.", SCHEMA, execute)


def test_each_argument_a_model_sends_is_parsed_once(monkeypatch):
    """Over a run of several rounds, each call's JSON arguments are parsed once: not again when the history is formatted."""
    parsed: list[str] = []
    real = extraction.loads_json

    def counting(text, *args, **kwargs):
        parsed.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(extraction, "loads_json", counting)
    monkeypatch.setattr(normalize, "loads_json", counting)  # normalize_reply reads a bare object itself (_plain_arguments)
    rounds = 4
    script = [tool_call_reply((f"c{i}", "get_weather", json.dumps({"city": f"city {i}"}))) for i in range(rounds)] + ["done"]
    llm = ScriptedLLM(script)
    received: list = []
    with YiemAgent(llm_call=llm, tools=[_weather_tool(received)], agent_event_sink=None) as agent:
        run_agent(agent, "weather?")
        response = take_response(agent, timeout=10)
    assert response.stop_reason != "error", response.error_message
    assert received == [{"city": f"city {i}"} for i in range(rounds)]
    assert sorted(parsed) == sorted(json.dumps({"city": f"city {i}"}) for i in range(rounds))
    # the history went back on every request after the first, each call's arguments as JSON text
    last = llm.requests[-1]["messages"]
    sent = [c["function"]["arguments"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert [json.loads(a) for a in sent] == [{"city": f"city {i}"} for i in range(rounds)]


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4) | st.sampled_from(["\ud800", "a\udfff", 10**700, float("nan")]),
    lambda children: st.lists(children, max_size=3) | st.tuples(children) | st.dictionaries(st.text(max_size=3) | st.sampled_from(["\ud801", 1]), children, max_size=3),
    max_leaves=10,
)


@settings(max_examples=500)
@given(JSONISH, st.integers(1, 4), st.booleans())
def test_json_safes_one_walk_gives_what_the_full_walk_gives(value, max_depth, strict_text):
    """json_safe's check of a plain value returns what its full walk returns, and raises where it raises."""

    def outcome(**where):
        try:
            return ("value", json_safe(value, max_depth=max_depth, strict_text=strict_text, **where))
        except NotJSONError as exc:
            return ("error", type(exc))

    fast = outcome()
    full = _full_walk(value, max_depth, strict_text)
    assert fast[0] == full[0]
    if fast[0] == "value":
        assert (fast[1] is value) == (full[1] is value)
        assert repr(fast[1]) == repr(full[1])


def _full_walk(value, max_depth, strict_text):
    """json_safe without its one-walk check: the same walk one level down, with one more level of room."""
    try:
        return ("value", json_safe(value, max_depth=max_depth + 1, strict_text=strict_text, _depth=1))
    except NotJSONError as exc:
        return ("error", type(exc))


def _steps_of(**options):
    from yiemagent.run import Run, run_steps

    with YiemAgent(llm_call=ScriptedLLM([]), agent_event_sink=None, **options) as agent:
        return run_steps(agent._core, Run(1))


def test_a_run_without_capabilities_has_only_the_seeds_steps():
    """An agent configuring no limit, no typed answer and no max_rounds gives its runs no step beyond spec §6's six."""
    steps = _steps_of(max_rounds=None)
    assert steps.before_round == () and steps.before_request is None and steps.answer is None and steps.allowance is None
    assert steps.compact is None


def test_each_capability_adds_its_own_step_and_no_other():
    """max_rounds, each kind of usage limit, a typed answer and a compaction each put their step in a run, and only theirs."""
    from yiemagent import UsageLimits

    assert len(_steps_of().before_round) == 1  # the default max_rounds (decision 12)
    requests = _steps_of(max_rounds=None, usage_limits=UsageLimits(max_requests=3))
    assert len(requests.before_round) == 1 and requests.before_request is None and requests.allowance is None
    tokens = _steps_of(max_rounds=None, usage_limits=UsageLimits(max_total_tokens=100))
    assert len(tokens.before_round) == 1 and tokens.before_request is not None and tokens.allowance is None
    calls = _steps_of(max_rounds=None, usage_limits=UsageLimits(max_tool_calls=2))
    assert calls.allowance is not None and calls.before_request is None and calls.answer is None
    typed = _steps_of(max_rounds=None, output_type=int)
    assert typed.answer is not None and typed.before_round == () and typed.before_request is None
    from yiemagent import TrimHistory

    compacted = _steps_of(max_rounds=None, context_window=4096, compaction=TrimHistory(1000))
    assert compacted.compact is not None and compacted.before_round == () and compacted.before_request is None and compacted.answer is None


def _mostly(usual: st.SearchStrategy, odd: st.SearchStrategy) -> st.SearchStrategy:
    """``usual`` nine times in ten, else ``odd`` (one_of would weigh each of their branches alike)."""
    return st.integers(0, 9).flatmap(lambda i: odd if i == 0 else usual)


_EDGE_OBJECTS = [
    "{bad}", '{"a": 1}{}', '{"a": 1} ', ' {"a": 1}', '{"a": Infinity}', '{"a": 1e999}', '{"\\udc00": 1}', '{"a": 1, "a": 2}',
    '{"a": ' + "[" * 40 + "]" * 40 + "}", '{"a": ' + "[" * 3000 + "]" * 3000 + "}", '{"a": ' + "9" * 5000 + "}", '{"a": "{\\"b\\": 1}"}',
]
"""Texts that begin with "{" and end with "}" (normalize's bare-object path, ``_plain_arguments``) and that a server may
send: data after the object, blanks around it, constants, an escaped lone surrogate, a repeated key, nesting past
MAX_ARGUMENTS_DEPTH and past the parser's, an integer past Python's digit limit."""


def _object_texts() -> st.SearchStrategy:
    """Texts that begin with "{" and end with "}": JSON objects of any values (written with and without escapes), the edges, anything braced."""
    written = st.builds(lambda d, ascii: json.dumps(d, ensure_ascii=ascii), st.dictionaries(st.text(max_size=3), JSONISH, max_size=3), st.booleans())
    return written | st.sampled_from(_EDGE_OBJECTS) | st.text(max_size=12).map(lambda t: "{" + t + "}")


@settings(max_examples=500)
@given(_object_texts())
def test_a_bare_object_read_by_normalize_is_what_parse_tool_arguments_reads(raw):
    """normalize's own reading of a bare JSON object gives parse_tool_arguments' arguments when they need no change, and defers (None) otherwise."""
    from yiemagent._bounds import MAX_ARGUMENTS_DEPTH, _plainly_json

    arguments, problem = extraction.parse_tool_arguments(raw)
    fast = normalize._plain_arguments(raw)
    unchanged = problem is None and _plainly_json(arguments, MAX_ARGUMENTS_DEPTH)
    event("read" if fast is not None else "deferred")
    if fast is None:
        assert not unchanged  # deferred only what parse_tool_arguments refuses or changes: the full check reads it
    else:
        assert problem is None and type(fast) is dict
        assert json.dumps(fast) == json.dumps(arguments)


def _entries() -> st.SearchStrategy:
    # mostly what servers send, so that the one pass is taken often; now and then each thing it must refuse
    ids = _mostly(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["", "x" * 129, "c\ud800", 7, None]))
    names = _mostly(st.just("get_weather"), st.sampled_from(["n\udfff", "y" * 129, 3, None]))
    arguments = _mostly(
        st.sampled_from(['{"city": "Tokyo"}', "", "null", '"{\\"a\\": 1}"']),
        st.sampled_from(["{bad", "[1]", '{"a": NaN}', {"city": "Tokyo"}, None, 5, '{"a": "\\ud800"}'] + _EDGE_OBJECTS),
    )
    canonical = st.builds(lambda i, n, a: {"id": i, "type": "function", "function": {"name": n, "arguments": a}}, ids, names, arguments)
    odd = st.one_of(
        st.builds(lambda e: {**e, "extra": 1}, canonical),
        st.builds(lambda e: {**e, "type": "custom"}, canonical),
        st.builds(lambda e: {"id": e["id"], "function": e["function"]}, canonical),
        st.builds(lambda e: {**e, "function": {**e["function"], "more": True}}, canonical),
        st.just("not a call"),
    )
    return _mostly(canonical, odd)


def _replies() -> st.SearchStrategy:
    from yiemagent import AssistantMessage, ImageContent, LLMUsage

    usual = st.one_of(
        st.builds(TextContent, st.sampled_from(["hi", "", "caf\u00e9"])),
        st.builds(lambda e: {"type": "tool_calls", "tool_calls": e}, st.lists(_entries(), max_size=3)),
    )
    odd = st.one_of(
        st.builds(TextContent, st.just("bad \ud800")),
        st.builds(lambda e: {"type": "tool_call", **e} if isinstance(e, dict) else e, _entries()),
        st.sampled_from([TextContent("cited", [{"url": "u"}]), TextContent("cited", [{"bad": float("nan")}])]),
        st.just(ImageContent("aGk=", "image/png")),
        st.just({"type": "thinking", "thinking": "hmm"}),
    )
    contents = _mostly(st.lists(_mostly(usual, odd), max_size=4), st.sampled_from([None, "text", ()]))
    return st.builds(
        lambda content, usage, model, stop: AssistantMessage(content, usage=usage, model=model, stop_reason=stop),
        contents,
        st.sampled_from([None, LLMUsage(1, 2)]),
        _mostly(st.sampled_from([None, "m"]), st.sampled_from(["m\ud800", 5])),
        st.sampled_from(["tool_calls", "stop", None]),
    )


@settings(max_examples=500)
@given(_replies())
def test_the_one_pass_check_of_a_reply_gives_what_the_full_check_gives(reply):
    """normalize_reply's one pass over a reply of the servers' form gives the full check's message and calls, and leaves any other reply to it."""
    import copy

    from yiemagent.normalize import _checked_reply, _plain_reply

    fast = _plain_reply(copy.deepcopy(reply))
    full = _checked_reply(copy.deepcopy(reply))
    event("one pass" if fast is not None else "block by block")
    if fast is None:
        return
    assert full.error is None and fast.error is None
    assert fast.message == full.message and fast.calls == full.calls
    assert fast.message is not None and full.message is not None
    assert [type(b) for b in fast.message.content] == [type(b) for b in full.message.content]
    # the full check keeps such a reply as it is: nothing was fixed that the one pass left
    original = copy.deepcopy(reply)
    assert _checked_reply(original).message is original


def test_a_calls_run_context_is_made_only_for_a_tool_that_asks_for_it(monkeypatch):
    """A tool that never reads current_run_context costs its call no RunContext; one that reads it gets the same one all call long."""
    from yiemagent import RunContext, current_run_context

    made: list[str] = []
    real = RunContext.for_call

    def counting(self, tool_call_id):
        made.append(tool_call_id)
        return real(self, tool_call_id)

    monkeypatch.setattr(RunContext, "for_call", counting)
    seen: list = []

    def reading(tool_call_id, args, signal, on_partial_result):
        seen.append((current_run_context(), current_run_context()))
        return AgentToolResult([TextContent("ok")])

    quiet = AgentTool("quiet", "Quiet", "reads nothing", {"type": "object"}, lambda *a: AgentToolResult([TextContent("ok")]))
    asking = AgentTool("asking", "Asking", "reads its context", {"type": "object"}, reading)
    script = [tool_call_reply(("q1", "quiet", "{}")), tool_call_reply(("a1", "asking", "{}")), "done"]
    with YiemAgent(llm_call=ScriptedLLM(script), tools=[quiet, asking], agent_event_sink=None) as agent:
        run_agent(agent, "go")
        assert take_response(agent, timeout=10).stop_reason == "stop"
    assert made == ["a1"]
    (first, second), = seen
    assert first is second and first.tool_call_id == "a1"


def test_a_round_nobody_listens_to_gets_a_stream_target_but_no_relay(monkeypatch):
    """With no sink, the client still finds a stream target carrying the run's abort signal, and no delta relay is made."""
    import yiemagent.events as events
    from yiemagent import AssistantMessage
    from yiemagent.streaming import current_abort_signal, current_stream, emit_delta

    relays: list = []
    real = events.DeltaRelay.__init__
    monkeypatch.setattr(events.DeltaRelay, "__init__", lambda self, *a, **k: relays.append(a) or real(self, *a, **k))
    seen: list = []

    def llm_call(formatted):
        seen.append((current_stream(), current_abort_signal()))
        emit_delta("text", "dropped where it comes in")
        return AssistantMessage([TextContent("done")], stop_reason="stop")

    with YiemAgent(llm_call=llm_call, agent_event_sink=None) as agent:
        run_agent(agent, "hi")
        assert take_response(agent, timeout=10).stop_reason == "stop"
    (target, signal), = seen
    assert target is not None and signal is not None and not signal.aborted
    assert relays == []
    events_seen: list = []
    with YiemAgent(llm_call=llm_call, agent_event_sink=events_seen.append) as agent:  # a sink: the relay, and the delta reaches it
        run_agent(agent, "hi")
        assert take_response(agent, timeout=10).stop_reason == "stop"
    assert len(relays) == 1
    assert [e.text for e in events_seen if isinstance(e, events.LLMDeltaEvent)] == ["dropped where it comes in"]


def test_a_call_that_never_asks_for_its_stream_makes_no_target_and_one_that_streams_to_nobody_no_relay(monkeypatch):
    """A round whose llm_call never asks for its stream makes no StreamTarget (sink or not) and no relay; one that asks
    gets one target a round, and a relay only once a delta is listened to."""
    import yiemagent.events as events
    from yiemagent import AssistantMessage
    from yiemagent.streaming import current_stream, emit_delta

    targets: list = []
    relays: list = []
    real_built, real_relay = events.built, events.DeltaRelay.__init__
    monkeypatch.setattr(events, "built", lambda cls, **fields: (targets.append(fields) if cls is events.StreamTarget else None) or real_built(cls, **fields))
    monkeypatch.setattr(events.DeltaRelay, "__init__", lambda self, *a, **k: relays.append(a) or real_relay(self, *a, **k))
    script = [tool_call_reply(("c1", "quiet", "{}")), "done"]
    quiet = AgentTool("quiet", "Quiet", "reads nothing", {"type": "object"}, lambda *a: AgentToolResult([TextContent("ok")]))
    for sink in (None, [].append):  # nobody listens; a sink listens to a call that never streams
        with YiemAgent(llm_call=ScriptedLLM(script), tools=[quiet], agent_event_sink=sink) as agent:
            run_agent(agent, "go")
            assert take_response(agent, timeout=10).stop_reason == "stop"
    assert (targets, relays) == ([], [])

    def asking(formatted):
        assert current_stream() is current_stream()  # one target a round, whoever asks
        emit_delta("text", "shown")
        return AssistantMessage([TextContent("shown")], stop_reason="stop")

    for sink in (None, [].append):
        with YiemAgent(llm_call=asking, agent_event_sink=sink) as agent:
            for message in ("go", "again"):
                run_agent(agent, message)
                assert take_response(agent, timeout=10).stop_reason == "stop"
    assert len(targets) == 4 and len(relays) == 2  # a target each round; a relay only for the rounds somebody listened to


def test_a_batch_whose_tools_never_ask_makes_no_run_context_and_one_that_asks_gets_one_per_call(monkeypatch):
    """No RunContext at all for a batch nobody asks; a call's hook and tool read the very same one (one scope for both phases)."""
    from yiemagent import RunContext, current_run_context

    made: list = []
    real = RunContext.__init__
    monkeypatch.setattr(RunContext, "__init__", lambda self, *a, **k: made.append(a) or real(self, *a, **k))
    quiet = AgentTool("quiet", "Quiet", "reads nothing", {"type": "object"}, lambda *a: AgentToolResult([TextContent("ok")]))
    with YiemAgent(llm_call=ScriptedLLM([tool_call_reply(("q1", "quiet", "{}")), "done"]), tools=[quiet], agent_event_sink=None) as agent:
        run_agent(agent, "go")
        assert take_response(agent, timeout=10).stop_reason == "stop"
    assert made == []
    seen: list = []

    def reading(tool_call_id, args, signal, on_partial_result):
        seen.append(("tool", current_run_context()))
        return AgentToolResult([TextContent("ok")])

    def before(ctx, signal):
        seen.append(("hook", current_run_context()))

    asking = AgentTool("asking", "Asking", "reads its context", {"type": "object"}, reading)
    script = ScriptedLLM([tool_call_reply(("a1", "asking", "{}")), "done"])
    with YiemAgent(llm_call=script, tools=[asking], agent_event_sink=None, before_tool_call=before) as agent:
        run_agent(agent, "go")
        assert take_response(agent, timeout=10).stop_reason == "stop"
    (hook, in_hook), (tool, in_tool) = seen
    assert (hook, tool) == ("hook", "tool") and in_hook is in_tool and in_tool.tool_call_id == "a1"


_TEXTS = st.text(max_size=12) | st.sampled_from(["{", "}", '{"a": 1}', '{"a": NaN}', '{"a": 1} ', ' {"a": 1}', '{"a": 1}x}', '{"a": 1e999}', '{"a": ' + "9" * 5000 + "}", "{" * 3000 + "}" * 3000])


@settings(max_examples=500)
@given(_TEXTS | st.builds(lambda t: "{" + t + "}", st.text(max_size=12)), st.booleans())
def test_reading_json_by_its_scanner_alone_is_what_decode_gives(text, constants):
    """loads_json's shortcut for a bare object gives decode's value, or raises what decode raises."""
    from yiemagent import _bounds

    def outcome(read):
        try:
            return ("value", repr(read(text)))
        except Exception as exc:  # noqa: BLE001  the outcome compared, whatever it is
            return ("error", type(exc), str(exc))

    def decode(text):  # loads_json without its shortcut: the readers' own decode, long integers read again
        try:
            try:
                return _bounds._READERS[constants, False].decode(text)
            except (json.JSONDecodeError, _bounds._NotJSONConstant):
                raise
            except ValueError:
                return _bounds._READERS[constants, True].decode(text)
        except RecursionError:
            raise _bounds.JSONTooDeepError("JSON nested too deeply to read") from None

    assert outcome(lambda t: _bounds.loads_json(t, constants=constants)) == outcome(decode)


@settings(max_examples=500)
@given(JSONISH)
def test_arguments_written_by_the_c_encoder_are_what_json_dumps_writes(value):
    """arguments_json gives json.dumps(ensure_ascii=False, allow_nan=False) of any value, or "{}" where that raises; json_text raises what it raises."""

    def outcome(write):
        try:
            return ("text", write(value))
        except (TypeError, ValueError) as exc:
            return ("error", type(exc), str(exc))

    assert outcome(extraction.json_text) == outcome(lambda v: json.dumps(v, ensure_ascii=False, allow_nan=False))
    arguments = {"v": value, "w": [value]}
    try:
        expected = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        expected = "{}"
    assert extraction.arguments_json(arguments) == expected
    assert extraction._encode_arguments is not extraction._ARGUMENTS_ENCODER.encode  # this Python's json has its C encoder


_BLOCKS = st.lists(
    st.builds(TextContent, st.text(max_size=6) | st.sampled_from(["\ud800", "a\udfffb"]), st.none() | st.just([]) | st.just([{"url": "u"}])),
    max_size=4,
)


@settings(max_examples=300)
@given(_BLOCKS)
def test_text_blocks_checked_in_one_pass_are_what_the_block_by_block_check_gives(blocks):
    """normalize_content's one pass over text blocks keeps exactly the lists its block-by-block check keeps, and nothing else."""
    from yiemagent.normalize import normalize_content

    kept = normalize_content(blocks)
    assert kept == normalize_content(tuple(blocks))  # a tuple goes block by block
    assert (kept is blocks) == all(a is b for a, b in zip(normalize_content(tuple(blocks)), blocks, strict=True))


def test_a_run_nobody_listens_to_builds_no_run_events(monkeypatch):
    """With no sink the run's start and end events are not built; with one, each is built and reaches it once."""
    import yiemagent.run as run_module

    built_events: list = []
    for name in ("AgentRunStartEvent", "AgentRunEndEvent"):
        real = getattr(run_module, name)
        monkeypatch.setattr(run_module, name, lambda *a, _real=real, **k: built_events.append(_real.__name__) or _real(*a, **k))
    with YiemAgent(llm_call=ScriptedLLM(["done"]), agent_event_sink=None) as agent:
        run_agent(agent, "hi")
        assert take_response(agent, timeout=10).stop_reason == "stop"
    assert built_events == []
    seen: list = []
    with YiemAgent(llm_call=ScriptedLLM(["done"]), agent_event_sink=seen.append) as agent:
        run_agent(agent, "hi")
        assert take_response(agent, timeout=10).stop_reason == "stop"
    assert built_events == ["AgentRunStartEvent", "AgentRunEndEvent"]
    assert [type(e).__name__ for e in seen if type(e).__name__ in built_events] == built_events


# --- the plain call: the short way through PREPARE -> EXECUTE -> FINALIZE (batch._plain_call) ---

_CALL_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["n"]}
_TOOL_KINDS = ("plain", "raises", "wrong_type", "bad_block", "terminates", "asks_context", "reports", "mutates", "prepares", "validates", "approval", "timed", "unknown")


def _batch_tools(log: list) -> dict:
    """One tool of each kind; each logs what it received (arguments, its RunContext's call id, what a partial result returned)."""
    from yiemagent import current_run_context

    def execute_as(kind):
        def execute(tool_call_id, args, signal, on_partial_result):
            log.append((kind, tool_call_id, json.dumps(args, sort_keys=True)))
            if kind == "raises":
                raise RuntimeError(f"boom in {tool_call_id}")
            if kind == "wrong_type":
                return {"not": "a result"}
            if kind == "bad_block":
                return AgentToolResult([TextContent("ok"), 42])
            if kind == "asks_context":
                context = current_run_context()
                log.append(("context", context.tool_call_id if context is not None else None))
            if kind == "reports":
                log.append(("reported", on_partial_result({"step": 1})))
            if kind == "timed":  # the thread of its timeout_s, whichever way the batch takes
                log.append(("thread", threading.current_thread().name))
            if kind == "mutates":
                args["n"] = -1  # the tool's own copy: the call in the history keeps what the model sent
            return AgentToolResult([TextContent(f"{kind} {args.get('n')}")], {"id": tool_call_id}, terminate=kind == "terminates")

        return execute

    options = {
        "prepares": {"prepare_arguments": lambda args: {**args, "n": 7}},
        "validates": {"validate_required_args": lambda args: None if args.get("n") != 3 else "n may not be 3"},
        "approval": {"requires_approval": True},
        "timed": {"timeout_s": 30.0},
    }
    return {kind: AgentTool(kind, kind, kind, _CALL_SCHEMA, execute_as(kind), parallel_tool_execute=True, **options.get(kind, {})) for kind in _TOOL_KINDS if kind != "unknown"}


_ARGUMENTS = st.sampled_from([({"n": 1}, None), ({"n": 3, "tags": ["a"]}, None), ({"n": "x"}, None), ({}, None), ({"tags": [1]}, None), ({}, "not JSON: Expecting value")])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(_TOOL_KINDS), _ARGUMENTS), min_size=1, max_size=4),
    st.sampled_from(["sequential", "parallel"]),
    st.booleans(),
)
@example([(kind, ({"n": 1}, None)) for kind in ("asks_context", "mutates", "reports", "terminates")], "sequential", False)
@example([("asks_context", ({"n": 1}, None))], "parallel", False)
def test_a_plain_call_taken_the_short_way_gives_what_the_three_phases_give(given_calls, mode, aborted):
    """A batch whose plain calls take the short way gives the result messages, the ending and the tools' inputs (arguments, RunContext, partial results) the three phases give."""
    import yiemagent.batch as batch_module
    from yiemagent.types import AbortSignal, AgentContext, AgentLoopConfig, AgentToolCall, AssistantMessage, RunContext, enter_run_context, leave_run_context

    def run(short_way: bool):
        log: list = []
        tools = _batch_tools(log)
        calls = [AgentToolCall(f"c{i}", kind, dict(arguments), "function", error) for i, (kind, (arguments, error)) in enumerate(given_calls)]
        signal = AbortSignal()
        if aborted:
            signal.abort("stopped")
        real = batch_module._plain_call
        batch_module._plain_call = real if short_way else (lambda *a: None)
        token = enter_run_context(RunContext(None, 1, 1, None, (), None))  # type: ignore[arg-type]
        try:
            result = batch_module.execute_tool_calls(AgentContext("", [], tools), AssistantMessage([]), calls, AgentLoopConfig(tool_execution=mode), signal, None)
        finally:
            leave_run_context(token)
            batch_module._plain_call = real
        messages = [(m.tool_call_id, m.tool_name, m.content, m.details, m.usage, m.is_error, m.role) for m in result.messages]
        return messages, result.terminate, [(d.tool_call_id, d.reason) for d in result.deferred], sorted(log, key=repr), [c.arguments for c in calls]

    short, long = run(True), run(False)
    event("a plain call" if any(k in ("plain", "terminates", "asks_context", "reports", "mutates", "raises", "wrong_type", "bad_block") for k, _ in given_calls) else "none plain")
    assert short == long


def test_a_call_nothing_else_acts_on_takes_the_short_way_and_one_a_hook_sees_takes_the_three_phases(monkeypatch):
    """With no hook, no cap and no sink a valid call never goes through prepare_tool_call; a before_tool_call hook, or a sink, sends it through the three phases."""
    import yiemagent.batch as batch_module

    prepared: list = []
    real = batch_module.prepare_tool_call
    monkeypatch.setattr(batch_module, "prepare_tool_call", lambda *a: prepared.append(a[2].id) or real(*a))
    received: list = []
    script = [tool_call_reply(("w1", "get_weather", '{"city": "Oslo"}')), "done"]
    with YiemAgent(llm_call=ScriptedLLM(script), tools=[_weather_tool(received)], agent_event_sink=None) as agent:
        run_agent(agent, "go")
        assert take_response(agent, timeout=10).stop_reason == "stop"
    assert prepared == [] and received == [{"city": "Oslo"}]
    with YiemAgent(llm_call=ScriptedLLM(script), tools=[_weather_tool(received)], agent_event_sink=None, before_tool_call=lambda ctx, signal: None) as agent:
        run_agent(agent, "go")
        assert take_response(agent, timeout=10).stop_reason == "stop"
    seen: list = []
    with YiemAgent(llm_call=ScriptedLLM(script), tools=[_weather_tool(received)], agent_event_sink=seen.append) as agent:
        run_agent(agent, "go")
        assert take_response(agent, timeout=10).stop_reason == "stop"
    assert prepared == ["w1", "w1"] and [type(e).__name__ for e in seen].count("ToolExecEndEvent") == 1


def test_each_hook_alone_sees_the_history_the_batch_started_from():
    """A before_tool_call or an after_tool_call hook, alone, gets a context whose messages are the history as the batch began (the reply that made the call in it), its own copy."""
    for hook_name in ("before_tool_call", "after_tool_call"):
        seen: list = []

        def hook(ctx, signal):
            seen.append([m.role for m in ctx.context.messages])
            seen.append(ctx.context.messages is not agent.state.messages)

        script = [tool_call_reply(("w1", "get_weather", '{"city": "Oslo"}')), "done"]
        with YiemAgent(llm_call=ScriptedLLM(script), tools=[_weather_tool([])], agent_event_sink=None, **{hook_name: hook}) as agent:
            run_agent(agent, "go")
            assert take_response(agent, timeout=10).stop_reason == "stop"
        assert seen == [["user", "assistant"], True], hook_name


def test_an_object_built_in_one_step_is_the_one_init_makes_and_shares_nothing_with_another():
    """types.built gives what __init__ gives (==, fields, repr, copies, replace, pickle), and two objects built from one mapping have fields of their own."""
    import copy
    import dataclasses
    import pickle

    from yiemagent.types import AgentToolCall, AgentToolCallBatch, ToolResultMessage, built

    when = ToolResultMessage("t", "n", []).timestamp
    cases = [
        (AgentToolCall, {"id": "c1", "name": "n", "arguments": {"a": 1}, "type": "function", "arguments_error": None}),
        (ToolResultMessage, {"tool_call_id": "c1", "tool_name": "n", "content": [TextContent("x")], "details": {}, "usage": None, "added_tool_names": None, "is_error": False, "timestamp": when}),
        (AgentToolCallBatch, {"messages": [], "terminate": False, "deferred": []}),
    ]
    for cls, fields in cases:
        made, again, reference = built(cls, **fields), built(cls, **fields), cls(**fields)
        assert made == reference and repr(made) == repr(reference)
        assert dataclasses.asdict(made) == dataclasses.asdict(reference)
        assert copy.copy(made) == reference and copy.deepcopy(made) == reference and pickle.loads(pickle.dumps(made)) == reference
        assert dataclasses.replace(made) == reference
        object.__setattr__(made, "_extra", 1)  # what the formatting cache does to a message
        assert not hasattr(again, "_extra") and made == again


def test_a_sink_set_during_a_batch_gets_the_events_of_the_calls_that_start_after_it():
    """The short way is chosen call by call: once a sink is set (here by the batch's first tool), each later call has its start and end events."""
    from yiemagent.batch import execute_tool_calls
    from yiemagent.events import EventEmitter, ToolExecEndEvent, ToolExecStartEvent
    from yiemagent.types import AgentContext, AgentLoopConfig, AgentToolCall, AssistantMessage

    emitter, seen = EventEmitter(None), []

    def setting_the_sink(tool_call_id, args, signal, on_partial_result):
        emitter.sink = seen.append
        return AgentToolResult([TextContent("set")])

    quiet = AgentTool("quiet", "Quiet", "nothing", {"type": "object"}, lambda *a: AgentToolResult([TextContent("ok")]))
    setter = AgentTool("setter", "Setter", "sets the sink", {"type": "object"}, setting_the_sink)
    calls = [AgentToolCall("c0", "setter", {}), AgentToolCall("c1", "quiet", {}), AgentToolCall("c2", "quiet", {})]
    context = AgentContext("", [], {"quiet": quiet, "setter": setter})
    batch = execute_tool_calls(context, AssistantMessage([]), calls, AgentLoopConfig(), None, emitter)
    assert [m.tool_call_id for m in batch.messages] == ["c0", "c1", "c2"]
    later = [(type(e).__name__, e.tool_call_id) for e in seen if isinstance(e, (ToolExecStartEvent, ToolExecEndEvent)) and e.tool_call_id != "c0"]
    assert later == [("ToolExecStartEvent", "c1"), ("ToolExecEndEvent", "c1"), ("ToolExecStartEvent", "c2"), ("ToolExecEndEvent", "c2")]


def test_a_call_nobody_reports_for_makes_no_reporter_lock_and_one_that_reports_gets_its_update():
    """A call whose tool never reports a partial result makes its reporter no lock (close takes none); a call that reports makes one and its update reaches the sink."""
    reporters: list = []

    def quiet(tool_call_id, args, signal, on_partial_result):
        reporters.append(on_partial_result)
        return AgentToolResult([TextContent("ok")])

    def reporting(tool_call_id, args, signal, on_partial_result):
        reporters.append(on_partial_result)
        assert on_partial_result({"step": 1}) is True
        return AgentToolResult([TextContent("ok")])

    tools = [AgentTool(name, name, name, {"type": "object"}, execute) for name, execute in (("quiet", quiet), ("reporting", reporting))]
    seen: list = []
    script = [tool_call_reply(("q1", "quiet", "{}")), tool_call_reply(("r1", "reporting", "{}")), "done"]
    with YiemAgent(llm_call=ScriptedLLM(script), tools=tools, agent_event_sink=seen.append) as agent:
        run_agent(agent, "go")
        assert take_response(agent, timeout=10).stop_reason == "stop"
    assert reporters[0]._lock is None and reporters[1]._lock is not None
    assert [(e.tool_call_id, e.partial_result) for e in seen if type(e).__name__ == "ToolExecUpdateEvent"] == [("r1", {"step": 1})]
    assert reporters[0]("late") is False and reporters[1]("late") is False


def test_a_round_asks_for_input_only_when_some_waits_and_takes_what_was_sent_or_added_meanwhile():
    """Spec §6 step 1: a round after the first takes input (``take_added``, ``take_input``) only when ``input_waiting``
    says some waits, and a message added, then one sent, during a tool call join the very next round."""
    from yiemagent import UserMessage, add_message

    def execute(tool_call_id, args, signal, on_partial_result):
        if tool_call_id == "c1":
            add_message(agent, UserMessage([TextContent("added")]))
        elif tool_call_id == "c2":
            run_agent(agent, "sent")
        return AgentToolResult([TextContent("ok")])

    tool = AgentTool("work", "Work", "Does work.", {"type": "object"}, execute)
    llm = ScriptedLLM([tool_call_reply((f"c{i}", "work", {})) for i in (1, 2, 3)] + ["done"])
    with YiemAgent(llm_call=llm, tools=[tool], agent_event_sink=None) as agent:
        core, asked = agent._core, []
        take_input, take_added = core.take_input, core.take_added
        core.take_input = lambda: asked.append("input") or take_input()
        core.take_added = lambda: asked.append("added") or take_added()
        run_agent(agent, "go")
        response = take_response(agent, timeout=10)
    assert response.content[0].text == "done", response.error_message
    # the run's first take, then one before round 2 (a message added) and one before round 3 (a message sent); none before round 4
    assert asked == ["added", "input"] * 3
    users = [[m["content"] for m in request["messages"] if m["role"] == "user"] for request in llm.requests]
    assert users == [["go"], ["go", "added"], ["go", "added", "sent"], ["go", "added", "sent"]]
