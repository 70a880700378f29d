"""writeTool (spec §15): admission checks, literal embedding, the self-tooling workflow (§15, §17, §18).

Every call goes through the whole per-call pipeline (schema validation included), as a
model's call would: a refusal is an error result the model reads, and nothing is written.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from helpers import ASSISTANT, SEQUENTIAL, WAIT, context_with, make_tool
from yiemagent import (
    AgentTool,
    AgentToolCall,
    ToolStore,
    UserMessage,
    YiemAgent,
    execute_tool_calls,
    register_tool,
    run_agent,
    shutdown,
    take_response,
)
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.tools._tool_source import MARKER, ToolSourceError, indent_body, render_tool_source, verify_tool_source
from yiemagent.tools.write_tool import INPUT_SCHEMA, write_tool_tool

SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
EXECUTE = 'query = args["query"]\nreturn AgentToolResult([TextContent(f"Found 5 {query} wines")], {"count": 5})'


def request(**overrides):
    args = {"name": "searchWine", "label": "Wine Search", "description": "Search a wine database", "inputSchema": SCHEMA, "executeCode": EXECUTE}
    args.update(overrides)
    return {k: v for k, v in args.items() if v is not None}


def call_write_tool(tools_dir, args, store=None):
    """Call writeTool as the agent does, through the whole pipeline; returns the tool-result message."""
    batch = execute_tool_calls(
        context_with(write_tool_tool(tools_dir, store=store)), ASSISTANT, [AgentToolCall("w1", "writeTool", args)], SEQUENTIAL, None, None
    )
    assert len(batch.messages) == 1 and not batch.terminate
    return batch.messages[0]


def write(tools_dir, store=None, **overrides):
    """writeTool with the searchWine request, changed by ``overrides`` (None drops a field)."""
    return call_write_tool(tools_dir, request(**overrides), store)


def refusal(message) -> str:
    """The text of an error result that refused the request."""
    text = message.content[0].text
    assert message.is_error and text.startswith("Tool 'writeTool' failed: refused:"), text
    assert text.endswith("Nothing was written."), text
    return text


def load(path: Path, module_name: str):
    """What the developer does: import the written file."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WRITTEN = render_tool_source("searchWine", "L", "D", SCHEMA, "return None", None, None, False)


def files_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


@pytest.mark.spec("15")
def test_writes_a_file_following_the_contract_and_tells_the_next_steps(tmp_path):
    """The file defines <name>_execute and <name>_tool; the result says how to import and register it."""
    result = write(tmp_path)
    target = tmp_path / "searchWine.py"
    assert files_in(tmp_path) == ["searchWine.py"], "no temporary file is left behind"
    text = result.content[0].text
    assert not result.is_error and "Wrote tool 'searchWine'" in text
    assert f"from {tmp_path.name}.searchWine import searchWine_tool" in text
    assert "register_tool(agent.tool_store, searchWine_tool())" in text
    assert result.details["path"] == str(target)
    tree = ast.parse(target.read_text())
    assert [n.name for n in tree.body if isinstance(n, ast.FunctionDef)] == ["searchWine_execute", "searchWine_tool"]
    tool = load(target, "written_search_wine").searchWine_tool()
    assert isinstance(tool, AgentTool) and tool.name == "searchWine" and tool.input_schema == SCHEMA
    assert tool.execute("c", {"query": "cabernet"}, None, lambda p: None).content[0].text == "Found 5 cabernet wines"


@pytest.mark.spec("17")
def test_optional_validate_and_prepare_code_become_the_contract_hooks(tmp_path):
    """validateCode and prepareCode become <name>_validate_required_args and <name>_prepare_arguments."""
    write(
        tmp_path,
        validateCode='return None if args.get("query") else "query must not be empty"',
        prepareCode='return {"query": str(args.get("query", "")).strip()}',
        parallel=True,
    )
    module = load(tmp_path / "searchWine.py", "written_hooks")
    tool = module.searchWine_tool()
    assert tool.validate_required_args is module.searchWine_validate_required_args
    assert tool.prepare_arguments is module.searchWine_prepare_arguments
    assert tool.parallel_tool_execute is True
    assert tool.validate_required_args({"query": ""}) == "query must not be empty"
    assert tool.prepare_arguments({"query": "  merlot "}) == {"query": "merlot"}


@pytest.mark.spec("15")
@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"name": "search-wine"}, "not an ASCII Python identifier"),
        ({"name": "vín"}, "not an ASCII Python identifier"),
        ({"name": "1wine"}, "not an ASCII Python identifier"),
        ({"name": "../evil"}, "not an ASCII Python identifier"),
        ({"name": "class"}, "is a Python keyword"),
        ({"name": "match"}, "is a Python keyword"),
        ({"name": "json"}, "is importable in this program (from the standard library)"),
        ({"name": "JSON"}, "is importable in this program (from the standard library)"),
        ({"name": "yiemagent"}, "is importable in this program"),
        ({"name": "tools"}, "is importable in this program"),
        ({"name": "requests"}, "is importable in this program"),
        ({"name": "Requests"}, "is importable in this program"),
        ({"name": "jsonschema"}, "is importable in this program"),
        ({"name": "pip"}, "is importable in this program"),
        ({"name": "setuptools"}, "is importable in this program"),
        ({"name": "helpers"}, "is importable in this program"),  # the tests' own module, on sys.path
        ({"name": "print"}, "is a Python builtin"),
        ({"name": "sitecustomize"}, "load by themselves"),
        ({"name": "usercustomize"}, "load by themselves"),
        ({"name": "conftest"}, "load by themselves"),
        ({"name": "setup"}, "load by themselves"),
        ({"name": "__init__"}, "starts with '__'"),
        ({"name": "__main__"}, "starts with '__'"),
        ({"name": "__searchWine"}, "starts with '__'"),
        ({"label": "L\ud800"}, "label holds a character UTF-8 cannot encode at position 1 (a lone surrogate)"),
        ({"description": "\udfff"}, "description holds a character UTF-8 cannot encode"),
        ({"inputSchema": {"type": "object", "description": "\ud83c"}}, "inputSchema holds a character UTF-8 cannot encode"),
        ({"inputSchema": {"type": "object", "properties": {"\ud83c": {}}}}, "inputSchema holds a character UTF-8 cannot encode"),
        ({"executeCode": "return '\ud800'"}, "executeCode holds a character UTF-8 cannot encode at position 8"),
        ({"validateCode": "return '\udc80'"}, "validateCode holds a character UTF-8 cannot encode"),
        ({"prepareCode": "# \udc80\nreturn args"}, "prepareCode holds a character UTF-8 cannot encode"),
        ({"name": "w" * 65}, "the limit is 64"),
        ({"name": "getTime"}, "already registered"),
        ({"inputSchema": {"type": "object", "properties": {"q": {"type": "strnig"}}}}, "not a valid JSON Schema"),
        ({"executeCode": "return (("}, "executeCode does not parse"),
        ({"executeCode": "   "}, "executeCode must be non-empty"),
        ({"executeCode": "yield 1"}, "must not use yield"),
        ({"validateCode": "return x ="}, "validateCode does not parse"),
        ({"prepareCode": "def"}, "prepareCode does not parse"),
        ({"inputSchema": {"type": "object", "default": float("nan")}}, "cannot be written as a Python literal"),
    ],
)
def test_admission_checks_refuse_and_write_nothing(tmp_path, overrides, fragment):
    """Each admission check refuses with an error result that says why, and nothing is on disk.

    Names: anything that would shadow a module this program can import (compared without
    case), a builtin, a module Python, pip or pytest load by name, or a dunder name. Text:
    a lone surrogate anywhere is refused, not raised as UnicodeEncodeError.
    """
    store = ToolStore("s")
    register_tool(store, make_tool("getTime"))
    assert fragment in refusal(write(tmp_path / "tools", store=store, **overrides))
    assert files_in(tmp_path / "tools") == []


@pytest.mark.spec("15")
@pytest.mark.parametrize("field", ["name", "label", "description", "inputSchema", "executeCode"])
def test_each_required_field_is_required_by_the_pipeline_validation(tmp_path, field):
    """§15's input schema: without any one of the five required fields the pipeline's validation refuses the call."""
    assert set(INPUT_SCHEMA["required"]) == {"name", "label", "description", "inputSchema", "executeCode"}
    result = write(tmp_path, **{field: None})
    text = result.content[0].text
    assert result.is_error and "Invalid arguments for tool 'writeTool'" in text and repr(field) in text, text
    assert files_in(tmp_path) == []


@pytest.mark.spec("15")
@pytest.mark.parametrize("field, value", [("name", 5), ("executeCode", ["return 1"]), ("parallel", "yes"), ("overwrite", 1), ("inputSchema", "{}")])
def test_wrongly_typed_fields_are_refused_by_the_pipeline_validation(tmp_path, field, value):
    """The schema types every field: a wrongly typed one never reaches writeTool."""
    result = write(tmp_path, **{field: value})
    assert result.is_error and "Invalid arguments for tool 'writeTool'" in result.content[0].text
    assert files_in(tmp_path) == []


@pytest.mark.spec("15")
def test_parallel_defaults_to_false(tmp_path):
    """Without "parallel" the written tool is not parallel (spec §3 default false)."""
    write(tmp_path)
    assert load(tmp_path / "searchWine.py", "written_parallel_default").searchWine_tool().parallel_tool_execute is False


@pytest.mark.spec("15")
def test_existing_file_is_never_overwritten_unless_asked(tmp_path):
    """A file writeTool wrote stays unless "overwrite": true (beyond the spec) asks; then it is replaced atomically."""
    write(tmp_path, description="first")
    refused = write(tmp_path, description="second")
    assert "already exists" in refusal(refused) and "'first'" in (tmp_path / "searchWine.py").read_text()
    replaced = write(tmp_path, description="second", overwrite=True)
    assert not replaced.is_error and replaced.details["overwrite"] is True
    assert "'second'" in (tmp_path / "searchWine.py").read_text()
    assert files_in(tmp_path) == ["searchWine.py"]


@pytest.mark.spec("15")
@pytest.mark.parametrize(
    "existing",
    [
        b"# mine\n",  # the user's own file
        b"",  # an empty file
        MARKER.encode() + b"\n\xff\xfe",  # not UTF-8 text
        WRITTEN.replace(MARKER + "\n", "").encode(),  # marker removed
        (WRITTEN + "\nimport os\n").encode(),  # edited since
        WRITTEN.replace("searchWine", "otherTool").encode(),  # written for another name
    ],
    ids=["user-file", "empty", "not-utf8", "marker-removed", "edited", "other-name"],
)
def test_overwrite_replaces_only_a_file_write_tool_wrote(tmp_path, existing):
    """"overwrite": true never replaces a file writeTool did not write, or one changed since; the file stays byte for byte."""
    target = tmp_path / "searchWine.py"
    target.write_bytes(existing)
    before = target.read_bytes()
    assert "never replaced" in refusal(write(tmp_path, overwrite=True))
    assert target.read_bytes() == before and files_in(tmp_path) == ["searchWine.py"]


@pytest.mark.spec("15")
def test_target_outside_the_tools_directory_is_refused(tmp_path):
    """A symlink that would lead the write outside tools_dir is refused; nothing is written there."""
    outside = tmp_path / "outside"
    outside.mkdir()
    tools = tmp_path / "tools"
    tools.mkdir()
    os.symlink(outside / "searchWine.py", tools / "searchWine.py")
    assert "outside the tools directory" in refusal(write(tools, overwrite=True))
    assert files_in(outside) == []


@pytest.mark.spec("15")
def test_a_symbolic_link_inside_the_tools_directory_is_never_written_through(tmp_path):
    """A link to another writeTool file in the same directory is refused: the write would replace the other file."""
    write(tmp_path, name="otherTool", description="other")
    os.symlink(tmp_path / "otherTool.py", tmp_path / "searchWine.py")
    before = (tmp_path / "otherTool.py").read_text()
    assert "is a symbolic link" in refusal(write(tmp_path, overwrite=True))
    assert (tmp_path / "otherTool.py").read_text() == before and (tmp_path / "searchWine.py").is_symlink()


@pytest.mark.spec("15")
def test_write_tool_never_imports_or_runs_what_it_writes(tmp_path):
    """Code in executeCode runs only when the developer's program calls the tool."""
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').close()\nreturn AgentToolResult([TextContent('ran')])"
    write(tmp_path / "tools", executeCode=code)
    assert not marker.exists()
    assert "searchWine" not in " ".join(sys.modules)
    tool = load(tmp_path / "tools" / "searchWine.py", "written_marker").searchWine_tool()
    assert not marker.exists(), "importing the file runs nothing"
    tool.execute("c", {"query": "x"}, None, lambda p: None)
    assert marker.exists()


@pytest.mark.spec("15")
def test_default_directory_comes_from_the_environment(tmp_path, monkeypatch):
    """Without tools_dir, files go to $YIEMAGENT_TOOLS_DIR (default ./tools)."""
    monkeypatch.setenv("YIEMAGENT_TOOLS_DIR", str(tmp_path / "elsewhere"))
    write(None)
    assert files_in(tmp_path / "elsewhere") == ["searchWine.py"]
    monkeypatch.delenv("YIEMAGENT_TOOLS_DIR")
    monkeypatch.chdir(tmp_path)
    write(None, name="otherTool")
    assert files_in(tmp_path / "tools") == ["otherTool.py"]


NASTY = ["'", '"', "'''", '"""', "\\", "\\n", "\n", "\r\n", "'); import os; os.system('echo pwned'); ('", "{x}", "\x00", "é ☃ 🍷"]


@pytest.mark.spec("15")
@pytest.mark.parametrize("nasty", NASTY)
def test_quotes_backslashes_and_newlines_round_trip_exactly(tmp_path, nasty):
    """Label, description and schema strings with quotes, triple quotes, backslashes and newlines round-trip exactly."""
    schema = {"type": "object", "description": nasty, "properties": {nasty or "k": {"type": "string", "description": nasty}}}
    write(tmp_path, label=f"L{nasty}", description=f"D{nasty}", inputSchema=schema)
    tool = load(tmp_path / "searchWine.py", f"written_nasty_{NASTY.index(nasty)}").searchWine_tool()
    assert (tool.label, tool.description, tool.input_schema) == (f"L{nasty}", f"D{nasty}", schema)


@pytest.mark.spec("15")
@given(label=st.text(), description=st.text(), schema_text=st.text())
def test_any_text_round_trips_through_the_generated_file(tmp_path_factory, label, description, schema_text):
    """Property: any text in label, description or schema strings comes back exactly from the generated source."""
    schema = {"type": "object", "description": schema_text, "properties": {"q": {"type": "string", "title": schema_text}}}
    source = render_tool_source("t", label, description, schema, "return None", None, None, False)
    expected = {"name": "t", "label": label, "description": description, "input_schema": schema, "parallel_tool_execute": False}
    verify_tool_source(source, "t", expected, {"execute": "return None"})
    namespace: dict = {}
    exec(compile(source, "<generated>", "exec"), namespace)  # the test plays the developer who imports it
    tool = namespace["t_tool"]()
    assert (tool.label, tool.description, tool.input_schema) == (label, description, schema)


VERIFY_MESSAGES = {
    "top level": "the generated module's top level holds more than the functions of tool 't'",
    "lacks": "the generated module's top level lacks t_execute or t_tool",
    "signature": "function t_execute does not have the expected plain signature ('tool_call_id', 'args', 'signal', 'on_partial_result')",
    "label": "the label embedded in the generated module is not the one given",
    "label literal": "the label embedded in the generated module is not a plain literal",
    "parallel": "the parallel_tool_execute embedded in the generated module is not the one given",
    "imports": "the generated module's imports are not the expected ones",
    "marker": "the generated module does not start with writeTool's marker line",
    "docstring": "the generated module does not start with its docstring",
    "body": "the body of t_execute is not the code given",
    "keywords": "t_tool must call AgentTool with exactly the keywords name, label, description, input_schema, execute, "
    "prepare_arguments, validate_required_args, parallel_tool_execute, in that order",
    "single return": "t_tool must be a single return of AgentTool(...)",
    "execute": "t_tool's execute is not t_execute",
    "prepare": "t_tool's prepare_arguments is not None",
    "validate": "t_tool's validate_required_args is not None",
    "syntax": "the generated module does not parse: line 26: invalid syntax",
}


@pytest.mark.spec("15")
@pytest.mark.parametrize(
    "old, new, problem",
    [
        (None, "\nimport os\n", "top level"),
        (None, "\nos_system = print('import time')\n", "top level"),
        (None, "\ndef t_execute(tool_call_id, args, signal, on_partial_result):\n    return None\n", "top level"),
        ("def t_execute(", "@print\ndef t_execute(", "signature"),
        ("on_partial_result):", "on_partial_result=print('x')):", "signature"),
        ("label='L'", "label='X'", "label"),
        ("label='L'", "label=str(1)", "label literal"),
        ("parallel_tool_execute=False", "parallel_tool_execute=0", "parallel"),
        ("from yiemagent import", "from os import", "imports"),
        (MARKER + "\n", "", "marker"),
        ("Review this file", "Trust this file", "docstring"),
        ("    return None\n", "    return 1\n", "body"),
        ("parallel_tool_execute=False,\n", "parallel_tool_execute=False,\n        **{'timeout_s': print('x')},\n", "keywords"),
        ("parallel_tool_execute=False,\n", "parallel_tool_execute=False,\n        timeout_s=1,\n", "keywords"),
        ("return AgentTool(\n", "return AgentTool(print('x'),\n", "keywords"),
        ("        name='t',\n        label='L',\n", "        label='L',\n        name='t',\n", "keywords"),
        ("return AgentTool(", "return print(", "single return"),
        ("return AgentTool(", "print('x')\n    return AgentTool(", "single return"),
        ("execute=t_execute", "execute=print", "execute"),
        ("prepare_arguments=None", "prepare_arguments=print", "prepare"),
        ("validate_required_args=None", "validate_required_args=t_execute", "validate"),
        ("def t_execute(tool_call_id, args, signal, on_partial_result):", "def t_execute(tool_call_id, args, signal, on_partial_result) -> print():", "signature"),
        ("def t_execute(tool_call_id, args, signal, on_partial_result):", "def t_execute(tool_call_id, args, signal, on_partial_result, *, extra=print()):", "signature"),
        ("def t_execute(tool_call_id, args, signal, on_partial_result):", "def t_execute(tool_call_id, args, signal, on_partial_result, *, extra):", "signature"),
        ("def t_execute(tool_call_id, args, signal, on_partial_result):", "def t_execute(tool_call_id, /, args, signal, on_partial_result):", "signature"),
        ("def t_execute(tool_call_id, args, signal, on_partial_result):", "def t_execute(tool_call_id, args, signal, on_partial_result, *extra):", "signature"),
        ("def t_execute(tool_call_id, args, signal, on_partial_result):", "def t_execute(tool_call_id, args, signal, on_partial_result, **extra):", "signature"),
        ("def t_execute(tool_call_id, args, signal, on_partial_result):", "def t_execute(tool_call_id, args, signal, on_partial_result: print()):", "signature"),
        ("def t_execute(tool_call_id, args, signal, on_partial_result):", "def t_execute(tool_call_id, args, signal):", "signature"),
        ("def t_execute(tool_call_id, args, signal, on_partial_result):", "def t_execute(extra, /, tool_call_id, args, signal, on_partial_result):", "signature"),
        ("        parallel_tool_execute=False,\n    )\n", "        parallel_tool_execute=False,\n    )\n    print('x')\n", "single return"),
        ("t_tool", "t_tool", "lacks"),  # the factory removed (see CUTS)
        ("t_execute", "t_execute", "lacks"),  # the execute function removed
        ("both", "both", "lacks"),  # both removed: docstring and import alone
        (None, "\ndef (\n", "syntax"),
    ],
)
def test_verification_rejects_anything_but_the_expected_module(old, new, problem):
    """The check refuses extra or missing top-level code, any signature but the plain one, other imports, altered
    literals or bodies, and any other factory call; the message says which (the model reads it)."""
    source = render_tool_source("t", "L", "D", {"type": "object"}, "return None", None, None, False)
    expected = {"name": "t", "label": "L", "description": "D", "input_schema": {"type": "object"}, "parallel_tool_execute": False}
    verify_tool_source(source, "t", expected, {"execute": "return None"})
    execute_at, tool_at = source.index("\n\ndef t_execute("), source.index("\n\ndef t_tool(")
    cuts = {"t_tool": source[:tool_at] + "\n", "t_execute": source[:execute_at] + source[tool_at:], "both": source[:execute_at] + "\n"}
    tampered = cuts[old] if old in cuts else source + new if old is None else source.replace(old, new, 1)
    assert tampered != source
    with pytest.raises(ToolSourceError) as raised:
        verify_tool_source(tampered, "t", expected, {"execute": "return None"})
    assert str(raised.value) == VERIFY_MESSAGES[problem]


@pytest.mark.spec("15")
def test_verification_requires_the_hooks_asked_for_and_no_others():
    """A module whose hook functions differ from the code fields given is refused."""
    source = render_tool_source("t", "L", "D", {"type": "object"}, "return None", "return None", None, False)
    expected = {"name": "t"}
    verify_tool_source(source, "t", expected, {"execute": "return None", "validate": "return None"})
    with pytest.raises(ToolSourceError, match="not those of the code fields"):
        verify_tool_source(source, "t", expected, {"execute": "return None"})
    with pytest.raises(ToolSourceError, match="validate_required_args is not t_validate_required_args"):
        verify_tool_source(source.replace("validate_required_args=t_validate_required_args", "validate_required_args=None"), "t", expected, {"execute": "return None", "validate": "return None"})


@pytest.mark.spec("15")
def test_self_tooling_workflow_end_to_end(tmp_path):
    """§15: the agent writes searchWine; the developer imports and registers it; the next run calls it."""
    write_args = request()
    llm = ScriptedLLM(
        [
            tool_call_reply(("l1", "listTools", {})),
            tool_call_reply(("w1", "writeTool", write_args)),
            "I wrote searchWine; please register it.",
            tool_call_reply(("s1", "searchWine", {"query": "cabernet"})),
            "Found 5 cabernet wines.",
        ]
    )
    store = ToolStore("wine")
    register_tool(store, write_tool_tool(tmp_path / "tools", store=store))
    agent = YiemAgent(llm_call=llm, agent_event_sink=None, tool_store=store)
    try:
        run_agent(agent, "Find me a cabernet")
        assert take_response(agent, timeout=WAIT).content[0].text == "I wrote searchWine; please register it."
        assert (tmp_path / "tools" / "searchWine.py").exists()
        assert "searchWine" not in store.tools, "writeTool does not load what it wrote"
        # what the developer does (spec §15 steps 4-6)
        module = load(tmp_path / "tools" / "searchWine.py", "written_workflow")
        register_tool(agent.tool_store, module.searchWine_tool())
        run_agent(agent, "Now search for cabernet")
        assert take_response(agent, timeout=WAIT).content[0].text == "Found 5 cabernet wines."
        result = [m for m in agent.history() if getattr(m, "tool_call_id", None) == "s1"][0]
        assert not result.is_error and result.content[0].text == "Found 5 cabernet wines" and result.details == {"count": 5}
        assert isinstance(agent.history()[0], UserMessage)
    finally:
        shutdown(agent, timeout=WAIT)


@pytest.mark.spec("15")
def test_without_hard_links_the_name_is_still_claimed_exclusively(tmp_path, monkeypatch):
    """On a file system without hard links the write still never replaces an existing file."""

    def no_links(*args):
        raise PermissionError("hard links not supported")

    monkeypatch.setattr(os, "link", no_links)
    assert not write(tmp_path).is_error
    assert "searchWine_tool" in (tmp_path / "searchWine.py").read_text()
    assert oct((tmp_path / "searchWine.py").stat().st_mode & 0o777) == "0o644"
    assert "already exists" in refusal(write(tmp_path))
    assert files_in(tmp_path) == ["searchWine.py"]


RETURN_TEXT = "return AgentToolResult([TextContent(text)])"


@pytest.mark.spec("15")
@pytest.mark.parametrize(
    "code, returned",
    [
        ('text = """Orders: 3\n    Status: OK"""\n' + RETURN_TEXT, "Orders: 3\n    Status: OK"),
        ('    text = """a\n  b\nc"""\n    ' + RETURN_TEXT, "a\n  b\nc"),
        ('\ttext = """a\n\tb"""\n\t' + RETURN_TEXT, "a\n\tb"),
        ('text = """a\r\n    b"""\r\n' + RETURN_TEXT, "a\n    b"),
        ("text = 'a\\\n    b'\n" + RETURN_TEXT, "a    b"),
        ('n = 3\ntext = f"""Orders: {n}\n    Status: {"OK"}"""\n' + RETURN_TEXT, "Orders: 3\n    Status: OK"),
        ('    text = """x\n y"""\n# a comment less indented\n    ' + RETURN_TEXT, "x\n y"),
        ('if True:\n    text = """\n    deep\n"""\n' + RETURN_TEXT, "\n    deep\n"),
    ],
    ids=["multi-line", "indented", "tabs", "crlf", "backslash", "f-string", "comment", "nested"],
)
def test_string_literals_in_code_keep_their_text(tmp_path, code, returned):
    """Code is indented without touching string literals: the written tool returns the text the body returns."""
    assert not write(tmp_path, executeCode=code).is_error
    tool = load(tmp_path / "searchWine.py", f"written_literal_{abs(hash(code))}").searchWine_tool()
    assert tool.execute("c", {"query": "x"}, None, lambda p: None).content[0].text == returned


# Any text at all, lone surrogates included (st.text() leaves them out by default).
any_text = st.text(st.characters() | st.characters(whitelist_categories=("Cs",)), max_size=30)
# Text that fits in a triple-quoted literal as it is: no quote, no backslash, no carriage return.
literal_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters='"\\\r\x00'), max_size=30)


@st.composite
def tool_bodies(draw):
    """(executeCode, the text its body returns): a triple-quoted literal spread over lines, in any margin."""
    value = draw(literal_text)
    margin = draw(st.sampled_from(["", "  ", "    ", "\t"]))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    lines = [f'text = """{value}"""'] + draw(st.lists(st.sampled_from(["# note", "", "pass", "args = dict(args)"]), max_size=2))
    lines.append("open(args['marker'], 'w').close()")  # a side effect, to tell running from importing
    lines.append(RETURN_TEXT)
    return newline.join(margin + line if line else "" for line in lines), value


@pytest.mark.spec("15")
@given(
    name=st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True),
    label=any_text,
    description=any_text,
    schema_text=any_text,
    body=tool_bodies(),
)
def test_written_files_import_cleanly_and_return_what_the_body_returns(tmp_path_factory, name, label, description, schema_text, body):
    """Property: through the pipeline, either writeTool refuses and nothing is written, or the file imports with
    no side effect and its tool has the given fields and returns what the body returns."""
    code, returned = body
    directory = tmp_path_factory.mktemp("tools")
    marker = directory.parent / f"{directory.name}.ran"
    schema = {"type": "object", "description": schema_text, "properties": {"marker": {"type": "string", "title": schema_text}}}
    result = call_write_tool(directory, {"name": name, "label": label, "description": description, "inputSchema": schema, "executeCode": code})
    event("refused" if result.is_error else "written")
    if result.is_error:
        assert files_in(directory) == []
        return
    assert files_in(directory) == [f"{name}.py"]
    modules = set(sys.modules)
    module = load(directory / f"{name}.py", f"written_property_{directory.name}")
    assert set(sys.modules) == modules and not marker.exists(), "importing the file runs nothing"
    tool = getattr(module, f"{name}_tool")()
    assert (tool.name, tool.label, tool.description, tool.input_schema) == (name, label, description, schema)
    assert tool.execute("c", {"marker": str(marker)}, None, lambda p: None).content[0].text == returned
    assert marker.exists()


@pytest.mark.spec("15")
@pytest.mark.parametrize(
    "code, indented",
    [
        ("a = 1\nreturn a", "    a = 1\n    return a"),
        ("    a = 1\n    return a", "    a = 1\n    return a"),
        ("\ta = 1\n\treturn a", "    a = 1\n    return a"),
        ("\n\n    if a:\n        b()\n    return a\n\n", "    if a:\n        b()\n    return a"),
        ("    a = 1\n# a note\n    return a", "    a = 1\n    # a note\n    return a"),
        ("   a = (1,\n  2)\n   return a", "     a = (1,\n    2)\n     return a"),
        ("a = 1\n\n   \nreturn a", "    a = 1\n\n\n    return a"),
        ("a = '''x\n  y\n'''\nreturn a", "    a = '''x\n  y\n'''\n    return a"),
        ("a = 1\r\nreturn a", "    a = 1\n    return a"),
        ("    a = 1\n  # a note\n    return a", "    a = 1\n    # a note\n    return a"),
        ("  # only a note", "      # only a note"),
    ],
    ids=["flat", "indented", "tabs", "blank-ends", "comment", "odd-margins", "blank-inside", "string", "crlf", "comment-between", "comments-only"],
)
def test_code_is_indented_by_its_common_margin_and_strings_are_left_alone(code, indented):
    """The file a developer reviews reads like the code given: the common margin becomes four spaces, nothing else moves."""
    assert indent_body(code) == indented


@pytest.mark.spec("15")
def test_code_that_cannot_be_tokenized_is_refused_saying_why():
    """indent_body refuses an unterminated string instead of guessing where the string ends."""
    with pytest.raises(ToolSourceError) as raised:
        indent_body("x = '''abc")
    assert str(raised.value) == "cannot be read as Python tokens: ('EOF in multi-line string', (1, 4))"


@pytest.mark.spec("15")
@pytest.mark.parametrize(
    "code, message",
    [
        ("return 1\x00", "executeCode does not parse: source code string cannot contain null bytes"),
        ("return (", "executeCode does not parse: line 1: '(' was never closed"),
        ("  return 1\n return 2", "executeCode does not parse: line 2: unindent does not match any outer indentation level"),
        ("# nothing but a note\n", "executeCode holds no statement (comments alone); the function must return its result"),
    ],
)
def test_code_that_does_not_parse_is_refused_with_the_parsers_words(tmp_path, code, message):
    """The refusal quotes the parser, so the model can fix its code."""
    assert refusal(write(tmp_path, executeCode=code)) == f"Tool 'writeTool' failed: refused: {message}. Nothing was written."
    assert files_in(tmp_path) == []


@pytest.mark.spec("15")
def test_code_starting_and_schema_keys_are_kept_as_given(tmp_path):
    """Nothing is trimmed from code but blank lines, and the schema's keys keep their order (the model sees them so)."""
    schema = {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "string"}}, "required": ["zeta"]}
    code = 'X = "kept"\nreturn AgentToolResult([TextContent(X)])'
    assert not write(tmp_path, executeCode=code, inputSchema=schema).is_error
    tool = load(tmp_path / "searchWine.py", "written_kept").searchWine_tool()
    assert tool.execute("c", {"zeta": "z"}, None, lambda p: None).content[0].text == "kept"
    assert list(tool.input_schema) == ["type", "properties", "required"] and list(tool.input_schema["properties"]) == ["zeta", "alpha"]


def refused_with(result) -> str:
    """The reason of a refusal, without the frame every refusal shares."""
    text = refusal(result)
    return text.removeprefix("Tool 'writeTool' failed: refused: ").removesuffix(". Nothing was written.")


@pytest.mark.spec("15")
def test_success_reports_the_file_and_the_exact_next_steps(tmp_path):
    """The result names the file, its size and the four steps the developer takes (spec §15 steps 4-6)."""
    tools = tmp_path / "deep" / "er" / "tools"  # missing parents are made
    result = write(tools, name="w" * 64)
    target = tools / f"{'w' * 64}.py"
    assert result.details == {"path": str(target), "name": "w" * 64, "bytes": target.stat().st_size, "overwrite": False}
    name = "w" * 64
    assert result.content[0].text == (
        f"Wrote tool {name!r} to {target}. It is not loaded yet.\n"
        "Next steps for the developer (spec §15 steps 4-6):\n"
        f"  1. Review {target}: it will run with your program's permissions.\n"
        f"  2. Import it (with {tools.parent} on sys.path): from tools.{name} import {name}_tool\n"
        f"  3. Register it: register_tool(agent.tool_store, {name}_tool()) — or add that line to register_all_tools.\n"
        f"  4. Restart your program (or register it in the running one); then the agent can call {name!r}."
    )


@pytest.mark.spec("15")
def test_refusals_say_exactly_why(tmp_path):
    """The model reads the reason: the schema error names the tool and the place; a surrogate deep in the schema is found."""
    bad_schema = {"type": "object", "properties": {"q": {"type": "strnig"}}}
    assert refused_with(write(tmp_path, inputSchema=bad_schema)) == (
        "tool 'searchWine': input_schema is not a valid JSON Schema at properties/q/type: 'strnig' is not valid under any of the given schemas"
    )
    deep = {"type": "object", "properties": {"q": {"enum": ["fine", "\ud800"]}}}
    assert refused_with(write(tmp_path, inputSchema=deep)) == "inputSchema holds a character UTF-8 cannot encode at position 0 (a lone surrogate)"
    assert files_in(tmp_path) == []


@pytest.mark.spec("15")
def test_where_a_shadowed_name_is_importable_from_is_named(tmp_path, monkeypatch):
    """A loaded module (by its top package), a module on sys.path, a namespace package, another case, a failing finder."""
    monkeypatch.setitem(sys.modules, "zzTop.mid.leaf", type(sys)("zzTop.mid.leaf"))
    assert refused_with(write(tmp_path, name="zzTop")).endswith("(from the loaded module 'zzTop'); a file of that name would shadow it")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "zzNamespace").mkdir(parents=True)
    (elsewhere / "zzModule.py").write_text("")
    (elsewhere / "ZzCased.py").write_text("")
    (elsewhere / "ZzPackage").mkdir()
    (elsewhere / "ZzPackage" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(elsewhere))
    shadow = "is importable in this program (from {}); a file of that name would shadow it"
    assert refused_with(write(tmp_path / "t", name="zzModule")) == f"name 'zzModule' {shadow.format(elsewhere / 'zzModule.py')}"
    assert refused_with(write(tmp_path / "t", name="zzNamespace")) == f"name 'zzNamespace' {shadow.format('a namespace package on sys.path')}"
    assert refused_with(write(tmp_path / "t", name="zzCased")) == f"name 'zzCased' {shadow.format(elsewhere / 'ZzCased')}"
    assert refused_with(write(tmp_path / "t", name="zzPackage")) == f"name 'zzPackage' {shadow.format(elsewhere / 'ZzPackage')}"

    def failing_finder(name, package=None):
        raise ImportError("a finder failed")

    monkeypatch.setattr(importlib.util, "find_spec", failing_finder)
    assert refused_with(write(tmp_path / "t", name="zzAnything")) == f"name 'zzAnything' {shadow.format('sys.path')}"
    assert files_in(tmp_path / "t") == []


@pytest.mark.spec("15")
def test_a_written_tool_importable_from_its_own_file_may_still_be_overwritten(tmp_path, monkeypatch):
    """With the tools directory on sys.path and the tool imported by its own name, only that file is not a shadow."""
    assert not write(tmp_path, description="first").is_error
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "searchWine", raising=False)
    module = importlib.import_module("searchWine")
    try:
        assert module.searchWine_tool().description == "first"
        replaced = write(tmp_path, description="second", overwrite=True)
        assert not replaced.is_error and "'second'" in (tmp_path / "searchWine.py").read_text()
    finally:
        sys.modules.pop("searchWine", None)


@pytest.mark.spec("15")
@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("links", [True, False])
def test_a_file_that_appears_after_the_checks_is_never_replaced(tmp_path, monkeypatch, overwrite, links):
    """A file created by someone else between the checks and the write (with or without hard links) stays as it is."""
    from yiemagent.tools import write_tool as module

    checked = module._check_existing

    def check_then_race(target, overwrite):
        verdict = checked(target, overwrite)
        target.write_text("# theirs\n")
        return verdict

    monkeypatch.setattr(module, "_check_existing", check_then_race)
    if not links:
        monkeypatch.setattr(os, "link", lambda *a: (_ for _ in ()).throw(PermissionError("no hard links")))
    target = tmp_path / "searchWine.py"
    assert refused_with(write(tmp_path, overwrite=overwrite)) == f'{target} already exists; pass "overwrite": true to replace it'
    assert target.read_text() == "# theirs\n" and files_in(tmp_path) == ["searchWine.py"]


@pytest.mark.spec("15")
def test_a_directory_that_cannot_be_made_is_an_error_saying_so(tmp_path):
    """An OSError while writing is an error result naming it, and nothing is left behind."""
    (tmp_path / "file").write_text("")
    result = write(tmp_path / "file" / "tools")
    text = result.content[0].text
    assert result.is_error and text.startswith("Tool 'writeTool' failed: could not write the file: [Errno 20] Not a directory")
    assert text.endswith(". Nothing was written.") and files_in(tmp_path) == ["file"]


@pytest.mark.spec("15")
def test_the_write_tool_definition_the_model_sees(tmp_path):
    """writeTool's name, label and description are what the model reads; it is sequential and uses INPUT_SCHEMA."""
    tool = write_tool_tool(tmp_path)
    assert (tool.name, tool.label, tool.parallel_tool_execute, tool.input_schema) == ("writeTool", "Write Tool", False, INPUT_SCHEMA)
    assert tool.description == (
        "Write the Python source file of a new tool for a developer to review and register. "
        "It does not load or run the tool. Call listTools first to avoid a name collision."
    )


@pytest.mark.spec("15")
def test_the_file_is_filled_beside_its_target_and_moved_into_place(tmp_path, monkeypatch):
    """Atomic write: a hidden temporary file in the tools directory (same file system), then a link or rename onto the target."""
    moves = []
    for name in ("link", "replace"):
        original = getattr(os, name)

        def recording(src, dst, *rest, _original=original, _name=name):
            moves.append((_name, Path(src).parent, Path(src).name, Path(dst)))
            return _original(src, dst, *rest)

        monkeypatch.setattr(os, name, recording)
    assert not write(tmp_path).is_error
    (_kind, directory, temporary, target), *_ = moves
    assert directory == tmp_path and target == tmp_path / "searchWine.py"
    assert temporary.startswith(".searchWine.") and temporary.endswith(".tmp")
    assert files_in(tmp_path) == ["searchWine.py"]
