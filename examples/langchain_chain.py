"""The same question, two users, two answers: a LangChain LCEL chain over each user's memory.

Runs offline on a fresh install (``python examples/langchain_chain.py``): the encoder and the small
local LLM (SmolLM2-135M-Instruct) ship as packages. A 135M model answers loosely; the point is that
each user's chain sees only that user's records. A ``PersonaMemAnswerReporter`` passed as a callback
reports each answer back to the memory (``feedback`` on the logged retrieval), which is what
``personamem improve`` learns from, with no code in the chain.
"""

from __future__ import annotations

import tempfile
from operator import itemgetter

from langchain_core.documents import Document
from langchain_core.prompts import PromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda, RunnableParallel, RunnablePassthrough

from personamem import PersonaMem, default_encoder
from personamem.adapters.langchain import PersonaMemAnswerReporter, PersonaMemLLM, PersonaMemRetriever
from personamem.llm import load_llm

USERS = {
    "maya": [
        "I've been vegan for six years: no meat, fish, eggs or dairy.",
        "Spicy food is my favourite; I put chili on everything.",
        "On Saturday mornings I run trails in the hills.",
        "My cat Pixel wakes me up at six every day.",
    ],
    "tom": [
        "Barbecue is my passion: brisket, ribs and pulled pork.",
        "I smoke meat in my backyard smoker every Sunday.",
        "I can't stand spicy food, even a little pepper is too much.",
        "I'm grinding a mirror for a telescope in my garage.",
    ],
}
QUESTION = "What should I cook for dinner tonight?"
PROMPT = PromptTemplate.from_template(
    "What you know about me:\n{context}\n\nGiven that, answer in one or two sentences: {question}"
)


def format_docs(docs: list[Document]) -> str:
    return "\n".join(f"- {doc.page_content}" for doc in docs)


def build_chain(retriever: PersonaMemRetriever, llm: PersonaMemLLM) -> Runnable:
    """Answer from the retrieved records and return those records too, so the answer can be checked."""
    context = RunnableLambda(itemgetter("docs")) | format_docs
    answer = {"context": context, "question": itemgetter("question")} | PROMPT | llm
    return RunnableParallel(docs=retriever, question=RunnablePassthrough()).assign(answer=answer)


def main() -> None:
    llm = PersonaMemLLM(llm=load_llm("smollm2-135m"), max_tokens=48)
    with (  # each search is logged (the default): its id is what the answer is reported on
        tempfile.TemporaryDirectory() as folder,
        PersonaMem.open(folder, encoder=default_encoder()) as mem,
    ):
        for user, texts in USERS.items():
            mem.add_many([{"text": text, "kind": "knowledge"} for text in texts], user_id=user)
        reporter = PersonaMemAnswerReporter(mem)
        for user in USERS:
            chain = build_chain(PersonaMemRetriever(memory=mem, user_id=user, k=2), llm)
            result = chain.invoke(QUESTION, config={"callbacks": [reporter]})
            print(f"== {user}: {QUESTION}")
            print(f"answer: {result['answer'].strip()}")
            print("records used:")
            for doc in result["docs"]:
                print(f"  {doc.metadata['rank']}. [{doc.metadata['score']:.2f}] {doc.page_content}")
            calls = mem.inspection.interactions(user)
            reported = sum(call.feedback is not None for call in calls)
            print(f"feedback logged on {reported} of {len(calls)} calls")
            print()


if __name__ == "__main__":
    main()
