"""Prompt caching: the input tokens a 50-round tool loop is billed with AnthropicClient(cache=True) and without (docs/performance.md "Prompt caching").

The loop runs against the fake Anthropic server of tests/support/anthropic_cache.py, which
reports usage by Anthropic's documented cache accounting (the prefix up to each
``cache_control`` breakpoint written, at least 1,024 tokens; the longest cached prefix
within 20 blocks of a breakpoint read back); the agent and the tool loop are those of
tests/llm/test_anthropic_cache.py. Billed input is in base-price tokens: uncached input at
1, cache writes at 1.25, cache reads at 0.1. ``python bench/bench_cache.py`` prints the
figures. Nothing is asserted here: the test holds the saving.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support"), str(ROOT / "tests" / "llm")]

from anthropic_cache import billed  # noqa: E402
from test_anthropic_cache import tool_loop  # noqa: E402

ROUNDS = 50


def main() -> None:
    cached, cached_usage = tool_loop(ROUNDS, cache=True)
    plain, plain_usage = tool_loop(ROUNDS)
    print(f"a {ROUNDS}-round tool loop ({len(plain.usages)} requests), Anthropic's cache accounting:")
    print(f"  prompt tokens sent        {plain_usage.input_tokens:>9,}   (the same with the cache: {cached_usage.input_tokens:,})")
    print(f"  without cache: billed     {billed(plain.usages):>11,.0f}")
    print(f"  cache=True: read {cached_usage.cache_read_tokens:,}, written {cached_usage.cache_write_tokens:,}, uncached {sum(u['input_tokens'] for u in cached.usages):,}")
    print(f"  cache=True: billed        {billed(cached.usages):>11,.0f}   ({billed(cached.usages) / billed(plain.usages):.1%} of the input billed without it)")


if __name__ == "__main__":
    main()
