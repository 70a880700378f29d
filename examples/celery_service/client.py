"""Start conversations on the service and wait for every reply (docs/scale.md).

Each conversation is a thread sending its turns one after the other (a turn is sent when
the previous one has its reply); the conversations run at once. One line is printed per
reply (``done N``), then a JSON summary of every result on the last line.

    python client.py --conversations 50 --turns 3
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid

from app import app, run_turn


def question(conversation: int, turn: int) -> str:
    return f"question {turn} of conversation {conversation}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--prefix", default=f"conv-{uuid.uuid4().hex[:8]}", help="conversation ids are PREFIX-N")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for one reply")
    parser.add_argument("--poll", type=float, default=0.25, help="seconds between two looks for a reply (the result backend is a database: each look is a query)")
    args = parser.parse_args()
    app.backend.ResultSession().close()  # create the result tables once, before the threads ask for results
    results: list[dict] = []
    failures: list[str] = []
    lock = threading.Lock()  # guards results, failures and the printed lines

    def converse(n: int) -> None:
        conversation_id = f"{args.prefix}-{n}"
        for turn in range(1, args.turns + 1):
            turn_id = f"{conversation_id}/turn-{turn}"
            try:
                result = run_turn.apply_async((conversation_id, turn_id, question(n, turn)), task_id=turn_id).get(timeout=args.timeout, interval=args.poll)
            except Exception as exc:  # noqa: BLE001  reported in the summary
                with lock:
                    failures.append(f"{turn_id}: {type(exc).__name__}: {exc}")
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
    print(json.dumps({"results": results, "failures": failures, "seconds": took, "turns_per_second": len(results) / took}), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
