"""docs/api.md is the package's API reference: the package has exactly what it says, and it says everything.

The reference lives in the repository, so a fresh clone checks it without anything beside
it. Its subsections marked "being built" are checked only for what already exists, wherever
they stand; marking one "built" makes it required (docs/api.md says how).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest

import yiemagent
from helpers import ROOT

DOC = ROOT / "docs" / "api.md"
KINDS = {
    "positional": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "vararg": inspect.Parameter.VAR_POSITIONAL,
    "kwonly": inspect.Parameter.KEYWORD_ONLY,
    "kwarg": inspect.Parameter.VAR_KEYWORD,
}
ANY_DEFAULT = object()  # `...` in the doc: a default built at each call
MISSING = object()


@dataclass
class Entry:
    """One line of a code block: a name, maybe its parameters, maybe its bases, its attributes."""

    path: str
    required: bool
    line: str
    params: Optional[list[tuple[str, Any, Any]]] = None  # (name, kind, default)
    extends: bool = False  # "name(..., extra)": the extra parameters of a name documented above
    bases: Optional[list[str]] = None
    attributes: list[str] = field(default_factory=list)


def _parameters(text: str) -> list[tuple[str, Any, Any]]:
    args = ast.parse(f"def _f({text}): pass").body[0].args  # type: ignore[attr-defined]
    out = []

    def default(node):
        if node is None:
            return MISSING
        return ANY_DEFAULT if isinstance(node, ast.Constant) and node.value is Ellipsis else ast.literal_eval(node)

    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out += [(a.arg, KINDS["positional"], default(d)) for a, d in zip(positional, defaults)]
    if args.vararg:
        out.append((args.vararg.arg, KINDS["vararg"], MISSING))
    out += [(a.arg, KINDS["kwonly"], default(d)) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        out.append((args.kwarg.arg, KINDS["kwarg"], MISSING))
    return out


def _entries_in(text: str, required: bool) -> list[Entry]:
    entries: list[Entry] = []
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        for line in block.splitlines():
            code = re.split(r"\s+#\s", line, maxsplit=1)[0].rstrip()
            if not code.strip():
                continue
            if code.startswith("  ."):
                entries[-1].attributes.append(code.strip()[1:])
                continue
            klass = re.fullmatch(r"class ([\w.]+)\((.*)\)", code)
            if klass:
                entries.append(Entry(klass.group(1), required, line, bases=[b.strip() for b in klass.group(2).split(",")]))
                continue
            signature = code.split(" -> ", 1)[0]
            call = re.fullmatch(r"([\w.]+)\((.*)\)", signature)
            if call:
                params = call.group(2)
                extends = params.startswith("...")
                entry = Entry(call.group(1), required, line, _parameters(params.removeprefix("...").lstrip(", ")), extends)
            else:
                assert re.fullmatch(r"[\w.]+", signature), f"docs/api.md: cannot read {line!r}"
                entry = Entry(signature, required, line)
            entries.append(entry)
    return entries


def read_reference(text: str) -> list[Entry]:
    """Every entry of docs/api.md's code blocks; those of "being built" subsections are not required.

    A section runs from its heading (``##`` or ``###``) to the next one, wherever it stands in
    the page, so sections can be ordered by topic; one whose heading says it is built or being
    built says which exactly.
    """
    entries: list[Entry] = []
    for heading, body in re.findall(r"^#{2,3} (.+?)\n(.*?)(?=^#{2,3} |\Z)", text, re.M | re.S):
        if "built" in heading:
            assert heading.endswith(("— built", "— being built")), f"docs/api.md: say whether {heading!r} is built"
        entries += _entries_in(body, not heading.endswith("— being built"))
    return entries


def resolve(path: str) -> Any:
    """The object a documented name stands for; AttributeError/ImportError when there is none."""
    parts = path.split(".")
    if parts[0] == "yiemagent":
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for part in parts[cut:]:
                obj = getattr(obj, part)
            return obj
    if parts[0] not in yiemagent.__all__:
        raise AttributeError(f"{parts[0]} is not in yiemagent.__all__")
    obj = yiemagent
    for part in parts:
        obj = getattr(obj, part)
    return obj


def _has_attribute(owner: Any, name: str) -> bool:
    if hasattr(owner, name):
        return True
    if dataclasses.is_dataclass(owner) and name in {f.name for f in dataclasses.fields(owner)}:
        return True
    try:
        return re.search(rf"\bself\.{name}\s*[:=]", inspect.getsource(owner)) is not None
    except (TypeError, OSError):
        return False


def _actual(obj: Any) -> list[tuple[str, Any, Any]]:
    return [
        (p.name, p.kind, MISSING if p.default is inspect.Parameter.empty else p.default)
        for p in inspect.signature(obj).parameters.values()
    ]


def _same(documented: tuple[str, Any, Any], actual: tuple[str, Any, Any]) -> bool:
    (name, kind, default), (a_name, a_kind, a_default) = documented, actual
    if default is ANY_DEFAULT:
        return name == a_name and kind == a_kind and a_default is not MISSING
    return (name, kind) == (a_name, a_kind) and (default is a_default or (type(default) is type(a_default) and default == a_default))


def problems(text: str) -> list[str]:
    """What in ``text`` (docs/api.md) the package does not match; empty when all is true."""
    entries = read_reference(text)
    found: list[str] = []
    extras: dict[str, list[Entry]] = {}
    for entry in entries:
        if entry.extends:
            extras.setdefault(entry.path, []).append(entry)
    for entry in entries:
        try:
            obj = resolve(entry.path)
        except (AttributeError, ImportError) as exc:
            if entry.required:
                found.append(f"{entry.line!r}: no such name ({exc})")
            continue
        if entry.bases is not None and [b.__name__ for b in obj.__bases__] != entry.bases:
            found.append(f"{entry.line!r}: the bases are {[b.__name__ for b in obj.__bases__]}")
        for attribute in entry.attributes:
            if not _has_attribute(obj, attribute) and entry.required:
                found.append(f"{entry.line!r}: no attribute {attribute!r}")
        if entry.params is None:
            continue
        actual = _actual(obj)
        if entry.extends:
            for param in entry.params:
                match = [a for a in actual if a[0] == param[0]]
                if match and not _same(param, match[0]):
                    found.append(f"{entry.line!r}: parameter {param[0]!r} is {match[0]}")
                elif not match and entry.required:
                    found.append(f"{entry.line!r}: no parameter {param[0]!r}")
            continue
        added = {p[0] for extra in extras.get(entry.path, []) for p in extra.params or []}
        own = [a for a in actual if a[0] not in added]
        if len(own) != len(entry.params) or not all(_same(d, a) for d, a in zip(entry.params, own)):
            found.append(f"{entry.line!r}: the signature is {inspect.signature(obj)}")
    documented = {e.path.split(".")[0] for e in entries}
    found += [f"{name} is in yiemagent.__all__ but not in docs/api.md" for name in yiemagent.__all__ if name not in documented]
    return found


def test_the_package_is_exactly_what_the_api_reference_says():
    """Every name of docs/api.md exists with its parameters, bases and attributes; every exported name is documented."""
    entries = read_reference(DOC.read_text(encoding="utf-8"))
    assert len([e for e in entries if e.required]) > 80
    assert problems(DOC.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "old, new, complaint",
    [
        ("take_response(agent, timeout=None)", "take_response(agent, timeout=5)", "the signature is"),
        ("take_response(agent, timeout=None)", "take_response(timeout=None, agent=None)", "the signature is"),
        ("clear_tools(store)", "clear_tools(store, everything)", "the signature is"),
        ("clear_tools(store)", "clear_tools(*, store)", "the signature is"),
        ("OfflineLLM()", "OfflineLLM(model)", "the signature is"),
        ("AgentToolResult(content, details=...", "AgentToolResult(content, details=None", "the signature is"),
        ("get_time_tool()", "get_the_time_tool()", "no such name"),
        ("class ToolError(YiemAgentError)", "class ToolError(YiemAgentError, ValueError)", "the bases are"),
        ("  .input_channel ", "  .inbox ", "no attribute 'inbox'"),
        ("LoopState.COMPLETED", "LoopState.DONE", "no such name"),
        ("should_terminate(finalized) -> bool\n", "", "should_terminate is in yiemagent.__all__ but not in docs/api.md"),
        ("tool(fn=None, *, name=None", "tool(fn=None, *, nom=None", "the signature is"),
        ("OpenAIClient(..., *, stream=False)", "OpenAIClient(..., *, stream=False, chunked=True)", "no parameter 'chunked'"),
        # a subsection marked "being built" asks only that what exists matches: an absent parameter passes
        ("— built\n\n```python\nOpenAIClient(..., *, stream=False)", "— being built\n\n```python\nOpenAIClient(..., *, stream=False, chunked=True)", None),
        ("OpenAIClient(..., *, stream=False)", "OpenAIClient(..., *, headers=1)", "parameter 'headers' is"),
        # wherever a "being built" subsection stands in the page, an absent parameter passes; "built" requires it
        ("— built\n\n```python\nYiemAgent(..., *, output_type=None, output_retries=1)", "— being built\n\n```python\nYiemAgent(..., *, output_type=None, output_retries=1, output_style=1)", None),
        ("YiemAgent(..., *, output_type=None, output_retries=1)", "YiemAgent(..., *, output_type=None, output_retries=1, output_style=1)", "no parameter 'output_style'"),
    ],
)
def test_the_check_notices_each_kind_of_difference(old, new, complaint):
    """The checker is not a rubber stamp: each kind of mismatch is reported (and a being-built name may be absent)."""
    text = DOC.read_text(encoding="utf-8")
    assert old in text
    found = problems(text.replace(old, new, 1))
    if complaint is None:
        assert found == []
    else:
        assert any(complaint in problem for problem in found), found


def test_all_is_sorted_and_exact():
    """__all__ is sorted (classes first, then functions) and names only what the package really has."""
    assert list(yiemagent.__all__) == sorted(yiemagent.__all__, key=lambda n: (n[0].islower(), n))
    assert all(hasattr(yiemagent, n) for n in yiemagent.__all__)
    assert len(set(yiemagent.__all__)) == len(yiemagent.__all__)


def test_agent_arguments_are_all_keyword_only():
    """YiemAgent's arguments are keyword-only: a spec-ordered positional call cannot silently bind the wrong one."""
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in inspect.signature(yiemagent.YiemAgent).parameters.values())


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_of_the_index_leads_to_a_section_of_the_page():
    """Each `(#anchor)` link of docs/api.md (its index by topic) is the anchor of one of its headings."""
    text = DOC.read_text(encoding="utf-8")
    anchors = {_anchor(h) for h in re.findall(r"^#{1,4} (.+)$", text, re.M)}
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert len(links) > 10
    assert [link for link in links if link not in anchors] == []
