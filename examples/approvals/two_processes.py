"""An approval across two processes, on one SQLite session (docs/api.md "Approvals in fewer lines").

    python two_processes.py ask       # process 1 asks; the call waits for a person; it exits
    python two_processes.py approve   # process 2 opens the session, approves, resumes, prints the answer

ScriptedLLM plays the model offline; with a real client both processes make the same one.
"""
import sys

from yiemagent import SQLiteSession, YiemAgent, approve, ask, pending_approvals, register_tool, resume, tool
from yiemagent.llm import ScriptedLLM
from yiemagent.llm.scripted import tool_call_reply


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    print("deleting", path)
    return f"deleted {path}"


replies = [tool_call_reply(("c1", "delete", {"path": "/tmp/old.log"})), "Deleted /tmp/old.log."]
llm = ScriptedLLM(replies[:1] if sys.argv[1] == "ask" else replies[1:])
with YiemAgent(llm_call=llm, agent_event_sink=None, builtin_tools=False, session=SQLiteSession("approvals.db", "ticket-7")) as agent:
    register_tool(agent.tool_store, delete)
    if sys.argv[1] == "ask":
        print(ask(agent, "Delete /tmp/old.log").stop_reason)  # -> awaiting_approval
    else:
        for waiting in pending_approvals(agent):
            approve(agent, waiting.tool_call_id)
        print(resume(agent).text)  # -> Deleted /tmp/old.log.
