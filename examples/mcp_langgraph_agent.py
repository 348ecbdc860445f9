"""A LangGraph agent whose memory is personamem's MCP server: it remembers, recalls, answers, forgets.

Runs offline (``python examples/mcp_langgraph_agent.py``; needs ``pip install "personamem[mcp,langgraph]"``).
It starts ``personamem --store <temp folder> mcp`` as a child process, lists its tools over stdio with
the mcp SDK's client, wraps each as a LangChain tool (``mcp_tools`` below) and runs them from a
LangGraph graph: a ``plan`` node proposes tool calls, LangGraph's ``ToolNode`` executes them, and the
graph loops until ``plan`` answers without one.

What decides the tool calls: ``plan`` is a small deterministic script, not a model. It maps
"remember: ..." to ``remember``, "forget: ..." to ``recall`` then ``forget_record`` of the best hit,
and any other message to ``context``, whose text it reports as what an LLM would be shown; that
answer then goes back to the memory with ``report_answer`` and the interaction id ``context`` named
(the server logs calls by default), which is what ``personamem improve`` learns from. No
network model is reachable here, and the packaged SmolLM2-135M does not call tools reliably; in an
application the ``plan`` node is a tool-calling chat model (``model.bind_tools(tools)``, or
``langgraph.prebuilt.create_react_agent(model, tools)``) and the rest of the graph stays as is.

``langchain-mcp-adapters`` (``load_mcp_tools``) would replace ``mcp_tools``, but its latest release,
0.3.2, requires ``mcp<2`` (it imports ``mcp.server.fastmcp``, which mcp 2 removed) while personamem's
server is built on mcp 2. The bridge is the few lines it needs: the tool's JSON schema as the LangChain
tool's arguments, its text result as the answer, and a tool error as a ``ToolException`` the model
reads.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tempfile
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import TextContent, Tool

FACTS = {
    "maya": [
        "I've been vegan for six years: no meat, fish, eggs or dairy.",
        "Spicy food is my favourite; I put chili on everything.",
        "On Saturday mornings I run trails in the hills.",
    ],
    "tom": [
        "Barbecue is my passion: brisket, ribs and pulled pork.",
        "I can't stand spicy food, even a little pepper is too much.",
        "I'm grinding a mirror for a telescope in my garage.",
    ],
}
QUESTION = "What should I cook for dinner tonight?"
FORGET = {"maya": "my Saturday trail runs"}
LOGGED = re.compile(r"\n\(interaction_id (\w+): pass it to report_answer[^)]*\)$")
"""The note ``context`` adds to its text for a logged call: the id to report the answer on."""


def mcp_tools(client: Client, listed: list[Tool]) -> list[BaseTool]:
    """Each MCP tool as a LangChain tool that calls it through ``client``."""

    def bridge(tool: Tool) -> BaseTool:
        async def call(**arguments: Any) -> str:
            result = await client.call_tool(tool.name, arguments)
            text = "\n".join(block.text for block in result.content if isinstance(block, TextContent))
            if result.is_error:
                raise ToolException(text)
            return text

        return StructuredTool(
            name=tool.name,
            description=tool.description or "",
            args_schema=tool.input_schema,
            coroutine=call,
            handle_tool_error=True,  # the error's text goes back to the model as the tool's answer
        )

    return [bridge(tool) for tool in listed]


class Turn(TypedDict):
    user: str
    messages: Annotated[list[AnyMessage], add_messages]


def _call(name: str, **arguments: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": arguments, "id": f"call-{name}"}])


def plan(state: Turn) -> dict[str, list[AnyMessage]]:
    """The scripted stand-in for a tool-calling model (see the module docstring)."""
    user, messages = state["user"], state["messages"]
    asked = next(m for m in reversed(messages) if isinstance(m, HumanMessage)).text
    last = messages[-1]
    if isinstance(last, HumanMessage):
        if asked.startswith("remember:"):
            fact = asked.removeprefix("remember:").strip()
            return {"messages": [_call("remember", user_id=user, text=fact, kind="knowledge")]}
        if asked.startswith("forget:"):
            what = asked.removeprefix("forget:").strip()
            return {"messages": [_call("recall", user_id=user, query=what, k=1)]}
        return {"messages": [_call("context", user_id=user, query=asked)]}
    assert isinstance(last, ToolMessage)
    if last.name == "recall":
        hits = json.loads(last.text)["hits"]
        if hits:
            return {"messages": [_call("forget_record", user_id=user, record_id=hits[0]["id"])]}
        return {"messages": [AIMessage("Nothing like that is stored.")]}
    if last.name == "forget_record":
        deleted = json.loads(last.text)["deleted"]
        return {"messages": [AIMessage(f"forgot {len(deleted)} record(s)")]}
    if last.name == "context":
        logged = LOGGED.search(last.text)
        shown = last.text[: logged.start()] if logged else last.text
        answer = f"An LLM answering would be shown:\n{shown}"
        if logged is None:
            return {"messages": [AIMessage(answer)]}
        report = _call("report_answer", user_id=user, interaction_id=logged[1], answer=answer)
        return {"messages": [report]}
    if last.name == "report_answer":
        asked = messages[-2]  # the call that reported the answer: the answer is its argument
        assert isinstance(asked, AIMessage)
        return {"messages": [AIMessage(asked.tool_calls[0]["args"]["answer"])]}
    return {"messages": [AIMessage("Noted.")]}


def build_agent(tools: list[BaseTool]) -> Any:
    graph = StateGraph(Turn)
    graph.add_node("plan", plan)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "plan")
    graph.add_conditional_edges("plan", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "plan")
    return graph.compile()


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder, open(os.devnull, "w") as quiet:
        server = StdioServerParameters(
            command=sys.executable, args=["-m", "personamem", "--store", folder, "mcp"], env=dict(os.environ)
        )
        async with Client(stdio_client(server, errlog=quiet)) as client:  # its stderr: model-loading bars
            agent = build_agent(mcp_tools(client, (await client.list_tools()).tools))

            async def say(user: str, message: str) -> str:
                result = await agent.ainvoke({"user": user, "messages": [HumanMessage(message)]})
                reported = any(
                    m.name == "report_answer" for m in result["messages"] if isinstance(m, ToolMessage)
                )
                return str(result["messages"][-1].text) + ("\n(answer reported)" if reported else "")

            for user, facts in FACTS.items():
                for fact in facts:
                    await say(user, f"remember: {fact}")
            for user in FACTS:
                print(f"== {user}: {QUESTION}")
                print(await say(user, QUESTION))
                if user in FORGET:
                    print(f"-- forget: {FORGET[user]} -> {await say(user, f'forget: {FORGET[user]}')}")
                    print(await say(user, "What do I do on weekends?"))
                print()


if __name__ == "__main__":
    asyncio.run(main())
