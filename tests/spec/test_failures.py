"""_failures.py: what a failure becomes (spec §12 "errors as results"; docs/failures.md)."""

from __future__ import annotations

import threading

import pytest

from helpers import ASSISTANT, SEQUENTIAL, context_with, make_tool
from yiemagent import AgentToolCall, execute_tool_calls
from yiemagent._failures import USER_CODE_ERRORS, describe_error, user_code_errors


def in_a_thread(fn):
    out = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join(10)
    return out[0]


def test_user_code_may_raise_anything_in_the_agents_threads_but_ctrl_c_stops_the_main_thread():
    assert user_code_errors() == USER_CODE_ERRORS == (Exception, SystemExit)
    assert in_a_thread(user_code_errors) == (BaseException,)


@pytest.mark.spec("12")
def test_a_tool_raising_keyboard_interrupt_is_an_error_result_in_a_thread_and_propagates_in_the_main_thread():
    def interrupted(*args):
        raise KeyboardInterrupt

    context = context_with(make_tool("stop", interrupted))

    def run():
        return execute_tool_calls(context, ASSISTANT, [AgentToolCall("c", "stop", {})], SEQUENTIAL, None, None)

    batch = in_a_thread(run)
    assert batch.messages[0].is_error and "KeyboardInterrupt" in batch.messages[0].content[0].text
    with pytest.raises(KeyboardInterrupt):
        run()


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no message")


def test_an_exception_whose_message_cannot_be_read_is_still_described_by_its_type():
    assert describe_error(Unprintable()) == "Unprintable: (its message could not be read)"
