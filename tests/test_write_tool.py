"""writeTool (spec §15): admission checks, literal embedding, the self-tooling workflow (§15, §17, §18)."""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import make_tool, run_tool
from yiemagent import AgentTool, ToolStore, UserMessage, YiemAgent, register_tool, run_agent, shutdown, take_response
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply
from yiemagent.tools._tool_source import ToolSourceError, render_tool_source, verify_tool_source
from yiemagent.tools.write_tool import write_tool_tool

WAIT = 10
SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
EXECUTE = 'query = args["query"]\nreturn AgentToolResult([TextContent(f"Found 5 {query} wines")], {"count": 5})'


def request(**overrides):
    args = {"name": "searchWine", "label": "Wine Search", "description": "Search a wine database", "inputSchema": SCHEMA, "executeCode": EXECUTE}
    args.update(overrides)
    return {k: v for k, v in args.items() if v is not None}


def write(tools_dir, store=None, **overrides):
    """Call writeTool as the agent does; returns the ExecutedOutcome (refusals are error results)."""
    return run_tool(write_tool_tool(tools_dir, store=store), request(**overrides))


def load(path: Path, module_name: str):
    """What the developer does: import the written file."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def files_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


@pytest.mark.spec("15")
def test_writes_a_file_following_the_contract_and_tells_the_next_steps(tmp_path):
    """The file defines <name>_execute and <name>_tool; the result says how to import and register it."""
    outcome = write(tmp_path)
    result = outcome.result
    target = tmp_path / "searchWine.py"
    assert files_in(tmp_path) == ["searchWine.py"], "no temporary file is left behind"
    text = result.content[0].text
    assert not outcome.is_error and not result.terminate and "Wrote tool 'searchWine'" in text
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
        ({"name": "json"}, "standard-library or reserved module"),
        ({"name": "yiemagent"}, "standard-library or reserved module"),
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
    """Each admission check refuses with an error result that says why, and nothing is on disk."""
    store = ToolStore("s")
    register_tool(store, make_tool("getTime"))
    outcome = write(tmp_path / "tools", store=store, **overrides)
    text = outcome.result.content[0].text
    assert outcome.is_error and text.startswith("Tool 'writeTool' failed: refused:")
    assert fragment in text and "Nothing was written" in text
    assert files_in(tmp_path / "tools") == []


@pytest.mark.spec("15")
def test_existing_file_is_never_overwritten_unless_asked(tmp_path):
    """An existing file stays as it is; "overwrite": true (beyond the spec) replaces it atomically."""
    (tmp_path / "searchWine.py").write_text("# mine\n")
    refused = write(tmp_path)
    assert refused.is_error and "already exists" in refused.result.content[0].text and (tmp_path / "searchWine.py").read_text() == "# mine\n"
    replaced = write(tmp_path, overwrite=True)
    assert "Wrote tool" in replaced.result.content[0].text and "searchWine_tool" in (tmp_path / "searchWine.py").read_text()
    assert files_in(tmp_path) == ["searchWine.py"]


@pytest.mark.spec("15")
def test_target_outside_the_tools_directory_is_refused(tmp_path):
    """A symlink that would lead the write outside tools_dir is refused; nothing is written there."""
    outside = tmp_path / "outside"
    outside.mkdir()
    tools = tmp_path / "tools"
    tools.mkdir()
    os.symlink(outside / "searchWine.py", tools / "searchWine.py")
    result = write(tools, overwrite=True)
    assert result.is_error and "outside the tools directory" in result.result.content[0].text
    assert files_in(outside) == []


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
    verify_tool_source(source, "t", expected, {})
    namespace: dict = {}
    exec(compile(source, "<generated>", "exec"), namespace)  # the test plays the developer who imports it
    tool = namespace["t_tool"]()
    assert (tool.label, tool.description, tool.input_schema) == (label, description, schema)


@pytest.mark.spec("15")
@pytest.mark.parametrize(
    "tamper, fragment",
    [
        (lambda s: s + "\nimport os\n", "top level is not exactly"),
        (lambda s: s + "\nos_system = print('import time')\n", "top level is not exactly"),
        (lambda s: s.replace("def t_execute(", "@print\ndef t_execute("), "plain signature"),
        (lambda s: s.replace("on_partial_result):", "on_partial_result=print('x')):"), "plain signature"),
        (lambda s: s.replace("label='L'", "label='X'"), "the label embedded"),
        (lambda s: s.replace("label='L'", "label=str(1)"), "not a plain literal"),
        (lambda s: s.replace("from yiemagent import", "from os import"), "imports are not the expected"),
    ],
)
def test_verification_rejects_anything_but_the_expected_module(tamper, fragment):
    """The structural check refuses extra top-level code, decorators, defaults, other imports and altered literals."""
    source = render_tool_source("t", "L", "D", {"type": "object"}, "return None", None, None, False)
    expected = {"name": "t", "label": "L", "description": "D", "input_schema": {"type": "object"}, "parallel_tool_execute": False}
    verify_tool_source(source, "t", expected, {})
    with pytest.raises(ToolSourceError, match=fragment):
        verify_tool_source(tamper(source), "t", expected, {})


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
    refused = write(tmp_path)
    assert refused.is_error and "already exists" in refused.result.content[0].text
    assert files_in(tmp_path) == ["searchWine.py"]
