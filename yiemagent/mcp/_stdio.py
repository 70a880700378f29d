"""The stdio transport: the SDK's ``stdio_client`` with a stdout reader that takes linear time.

docs/mcp.md "Large results". The SDK's reader joins its whole buffer to each 64 KiB chunk
(``(buffer + chunk).split("\\n")``), so a message of n bytes costs O(n²/64 KiB): 20 MB took
~9.5 s here and held up every other message on the connection meanwhile. This reader
reads up to 1 MiB at a time, keeps the pieces of the current line in a list, and joins
them once, when the newline comes: 20 MB in ~0.2 s (bench/bench_mcp.py).

Everything else is the SDK's own, called as the SDK's ``stdio_client`` calls it: the
spawn (its safe default environment, the process group), ``_parse_line`` (the SDK's
JSON-RPC validation, a bad line surfaced as an exception value), and the shutdown
sequence (close stdin, wait 2 s, SIGTERM the group, 2 s, SIGKILL). Before the SDK parses a
line, each escape of a lone surrogate in it becomes ``\\ufffd`` (``_surrogates``: the SDK
would drop the line and its call would wait for ``timeout_s``). Newline-delimited
UTF-8 JSON-RPC is the protocol either way; a ``\\n`` byte never occurs inside a UTF-8
sequence, so each line is decoded whole. Those helpers are the SDK's private functions:
if an SDK release lacks one, ``stdio_client`` here is the SDK's own (slow for large
messages, correct), with a warning in the log.

Thread safety: loop thread only (``_session``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any, Optional, TextIO, cast

import anyio
import anyio.lowlevel
from anyio.abc import ByteSendStream
from mcp import StdioServerParameters
from mcp import stdio_client as sdk_stdio_client

from ._surrogates import mend_lone_surrogates

__all__ = ["MAX_MESSAGE_BYTES", "READ_CHUNK", "stdio_client"]

logger = logging.getLogger("yiemagent.mcp")

READ_CHUNK = 1 << 20
"""Bytes asked of the pipe per read (the SDK asks 64 KiB)."""

MAX_MESSAGE_BYTES = 64 << 20
"""The longest message a server may send, as over streamable HTTP: a longer one ends the
connection (logged, naming the cap) instead of growing the client's memory without bound."""

try:
    from mcp.client import stdio as _sdk
    from mcp.shared.message import SessionMessage

    _HELPERS: Optional[tuple[object, ...]] = (
        _sdk._get_executable_command,
        _sdk._create_platform_compatible_process,
        _sdk._parse_line,
        _sdk._drain_stdout,
        _sdk._stop_server_process,
        _sdk._aclose_all,
        _sdk.get_default_environment,
    )
except (ImportError, AttributeError):  # an SDK whose private helpers moved: use its own transport
    _HELPERS = None


async def _read_lines(process: Any, writer: Any, encoding: str, errors: str) -> None:
    """Each newline-ended line of the server's stdout, parsed by the SDK, to ``writer``; linear in the bytes read."""
    parse = _sdk._parse_line
    pieces: list[bytes] = []
    size = 0  # bytes of the line being read
    while True:
        try:
            chunk = await process.stdout.receive(READ_CHUNK)
        except anyio.EndOfStream:
            return
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                if start < len(chunk):
                    pieces.append(chunk[start:] if start else chunk)
                    size += len(chunk) - start
                break
            pieces.append(chunk[start:end])
            size += end - start
            if size > MAX_MESSAGE_BYTES:
                break
            line = b"".join(pieces).decode(encoding, errors)
            pieces, size = [], 0
            start = end + 1
            await writer.send(parse(mend_lone_surrogates(line)))  # else the SDK drops the line (docs/mcp.md)
        if size > MAX_MESSAGE_BYTES:
            # the session sees the connection end: its pending requests fail at once, none hangs
            logger.error("the MCP server sent a message of more than MAX_MESSAGE_BYTES=%d bytes; the connection was closed", MAX_MESSAGE_BYTES)
            await writer.aclose()  # now, not after the drain of the server's stdout that follows
            return


@asynccontextmanager
async def stdio_client(server: StdioServerParameters, errlog: TextIO = sys.stderr) -> AsyncGenerator[Any, None]:
    """The SDK's ``stdio_client`` (same arguments, same streams), with the linear reader above."""
    if _HELPERS is None or server.encoding.replace("-", "").lower() != "utf8":
        if _HELPERS is None:
            logger.warning("the MCP SDK's stdio helpers were not found; using its own stdio reader (slow for large messages)")
        async with sdk_stdio_client(server, errlog=errlog) as streams:
            yield streams
        return
    command = await _sdk._get_executable_command(server.command)
    process = await _sdk._create_platform_compatible_process(
        command=command, args=server.args, env=_sdk.get_default_environment() | (server.env or {}), errlog=errlog, cwd=server.cwd
    )
    read_stream_writer, read_stream = anyio.create_memory_object_stream[Any](0)
    write_stream, write_stream_reader = anyio.create_memory_object_stream[SessionMessage](0)
    shutting_down = False
    writer_done = anyio.Event()

    async def stdout_reader() -> None:
        try:
            async with read_stream_writer:
                try:
                    await _read_lines(process, read_stream_writer, server.encoding, server.encoding_error_handler)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return  # the session is gone; only the drain below remains
                finally:
                    await _sdk._drain_stdout(process)
        except anyio.ClosedResourceError:
            pass
        except (anyio.BrokenResourceError, ConnectionError):
            if not shutting_down:
                logger.exception("reading from the MCP server's stdout failed mid-session")

    async def stdin_writer() -> None:
        stdin = cast(ByteSendStream, process.stdin)  # never None: the SDK's helper opens the pipe (stdin=PIPE)
        try:
            async with write_stream_reader:
                async for session_message in write_stream_reader:
                    json = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send((json + "\n").encode(server.encoding, server.encoding_error_handler))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_stream_writer.aclose()  # the session sees the connection end instead of a request hanging
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(0.5):  # the SDK's window for the writer to flush
            await writer_done.wait()
        await _sdk._stop_server_process(process)
        await _sdk._aclose_all(read_stream, write_stream, read_stream_writer, write_stream_reader)
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            shutting_down = True
            with anyio.CancelScope(shield=True):  # every wait inside is bounded
                await shutdown()
            tg.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()
