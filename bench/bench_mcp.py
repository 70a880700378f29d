"""`make bench`: what an MCP tool call costs through MCPClient (issue 15).

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

from mcp_support import HttpServer, raw_server_command, time_server_command  # noqa: E402


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


if __name__ == "__main__":
    main()
