"""Start conversations on the service and wait for every reply (docs/scale.md).

Each conversation is a thread asking its turns one after the other (``TurnService.ask``:
a turn is sent when the previous one has its reply, and sent again after
``--resend-after`` seconds without one, as a task the broker lost is never answered);
the conversations run at once. One line is printed per reply (``done N``), then a JSON
summary of every result on the last line: ``results``, ``failures``, ``resent`` (the turns
sent again, from the service's log), ``seconds``, ``turns_per_second``.

A turn closed as failed raises ``RunFailedError`` naming the turn and the cause: it is
listed in ``failures`` and the conversation goes on with its next turn. Any other error
(no reply within ``--timeout``) ends its conversation.

    python client.py --conversations 50 --turns 3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import threading
import time
import uuid

from app import app, turns
from yiemagent import RunFailedError


def question(conversation: int, turn: int) -> str:
    return f"question {turn} of conversation {conversation}"


class Resent(logging.Handler):
    """The turn ids ``ask`` sent again, from its WARNING on ``yiemagent.celery``."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.turn_ids: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("turn %r of %r has no answer"):
            self.turn_ids.append(record.args[0])  # list.append: atomic, no lock needed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--prefix", default=f"conv-{uuid.uuid4().hex[:8]}", help="conversation ids are PREFIX-N")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for one reply")
    parser.add_argument("--resend-after", type=float, default=60.0, help="seconds without a reply after which a turn is sent again (same task id)")
    args = parser.parse_args()
    resent = Resent()
    logging.getLogger("yiemagent.celery").addHandler(resent)
    app.backend.ResultSession().close()  # create the result tables once, before the threads ask for results
    results: list[dict] = []
    failures: list[str] = []
    lock = threading.Lock()  # guards results, failures and the printed lines

    def converse(n: int) -> None:
        conversation_id = f"{args.prefix}-{n}"
        for turn in range(1, args.turns + 1):
            turn_id = f"{conversation_id}/turn-{turn}"
            try:
                result = turns.ask(conversation_id, turn_id, question(n, turn), timeout=args.timeout, resend_after=args.resend_after)
            except Exception as exc:  # noqa: BLE001  reported in the summary
                with lock:
                    failures.append(f"{turn_id}: {type(exc).__name__}: {exc}")
                if isinstance(exc, RunFailedError):  # the turn's outcome: the next turn goes on after it
                    continue
                return
            with lock:
                results.append(dataclasses.asdict(result))
                print(f"done {len(results)}", flush=True)

    started = time.monotonic()
    threads = [threading.Thread(target=converse, args=(n,)) for n in range(args.conversations)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    summary = {"results": results, "failures": failures, "resent": resent.turn_ids, "seconds": took, "turns_per_second": len(results) / took}
    print(json.dumps(summary), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
