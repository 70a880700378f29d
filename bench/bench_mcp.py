"""`make bench`: what an MCP tool call costs through MCPClient (docs/mcp.md).

Figures, each beside its goal, on this machine: connecting to mcp-server-time over stdio
(start, initialize), one tools/call round trip over stdio and over streamable HTTP (the
tests' MCPServer), and a batch of parallel calls on one connection. Skipped without the
extra. Nothing is asserted: a benchmark informs, the tests prove behaviour.
"""

from __future__ import annotations

import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))

try:
    from yiemagent.mcp import MCPClient
except ImportError as exc:
    print(f"bench_mcp: skipped ({exc})")
    sys.exit(0)

from mcp_support import HERE, HttpServer, raw_server_command, time_server_command  # noqa: E402

FEATURES = [sys.executable, str(HERE / "mcp_features_server.py")]


def large_results() -> None:
    """A result of 5, 20 and 50 MB over stdio (mcp/_stdio.py's reader; the SDK's own took 0.5, 9.5 and ~60 s) and HTTP."""
    with MCPClient.stdio(FEATURES, name="big", timeout_s=300) as big:
        for megabytes, goal in ((5, "< 0.3 s"), (20, "< 1 s"), (50, "< 2.5 s")):
            start = time.perf_counter()
            big.call_tool("big", {"megabytes": megabytes})
            print(f"  a {megabytes:2d} MB tools/call result, stdio                {time.perf_counter() - start:8.2f} s    goal {goal}")
    server = HttpServer(FEATURES + ["--http"])
    try:
        with MCPClient.http(server.url, name="big", timeout_s=300) as big:
            for megabytes in (5, 20):
                start = time.perf_counter()
                try:
                    big.call_tool("big", {"megabytes": megabytes})
                    took = f"{time.perf_counter() - start:8.2f} s "
                except Exception as exc:  # the SDK's HTTP transport, not ours: said, not hidden
                    took = f"  failed: {str(exc)[:60]}"
                print(f"  a {megabytes:2d} MB tools/call result, streamable HTTP       {took}   goal < 1 s")
    finally:
        server.close()


def median_ms(run, repeats: int) -> float:
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        timings.append(time.perf_counter() - start)
    return statistics.median(timings) * 1000


def main() -> None:
    start = time.perf_counter()
    time_server = MCPClient.stdio(time_server_command(), name="time")
    connect_ms = (time.perf_counter() - start) * 1000
    print("MCP (yiemagent.mcp):")
    print(f"  connect to mcp-server-time (spawn + initialize)    {connect_ms:8.1f} ms   goal < 2000 ms (the server's own start-up dominates)")
    with time_server:
        call = lambda: time_server.call_tool("get_current_time", {"timezone": "UTC"})  # noqa: E731
        print(f"  tools/call round trip, stdio, mcp-server-time      {median_ms(call, 50):8.2f} ms   goal <= 5 ms")
    with MCPClient.stdio(raw_server_command("plain"), name="raw") as raw:
        ping = lambda: raw.call_tool("ping", {})  # noqa: E731
        print(f"  tools/call round trip, stdio, minimal server       {median_ms(ping, 100):8.2f} ms   goal <= 2 ms")
    server = HttpServer()
    try:
        with MCPClient.http(server.url, name="web") as web:
            echo = lambda: web.call_tool("echo", {"text": "hi"})  # noqa: E731
            print(f"  tools/call round trip, streamable HTTP, MCPServer  {median_ms(echo, 50):8.2f} ms   goal <= 10 ms")
            width = 16

            def batch() -> None:
                with ThreadPoolExecutor(width) as pool:
                    list(pool.map(lambda _: web.call_tool("slow", {"seconds": 0.2}), range(width)))

            batch_ms = median_ms(batch, 3)
            print(f"  {width} parallel calls sleeping 200 ms, one connection {batch_ms:8.1f} ms   goal ~ 200 ms (not {width * 200})")
    finally:
        server.close()
    large_results()


if __name__ == "__main__":
    main()
