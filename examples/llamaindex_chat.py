"""Two users ask a LlamaIndex chat engine the same question; each gets an answer built on their own memory.

Runs offline: the local default LLM (SmolLM2-135M-Instruct on ``load_llm``'s default runtime,
CTranslate2) answers, the default encoder embeds, and each user's records live in a throwaway
PersonaMem. Needs ``pip install "personamem[llamaindex]"``.
The memory block reports each reply back to the memory (``feedback`` on its logged context call) when
the next turn reads the block, so after a follow-up question the first answer is in the log, which is
what ``personamem improve`` learns from.

    python examples/llamaindex_chat.py
"""

from __future__ import annotations

import asyncio
import tempfile

from llama_index.core import Settings
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.memory import Memory
from sqlalchemy.ext.asyncio import create_async_engine

from personamem import PersonaMem, PipelineConfig
from personamem.adapters.llamaindex import PersonaMemEmbedding, PersonaMemLLM, PersonaMemMemoryBlock
from personamem.llm import load_llm

FACTS = {
    "maya": [
        "I'm vegan: no meat, fish, eggs or dairy for me.",
        "I run trail ultramarathons and eat a big bowl of pasta before long runs.",
        "Spicy food gives me heartburn, so I keep dishes mild.",
        "I play the cello in a community orchestra.",
    ],
    "omar": [
        "I love Texas barbecue and smoke a beef brisket most weekends.",
        "I put hot chili peppers in almost everything I cook.",
        "I'm an amateur astronomer and stay up late on clear nights.",
        "I keep chickens, so there are always fresh eggs at home.",
    ],
}
QUESTION = "What should I cook for dinner this weekend?"
FOLLOW_UP = "Thanks! Something quick for lunch too?"


async def chat(mem: PersonaMem, llm: PersonaMemLLM) -> None:
    """Ask every user the same question through their own Memory and chat engine."""
    chat_store = create_async_engine("sqlite+aiosqlite:///:memory:")  # short-term queue, one per process
    try:
        for user in FACTS:
            block = PersonaMemMemoryBlock(memory=mem, user_id=user)  # the memory's pipeline: top 3
            memory = Memory.from_defaults(
                session_id=f"{user}-demo",
                token_limit=1024,
                token_flush_size=256,
                tokenizer_fn=llm.tokenizer_fn,
                memory_blocks=[block],
                async_engine=chat_store,
            )
            engine = SimpleChatEngine.from_defaults(
                llm=llm,
                memory=memory,
                system_prompt="You are a helpful cook. Suggest one dish that suits the user.",
            )
            reply = await engine.achat(QUESTION)
            print(f"== {user} ==")
            print(f"Q: {QUESTION}")
            print(f"A: {reply.response.strip()}")
            print("records used:")
            for hit in block.context(QUESTION).hits:  # what the block put in the prompt (it is deterministic)
                print(f"  {hit.rank}. ({hit.score:.2f}) {hit.record.text}")
            follow_up = await engine.achat(FOLLOW_UP)  # reading the block reports the first reply
            print(f"Q: {FOLLOW_UP}")
            print(f"A: {follow_up.response.strip()}")
            first = mem.inspection.interactions(user)[0]  # the first turn's context call
            print(f"feedback logged on the first answer: {first.feedback is not None}")
    finally:
        await chat_store.dispose()


def main() -> None:
    """Store both users' facts in a temporary PersonaMem and chat with each."""
    llm = PersonaMemLLM(load_llm("smollm2-135m"), max_tokens=60)
    # each user's 3 best records, within 512 tokens; each call logged (the default) for its feedback
    pipeline = PipelineConfig(profile_k=3)
    with tempfile.TemporaryDirectory() as folder, PersonaMem.open(folder, pipeline=pipeline) as mem:
        # nothing may fall back to OpenAI or download tiktoken files
        Settings.llm = llm
        Settings.embed_model = PersonaMemEmbedding(mem.store.encoder)
        Settings.tokenizer = llm.tokenizer_fn
        for user, facts in FACTS.items():
            mem.add_many([{"text": fact, "kind": "knowledge"} for fact in facts], user_id=user)
        asyncio.run(chat(mem, llm))


if __name__ == "__main__":
    main()
