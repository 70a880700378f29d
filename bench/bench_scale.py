"""`make bench`: turns per second of examples/celery_service with 1, 2 and 4 workers (docs/scale.md).

Each worker is a Celery process with two threads (``--pool threads --concurrency 2``);
PostgreSQL (durable defaults) and Redis run on 127.0.0.1 (tests/servers.py), and the
example's fake OpenAI-compatible server answers each LLM request after ``LATENCY_MS``, as a
model would, without using a core. A turn is two LLM requests (a tool call, then the
answer), one tool call and four stored messages. With the model's wait the only limit,
N workers would serve ``2N / (2 * latency)`` turns per second; the figures show how close
the agent's share comes, and where the machine (2 cores, shared by every process here)
becomes the limit. Nothing is asserted.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from scale_cluster import Cluster  # noqa: E402

LATENCY_MS = 50
CONVERSATIONS, TURNS = 32, 3
THREADS = 2


def main() -> None:
    print(f"examples/celery_service: {CONVERSATIONS} conversations x {TURNS} turns, fake model {LATENCY_MS} ms per request, {THREADS} threads per worker:")
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp, Cluster(Path(tmp), latency_ms=LATENCY_MS, durable=True) as cluster:
        base = None
        for workers in (1, 2, 4):
            started = cluster.start_workers(workers, threads=THREADS)
            before = cluster.llm_requests()
            summary = Cluster.summary(cluster.client(CONVERSATIONS, TURNS, f"bench-{workers}"))
            requests = cluster.llm_requests() - before
            for worker in started:
                worker.stop()
            cluster.workers.clear()
            assert not summary["failures"], summary["failures"][:3]
            rate = summary["turns_per_second"]
            base = base or rate
            ideal = workers * THREADS / (2 * LATENCY_MS / 1000)
            print(
                f"  {workers} worker(s): {rate:6.1f} turns/s  ({rate / base:.2f}x of 1 worker; {rate / ideal:.0%} of the {ideal:.0f} turns/s"
                f" the model's wait allows)  {requests / summary['seconds']:6.1f} LLM requests/s"
            )
            time.sleep(0.5)


if __name__ == "__main__":
    main()
