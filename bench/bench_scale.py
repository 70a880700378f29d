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

import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))

from scale_cluster import EXAMPLE, Cluster  # noqa: E402

LATENCY_MS = 50
CONVERSATIONS, TURNS = 32, 3
THREADS = 2


TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def servers_cpu(cluster: Cluster) -> float:
    """CPU seconds of PostgreSQL (the postmaster and its live backends) and Redis so far."""
    roots = {cluster.postgres.process.pid, cluster.redis.process.pid}
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(entry.name) in roots or int(fields[1]) in roots:
                total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / TICK
    return total


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot (Linux /proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / TICK, sum(values) / TICK


FLOOR = ROOT / "bench" / "celery_floor"


def measure(cluster: Cluster, workers: int, app_dir: Path, prefix: str) -> dict:
    """One run of the example's client on ``workers`` fresh workers of the app in ``app_dir``: its rate and CPU a turn."""
    started = cluster.start_workers(workers, threads=THREADS, app_dir=app_dir)
    before = cluster.llm_requests()
    cpu_before = sum(cpu_seconds(w.pid) for w in started)
    busy_before, total_before = machine_busy()
    client_before, servers_before = children_cpu(), servers_cpu(cluster)
    summary = Cluster.summary(cluster.client(CONVERSATIONS, TURNS, prefix, app_dir=app_dir))
    requests = cluster.llm_requests() - before
    worker_cpu = sum(cpu_seconds(w.pid) for w in started) - cpu_before
    client_cpu, server_cpu = children_cpu() - client_before, servers_cpu(cluster) - servers_before
    busy_after, total_after = machine_busy()
    for worker in started:
        worker.stop()
    cluster.workers.clear()
    assert not summary["failures"], summary["failures"][:3]
    turns = len(summary["results"])
    assert turns == CONVERSATIONS * TURNS, turns
    return {
        "rate": summary["turns_per_second"], "requests": requests / summary["seconds"], "worker": worker_cpu / turns, "client": client_cpu / turns,
        "servers": server_cpu / turns, "busy": (busy_after - busy_before) / (total_after - total_before),
    }


def main() -> None:
    print(f"examples/celery_service: {CONVERSATIONS} conversations x {TURNS} turns, fake model {LATENCY_MS} ms per request, {THREADS} threads per worker;")
    print("  the floor: the same turns as a bare Celery task (bench/celery_floor/app.py: the same model requests and inserts, no yiemagent)")
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp, Cluster(Path(tmp), latency_ms=LATENCY_MS, durable=True) as cluster:
        base = None
        for workers in (1, 2, 4):
            ideal = workers * THREADS / (2 * LATENCY_MS / 1000)
            service = measure(cluster, workers, EXAMPLE, f"bench-{workers}")
            time.sleep(0.5)
            floor = measure(cluster, workers, FLOOR, f"floor-{workers}")
            time.sleep(0.5)
            base = base or service["rate"]
            for name, m in (("service", service), ("floor", floor)):
                print(
                    f"  {workers} worker(s), {name:7s}: {m['rate']:6.1f} turns/s  ({m['rate'] / ideal:.0%} of the {ideal:.0f} turns/s the model's wait allows)"
                    f"  {m['requests']:6.1f} LLM requests/s; CPU a turn: workers {m['worker'] * 1e3:5.1f} ms, client {m['client'] * 1e3:3.0f} ms,"
                    f" PostgreSQL+Redis {m['servers'] * 1e3:3.0f} ms; machine busy {m['busy']:.0%}"
                )
            print(
                f"  {workers} worker(s), service/floor: {service['rate'] / floor['rate']:.2f}x the turns/s ({service['rate'] / base:.2f}x of 1 worker's service),"
                f" {service['worker'] / floor['worker']:.1f}x the worker CPU a turn (+{(service['worker'] - floor['worker']) * 1e3:.1f} ms)"
            )


if __name__ == "__main__":
    main()
