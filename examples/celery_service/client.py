"""Start conversations on the service and wait for every reply (docs/scale.md).

Each conversation is a thread sending its turns one after the other (a turn is sent when
the previous one has its reply); the conversations run at once. One line is printed per
reply (``done N``), then a JSON summary of every result on the last line.

A turn with no reply after ``--resend-after`` seconds is sent again, with the same task
id: Redis hands a task to a worker by popping it from the queue, and a worker killed
between that pop and its record of the task (kombu's ``unacked`` hash) takes the task
with it, where no visibility timeout brings it back. The turn is safe to run twice
(service.run_turn), so the client, which owns the question until it has the answer,
sends it again (docs/scale.md, "A task the broker lost").

A turn closed as failed (the model refused its question, or its retries were spent)
raises ``service.RunFailedError`` naming the turn and the cause: it is listed in the
summary's ``failures`` and the conversation goes on with its next turn, which no longer
waits for it. Any other error (no reply within ``--timeout``) ends its conversation.

    python client.py --conversations 50 --turns 3
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid

import celery.exceptions

from app import app, run_turn
from service import RunFailedError


def question(conversation: int, turn: int) -> str:
    return f"question {turn} of conversation {conversation}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--prefix", default=f"conv-{uuid.uuid4().hex[:8]}", help="conversation ids are PREFIX-N")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for one reply")
    parser.add_argument("--resend-after", type=float, default=60.0, help="seconds without a reply after which a turn is sent again (same task id)")
    parser.add_argument("--poll", type=float, default=0.25, help="seconds between two looks for a reply (the result backend is a database: each look is a query)")
    args = parser.parse_args()
    app.backend.ResultSession().close()  # create the result tables once, before the threads ask for results
    results: list[dict] = []
    failures: list[str] = []
    resent: list[str] = []
    lock = threading.Lock()  # guards results, failures, resent and the printed lines

    def answer(conversation_id: str, turn_id: str, text: str) -> dict:
        """Send the turn and wait for its reply, sending it again after each ``resend_after`` without one, up to ``timeout``."""
        deadline = time.monotonic() + args.timeout
        while True:
            pending = run_turn.apply_async((conversation_id, turn_id, text), task_id=turn_id)
            wait = min(args.resend_after, deadline - time.monotonic())
            try:
                return pending.get(timeout=max(wait, 0.0), interval=args.poll)
            except celery.exceptions.TimeoutError:
                if time.monotonic() >= deadline:
                    raise
                with lock:
                    resent.append(turn_id)

    def converse(n: int) -> None:
        conversation_id = f"{args.prefix}-{n}"
        for turn in range(1, args.turns + 1):
            turn_id = f"{conversation_id}/turn-{turn}"
            try:
                result = answer(conversation_id, turn_id, question(n, turn))
            except Exception as exc:  # noqa: BLE001  reported in the summary
                with lock:
                    failures.append(f"{turn_id}: {type(exc).__name__}: {exc}")
                if isinstance(exc, RunFailedError):  # the turn's outcome: the next turn goes on after it
                    continue
                return
            with lock:
                results.append(result)
                print(f"done {len(results)}", flush=True)

    started = time.monotonic()
    threads = [threading.Thread(target=converse, args=(n,)) for n in range(args.conversations)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    print(json.dumps({"results": results, "failures": failures, "resent": resent, "seconds": took, "turns_per_second": len(results) / took}), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
