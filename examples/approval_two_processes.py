"""Approvals that wait for a person, across two processes (README.md "Approvals that wait for a person").

    python examples/approval_two_processes.py request   # process 1: the model asks to delete two files; both calls wait
    python examples/approval_two_processes.py decide    # process 2, later: a person approves one, rejects the other; the run goes on

Both processes open the same SQLiteSession (approvals.db in the current directory): the
calls waiting for a decision are steps of its history (decision 18), so the second process
finds them without anything else passed between the two. The models are scripted (offline);
the agent's tool is registered here, whatever built-in tools the agent has.
"""

import sys

from yiemagent import (SQLiteSession, YiemAgent, approve, continue_agent, pending_approvals, register_tool, reject,
                       run_agent, take_response, tool)
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply


@tool
def delete(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"   # an example: nothing is deleted


def ask_a_person(ctx, signal):
    """before_tool_call: every delete waits for a person's decision."""
    if ctx.tool_call.name == "delete":
        return {"defer": True, "reason": f"delete {ctx.args['path']}?"}
    return None


def cleanup_agent(replies, session):
    agent = YiemAgent(llm_call=ScriptedLLM(replies), agent_event_sink=None, before_tool_call=ask_a_person, session=session)
    register_tool(agent.tool_store, delete)
    return agent


def request():
    session = SQLiteSession("approvals.db", "cleanup")
    session.clear()   # a new conversation each time the example runs
    asks = tool_call_reply(("c1", "delete", {"path": "/tmp/old.log"}), ("c2", "delete", {"path": "/etc/hosts"}))
    with cleanup_agent([asks], session) as agent:   # the with block ends the session's hold
        run_agent(agent, "Clean up.")
        print(take_response(agent, timeout=30).stop_reason)
        for pending in pending_approvals(agent):
            print(pending.tool_call_id, pending.reason)


def decide():
    session = SQLiteSession("approvals.db", "cleanup")
    with cleanup_agent(["Deleted /tmp/old.log; /etc/hosts stays."], session) as agent:   # loads the history
        print([pending.tool_call_id for pending in pending_approvals(agent)])
        approve(agent, "c1")
        reject(agent, "c2", "not /etc")
        continue_agent(agent)
        print(take_response(agent, timeout=30).text)
        print([message.content[0].text for message in agent.history() if message.role == "tool"])


if __name__ == "__main__":
    steps = {"request": request, "decide": decide}
    if len(sys.argv) != 2 or sys.argv[1] not in steps:
        sys.exit(f"usage: {sys.argv[0]} request|decide")
    steps[sys.argv[1]]()
