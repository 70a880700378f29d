"""The command line: ``yiemagent ask "question"``, ``yiemagent chat``, ``yiemagent demo``.

Endpoints come from flags or the environment: ``--base-url`` / ``OPENAI_BASE_URL``,
``--api-key`` / ``OPENAI_API_KEY`` (``ANTHROPIC_API_KEY`` with ``--anthropic``),
``--model`` / ``YIEMAGENT_MODEL``. With no endpoint the offline keyword planner answers,
and the CLI says so when it starts. Against a server the reply streams (docs/streaming.md): the
answer is printed as it is written, the thinking of a reasoning model dimmed on stderr;
``--no-stream`` waits for whole replies instead. ``--session PATH`` (``ask`` and ``chat``)
keeps the conversation in an SQLite database, so a chat survives a restart (docs/sessions.md).
``--mcp "COMMAND ARGS"`` (repeatable) adds the tools of an MCP server started over stdio
(the ``yiemagent[mcp]`` extra; docs/mcp.md). ``--otel`` exports every run, LLM round and
tool call as OpenTelemetry spans over OTLP/HTTP to where ``OTEL_EXPORTER_OTLP_*`` says
(the ``yiemagent[otel]`` extra; docs/tracing.md).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sqlite3
import sys
from collections.abc import Callable
from typing import Any, Optional, TextIO

from ..agent import YiemAgent, abort, run_agent, shutdown, take_response
from ..events import tee
from .console import ConsolePrinter, terminal_safe
from ..errors import AgentClosedError, MessageFormatError, SessionInUseError
from ..llm import AnthropicClient, OfflineLLM, OpenAIClient
from ..types import AssistantMessage, text_of
from ..registry import register_tool
from ..history.sessions import SQLiteSession

__all__ = ["build_llm", "main"]

OPENAI_URL = "https://api.openai.com/v1"
INTERRUPTED = 130  # 128 + SIGINT: what shells report for a command that Ctrl-C ended
_ABORT_WAIT_S = 5.0  # how long an aborted run may take to end before ``ask`` exits anyway


def build_llm(args: argparse.Namespace) -> tuple[Callable[[dict[str, Any]], AssistantMessage], str]:
    """The ``llm_call`` the flags ask for, and a one-line description of it (no key in it)."""
    model = args.model or os.environ.get("YIEMAGENT_MODEL")
    if args.anthropic:
        key = args.api_key or os.environ.get("ANTHROPIC_API_KEY")
        base = args.base_url or "https://api.anthropic.com"
        anthropic = AnthropicClient(
            model or "claude-haiku-4-5", key, base_url=base, timeout=args.timeout, max_tokens=args.max_tokens, stream=not args.no_stream
        )
        return anthropic, f"Anthropic Messages API at {base}, model {anthropic.model}"
    key = args.api_key or os.environ.get("OPENAI_API_KEY")
    base = args.base_url or os.environ.get("OPENAI_BASE_URL") or (OPENAI_URL if key else None)
    if not base:
        return OfflineLLM(), "no LLM endpoint given (--base-url / OPENAI_BASE_URL): using the offline keyword planner"
    client = OpenAIClient(base, model or "gpt-4o-mini", key, timeout=args.timeout, stream=not args.no_stream)
    return client, f"OpenAI-compatible server at {client.base_url}, model {client.model}"


def _finish(agent: YiemAgent) -> None:
    shutdown(agent, timeout=5)
    if agent.session is not None:
        agent.session.close()


def _open_session(args: argparse.Namespace, err: TextIO) -> Optional[SQLiteSession]:
    """The ``--session`` database, if given; says how many messages it resumes."""
    if not getattr(args, "session", None):
        return None
    session: Optional[SQLiteSession] = None
    try:
        session = SQLiteSession(args.session, args.session_id)
        count = len(session.messages())
    except (sqlite3.Error, MessageFormatError, OSError, ValueError) as exc:  # not a database, a bad row, no access
        if session is not None:
            session.close()
        err.write(f"yiemagent: cannot use {args.session} as a session: {type(exc).__name__}: {exc}\n")
        raise SystemExit(2) from None
    err.write(f"yiemagent: session {args.session_id!r} in {args.session}: {count} messages so far\n")
    return session


def _make_agent(args: argparse.Namespace, llm: Any, out: TextIO, err: TextIO) -> tuple[YiemAgent, ConsolePrinter]:
    # --quiet hides rounds and tool calls, not the answer: a streamed answer is still shown as it comes
    printer = ConsolePrinter(err, answer=out, progress=not args.quiet)
    session = _open_session(args, err)
    try:
        agent = YiemAgent(
            llm_call=llm,
            agent_event_sink=tee(printer, getattr(args, "otel_sink", None)),
            system_prompt=args.system,
            parallel_tool_execute=args.parallel,
            session=session,
            builtin_tools=True,  # the CLI shows the spec's built-ins; a library user asks for them (decision 19)
        )
    except SessionInUseError as exc:  # decision 17: another yiemagent is in this conversation (docs/sessions.md)
        assert session is not None
        session.close()
        err.write(f"yiemagent: {exc}; pick another conversation with --session-id NAME\n")
        raise SystemExit(2) from None
    for tool in getattr(args, "mcp_tools", ()):
        if tool.name in agent.tool_store.tools:
            err.write(f"yiemagent: warning: the MCP tool {tool.name!r} replaces a tool of the same name\n")
        register_tool(agent.tool_store, tool)
    return agent, printer


def _with_mcp(args: argparse.Namespace, err: TextIO, body: Callable[[], int]) -> int:
    """Start each ``--mcp`` server (over stdio), put its tools in ``args.mcp_tools``, run ``body``, close the servers."""
    if not args.mcp:
        return body()
    try:
        from ..mcp import MCPClient, MCPConnectionError
    except ImportError as exc:
        err.write(f"error: --mcp: {exc}\n")
        return 2
    args.mcp_tools = []
    clients: list[Any] = []
    try:
        for spec in args.mcp:
            try:
                client = MCPClient.stdio(shlex.split(spec), timeout_s=args.timeout)
                clients.append(client)
                tools = client.tools()
            except (ValueError, MCPConnectionError) as exc:
                err.write(f"error: --mcp {spec!r}: {exc}\n")
                return 2
            err.write(f"yiemagent: MCP server {spec!r}: tools {', '.join(t.name for t in tools) or '(none)'}\n")
            args.mcp_tools.extend(tools)
        return body()
    finally:
        for client in clients:
            client.close()


def _show(response: AssistantMessage, out: TextIO, err: TextIO, printer: ConsolePrinter) -> int:
    text = text_of(response.content)
    if text and not printer.streamed(response):  # a streamed answer is on the screen already
        out.write((terminal_safe(text) if out.isatty() else text) + "\n")  # shown on a terminal, never obeyed
        out.flush()
    if response.stop_reason == "error":
        err.write(f"error: {terminal_safe(str(response.error_message))}\n")
        return 1
    return 0


def _ask(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    llm, description = build_llm(args)
    err.write(f"yiemagent: {description}\n")
    agent, printer = _make_agent(args, llm, out, err)
    try:
        run_agent(agent, args.question)
        try:
            response = take_response(agent, timeout=args.wait)
        except KeyboardInterrupt:
            return _interrupted(agent, err)
        return _show(response, out, err, printer)
    except TimeoutError as exc:
        err.write(f"error: {exc}\n")
        return 1
    finally:
        _finish(agent)


def _interrupted(agent: YiemAgent, err: TextIO) -> int:
    """Ctrl-C while ``ask`` waits: abort the run at once (a stream is closed), let it end, say so in one line.

    The aborted run's own lines (the open streamed line ended, ``ended: aborted``) come
    first, so the CLI's line is the last; a second Ctrl-C stops the waiting.
    """
    abort(agent, "aborted with Ctrl-C")
    try:
        take_response(agent, timeout=_ABORT_WAIT_S)
    except (TimeoutError, KeyboardInterrupt):
        pass
    err.write("yiemagent: aborted with Ctrl-C\n")
    return INTERRUPTED


def _chat(args: argparse.Namespace, out: TextIO, err: TextIO, read: Callable[[str], str]) -> int:
    llm, description = build_llm(args)
    err.write(f"yiemagent: {description}\nType a message; /tools lists the tools, /quit or Ctrl-D ends, Ctrl-C aborts a run.\n")
    agent, printer = _make_agent(args, llm, out, err)
    status = 0
    try:
        while True:
            try:
                line = read("you> ").strip()
            except EOFError:
                break
            if not line:
                continue
            if line in ("/quit", "/exit"):
                break
            if line == "/tools":
                for tool in agent.tool_store.tools.values():
                    out.write(f"  {tool.name}: {tool.label} — {tool.description}\n")
                continue
            run_agent(agent, line)
            while True:
                try:
                    response = take_response(agent, timeout=args.wait)
                    break
                except KeyboardInterrupt:
                    abort(agent, "aborted with Ctrl-C")
                except TimeoutError as exc:
                    err.write(f"error: {exc}\n")
                    abort(agent, "no answer in time")
                    # the aborted run's response, before the next line's: it ends soon (its LLM call is
                    # closed, its tools see the signal), but a tool may finish its request first; Ctrl-C stops the wait
                    response = take_response(agent)
                    break
            status = _show(response, out, err, printer)
    except (KeyboardInterrupt, AgentClosedError):
        pass
    finally:
        _finish(agent)
    return status


def _version() -> str:
    """The installed distribution's version (``importlib.metadata``); the package's own from a source tree not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("yiemagent")
    except PackageNotFoundError:
        from .. import __version__

        return __version__


def _add_shared_options(parser: argparse.ArgumentParser, *, after_command: bool = False) -> None:
    """The options every command takes, before its name (``yiemagent --model m ask hi``) or after it.

    Both places get them from this one function. After the command an option has no default
    (``argparse.SUPPRESS``): argparse copies a subcommand's values over the ones parsed
    before it, so a default there would undo ``--model m`` given before the command.
    ``--mcp`` after the command goes to ``mcp_after_command`` and ``_parse`` adds it to the
    ones before (a subcommand starts an empty list of its own).
    """

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if after_command else value

    parser.add_argument("--base-url", default=default(None), help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1 (env OPENAI_BASE_URL)")
    parser.add_argument("--model", default=default(None), help="model name (env YIEMAGENT_MODEL)")
    parser.add_argument("--api-key", default=default(None), help="API key (env OPENAI_API_KEY, or ANTHROPIC_API_KEY with --anthropic)")
    parser.add_argument("--anthropic", action="store_true", default=default(False), help="talk to Anthropic's Messages API")
    parser.add_argument("--parallel", action="store_true", default=default(False), help="run a batch of parallel-safe tools concurrently")
    parser.add_argument("--system", default=default("You are a helpful assistant. Use the tools when they help."), help="system prompt")
    parser.add_argument("--timeout", type=float, default=default(60.0), help="seconds per HTTP request to the LLM (default 60)")
    parser.add_argument("--wait", type=float, default=default(300.0), help="seconds to wait for an answer (default 300)")
    parser.add_argument("--max-tokens", type=int, default=default(1024), help="max tokens per reply (Anthropic; default 1024)")
    parser.add_argument(
        "--no-stream", action="store_true", default=default(False), help="wait for whole replies instead of printing them as they are written"
    )
    parser.add_argument("-q", "--quiet", action="store_true", default=default(False), help="do not show LLM rounds and tool calls")
    parser.add_argument(
        "--otel", action="store_true", default=default(False),
        help="export each run, LLM round and tool call as OpenTelemetry spans over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT (needs yiemagent[otel])",
    )
    parser.add_argument(
        "--mcp", action="append", default=default([]), metavar="'COMMAND ARGS'", dest="mcp_after_command" if after_command else "mcp",
        help="add the tools of an MCP server started with this command over stdio, e.g. --mcp 'mcp-server-time' (repeatable; needs yiemagent[mcp])",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="yiemagent", description="An LLM agent that runs tools (the YiemAgent tool lifecycle).")
    _add_shared_options(parser)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}", help="print the version of yiemagent and exit")
    commands = parser.add_subparsers(dest="command", required=True)
    ask = commands.add_parser("ask", help="ask one question and print the answer")
    ask.add_argument("question")
    chat = commands.add_parser("chat", help="an interactive session")
    for command in (ask, chat):
        command.add_argument("--session", metavar="PATH", help="keep the conversation in this SQLite file; it goes on from there next time")
        command.add_argument("--session-id", default="chat", help="which conversation in the --session file (default 'chat')")
    demo = commands.add_parser("demo", help="an offline session showing the whole tool lifecycle")
    for command in (ask, chat, demo):
        _add_shared_options(command, after_command=True)
    return parser


def _parse(argv: Optional[list[str]]) -> argparse.Namespace:
    """The command line's arguments; ``--mcp`` given after the command joins those given before it."""
    args = _parser().parse_args(argv)
    args.mcp = [*args.mcp, *vars(args).pop("mcp_after_command", [])]
    return args


def main(argv: Optional[list[str]] = None, *, out: TextIO = sys.stdout, err: TextIO = sys.stderr, read: Callable[[str], str] = input) -> int:
    """Run the command line; returns the exit status."""
    args = _parse(argv)
    if args.otel and args.command != "demo":
        return _with_otel(args, err, lambda: _command(args, out, err, read))
    return _command(args, out, err, read)


def _with_otel(args: argparse.Namespace, err: TextIO, body: Callable[[], int]) -> int:
    """Trace ``body``'s runs with an ``OTelSink`` exporting over OTLP/HTTP (docs/tracing.md); flush at the end."""
    try:
        from ..otel import OTelSink
        from ..otel.export import otlp_tracer_provider

        provider = otlp_tracer_provider()
    except (ImportError, ValueError) as exc:
        err.write(f"error: --otel: {exc}\n")
        return 2
    args.otel_sink = OTelSink(provider)
    try:
        return body()
    finally:
        provider.shutdown()  # exports what the batch still holds


def _command(args: argparse.Namespace, out: TextIO, err: TextIO, read: Callable[[str], str]) -> int:
    try:
        if args.command == "ask":
            return _with_mcp(args, err, lambda: _ask(args, out, err))
        if args.command == "chat":
            return _with_mcp(args, err, lambda: _chat(args, out, err, read))
    except KeyboardInterrupt:  # Ctrl-C anywhere else (starting an MCP server, closing): one line, no traceback
        err.write("yiemagent: interrupted with Ctrl-C\n")
        return INTERRUPTED
    from .demo import run_demo

    return run_demo(out, err, quiet=args.quiet)


if __name__ == "__main__":
    sys.exit(main())
