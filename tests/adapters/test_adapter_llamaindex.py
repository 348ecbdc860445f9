"""The LlamaIndex adapter on real components: MiniLM, SQLite + Chroma, SmolLM2, LlamaIndex's own Memory."""

from __future__ import annotations

import importlib
import runpy
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path

import llama_index.core
import numpy as np
import pytest
from llama_index.core import Settings
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.memory import Memory
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from personamem import MissingExtraError, PersonaMem, PipelineConfig, RecordKind, SentenceEncoder
from personamem.adapters.llamaindex import (
    PersonaMemEmbedding,
    PersonaMemLLM,
    PersonaMemMemoryBlock,
    PersonaMemProfilePostprocessor,
    PersonaMemRetriever,
)
from personamem.errors import MethodError, PersonaMemWarning
from personamem.llm import TransformersLLM
from personamem.methods import method_config
from personamem.profile import RelevanceSelector

FACTS = {
    "alice": [
        "I'm vegetarian and allergic to peanuts.",
        "I play the cello in a string quartet.",
        "I run trails every weekend.",
        "I live in Lyon with my two cats.",
    ],
    "bob": [
        "I love smoking beef brisket on my barbecue.",
        "I'm an amateur astronomer with a big telescope.",
        "I live in Austin and hate the summer heat.",
        "I collect vinyl records of jazz music.",
    ],
}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llamaindex_chat.py"


@pytest.fixture
def filled(mem: PersonaMem) -> PersonaMem:
    for user, facts in FACTS.items():
        mem.add_many(
            [
                {"text": fact, "kind": "knowledge", "metadata": {"source": "intake", "n": i}}
                for i, fact in enumerate(facts)
            ],
            user_id=user,
        )
    mem.add("alice", "Booked a cello lesson.", kind="note", timestamp="2024-05-01T10:00:00+00:00")
    return mem


@pytest.fixture
async def chat_store() -> AsyncIterator[AsyncEngine]:
    """The short-term queue's database, shared by every Memory of a test like one server's would be."""
    engine = create_async_engine("sqlite+aiosqlite:///:memory:")
    yield engine
    await engine.dispose()


def _memory(block: PersonaMemMemoryBlock, engine: AsyncEngine, session_id: str) -> Memory:
    # a tiny budget in whitespace tokens: every few messages flush to the long-term block
    return Memory.from_defaults(
        session_id=session_id,
        token_limit=20,
        token_flush_size=6,
        tokenizer_fn=str.split,
        memory_blocks=[block],
        async_engine=engine,
    )


# -- retriever ------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["dense", "bm25", "hybrid"])
def test_retriever_returns_only_the_users_records(filled: PersonaMem, method: str) -> None:
    for user in FACTS:
        nodes = PersonaMemRetriever(filled, user, k=20, method=method).retrieve("cats music food heat")
        assert {n.node.metadata["user_id"] for n in nodes} == {user}
        assert {n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes} <= {
            r.text for r in filled.records(user)
        }
    assert PersonaMemRetriever(filled, "nobody").retrieve("anything") == []


def test_retriever_nodes_carry_the_record(filled: PersonaMem) -> None:
    nodes = PersonaMemRetriever(filled, "alice", k=5).retrieve("cello lesson")
    assert [n.node.metadata["rank"] for n in nodes] == [1, 2, 3, 4, 5]
    scores = [n.score for n in nodes]
    assert scores == sorted(scores, reverse=True)
    by_text = {n.node.get_content(metadata_mode=MetadataMode.NONE): n.node for n in nodes}
    lesson = by_text["Booked a cello lesson."]
    record = next(r for r in filled.records("alice") if r.text == "Booked a cello lesson.")
    assert lesson.node_id == record.id
    # the search that found it, where the memory logs calls (its pipeline's log_interactions)
    logged = (
        {"interaction_id": filled.inspection.interactions("alice")[0].id}
        if filled.config.log_interactions
        else {}
    )
    assert lesson.metadata == {
        "record_id": record.id,
        "user_id": "alice",
        "kind": "note",
        "category": None,
        "timestamp": "2024-05-01T10:00:00+00:00",
        "rank": lesson.metadata["rank"],
        **logged,
    }
    quartet = by_text["I play the cello in a string quartet."]
    assert quartet.metadata["source"] == "intake" and quartet.metadata["n"] == 1
    shown = quartet.get_content(metadata_mode=MetadataMode.LLM)  # the prompt sees facts, not bookkeeping
    assert "source: intake" in shown and "kind: knowledge" in shown
    assert "user_id" not in shown and "record_id" not in shown and "None" not in shown


def test_retriever_searches_with_the_bundles_embedding(filled: PersonaMem, encoder: SentenceEncoder) -> None:
    retriever = PersonaMemRetriever(filled, "bob", k=1)
    query = "What should I grill tonight?"
    assert retriever.retrieve(query)[0].node.get_content(metadata_mode=MetadataMode.NONE) == FACTS["bob"][0]
    elsewhere = PersonaMemEmbedding(encoder).get_query_embedding("looking at planets and stars at night")
    nodes = retriever.retrieve(QueryBundle(query_str=query, embedding=elsewhere))
    assert nodes[0].node.get_content(metadata_mode=MetadataMode.NONE) == FACTS["bob"][1]
    expected = filled.search_vector("bob", np.asarray(elsewhere, dtype=np.float32), k=1)[0]
    assert nodes[0].node.node_id == expected.record.id
    assert nodes[0].score == pytest.approx(expected.score)


def test_retriever_refuses_an_embedding_of_the_wrong_width(filled: PersonaMem) -> None:
    retriever = PersonaMemRetriever(filled, "alice")
    with pytest.raises(ValueError, match=r"shape \(8,\).*shape \(384,\)"):
        retriever.retrieve(QueryBundle(query_str="food", embedding=[0.1] * 8))


def test_retriever_checks_its_settings(filled: PersonaMem) -> None:
    with pytest.raises(ValueError, match="k must be at least 1"):
        PersonaMemRetriever(filled, "alice", k=0)
    with pytest.raises(MethodError, match=r"unknown method 'fuzzy'; choose from: dense, bm25, hybrid, pbr"):
        PersonaMemRetriever(filled, "alice", method="fuzzy")
    with pytest.raises(
        MethodError,
        match=r"listwise, purple:<folder>, pgret:<folder>, "
        r"pgret-rrf:<folder>, adapter:<name>, adapter-rrf:<name>, default, pipeline:<file>",
    ):
        PersonaMemRetriever(filled, "alice", method="fuzzy")
    with pytest.raises(MethodError, match="method 'listwise' needs a frozen LLM"):  # none configured
        PersonaMemRetriever(filled, "alice", method="listwise")
    with pytest.raises(MethodError, match=r"give method \('bm25'\) or pipeline, not both"):
        PersonaMemRetriever(filled, "alice", method="bm25", pipeline=method_config("dense"))


@pytest.mark.parametrize("method", ["hybrid", "earliest5", "pbr-no-prf"])
def test_a_method_gives_what_memory_search_gives(filled: PersonaMem, method: str) -> None:
    nodes = PersonaMemRetriever(filled, "alice", k=3, method=method).retrieve("what can I eat?")
    hits = filled.search("alice", "what can I eat?", k=3, method=method)
    assert [n.node.node_id for n in nodes] == [h.record.id for h in hits]
    # P-Anchor's vector is computed again for the adapter; a loaded CPU moves its last float32 digit
    assert [n.score for n in nodes] == pytest.approx([h.score for h in hits], abs=1e-6)


def test_a_pipeline_config_searches_through_that_pipeline(filled: PersonaMem) -> None:
    config = method_config("earliest5").model_copy(update={"profile_k": 2, "first_stage": "bm25"})
    nodes = PersonaMemRetriever(filled, "alice", k=3, pipeline=config).retrieve("cello lesson")
    want = filled.pipeline(config).search("alice", "cello lesson", 3)
    assert [n.node.node_id for n in nodes] == [h.record.id for h in want]
    assert nodes[0].node.get_content(metadata_mode=MetadataMode.NONE) == "Booked a cello lesson."  # dated


async def test_async_retrieval_matches_sync(filled: PersonaMem) -> None:
    retriever = PersonaMemRetriever(filled, "alice", k=3, method="hybrid")
    got = await retriever.aretrieve("what can I eat?")
    want = retriever.retrieve("what can I eat?")
    assert [(n.node.node_id, n.score) for n in got] == [(n.node.node_id, n.score) for n in want]


# -- postprocessor --------------------------------------------------------------------------------


def test_postprocessor_keeps_the_selectors_profile_in_order(
    filled: PersonaMem, encoder: SentenceEncoder
) -> None:
    nodes = PersonaMemRetriever(filled, "alice", k=5, method="bm25").retrieve("cello trails cats peanuts")
    query = "Which instrument do I play?"
    post = PersonaMemProfilePostprocessor.from_memory(filled, "alice", k=2)
    kept = post.postprocess_nodes(nodes, query_str=query)
    records = {r.id: r for r in filled.records("alice")}
    want = RelevanceSelector(encoder).select("alice", query, [records[n.node.node_id] for n in nodes], k=2)
    assert [(n.node.node_id, n.score) for n in kept] == [(h.record.id, pytest.approx(h.score)) for h in want]
    assert "cello" in kept[0].node.get_content(metadata_mode=MetadataMode.NONE)
    originals = {n.node.node_id: n.node for n in nodes}
    for n in kept:  # the very nodes that came in, metadata untouched
        assert n.node is originals[n.node.node_id]
        assert n.node.metadata["user_id"] == "alice"


async def test_postprocessor_takes_nodes_from_anywhere(encoder: SentenceEncoder) -> None:
    nodes = [
        NodeWithScore(node=TextNode(id_="a", text="Tokyo has great ramen shops.", metadata={"kind": "pdf"})),
        NodeWithScore(node=TextNode(id_="b", text="Bach wrote six suites for cello.")),
        NodeWithScore(node=TextNode(id_="b", text="Bach wrote six suites for cello.")),  # a duplicate
        NodeWithScore(node=TextNode(id_="c", text="  ")),  # nothing to select on
    ]
    post = PersonaMemProfilePostprocessor(user_id="carol", selector=RelevanceSelector(encoder), k=5)
    kept = await post.apostprocess_nodes(nodes, query_bundle=QueryBundle("cello music"))
    assert [n.node.node_id for n in kept] == ["b", "a"]
    assert kept[1].node.metadata == {"kind": "pdf"}


def test_postprocessor_needs_a_query(filled: PersonaMem) -> None:
    post = PersonaMemProfilePostprocessor.from_memory(filled, "alice")
    with pytest.raises(ValueError, match="pass query_bundle or query_str"):
        post.postprocess_nodes([NodeWithScore(node=TextNode(text="x"))])


def test_postprocessor_refuses_another_users_node(filled: PersonaMem) -> None:
    bobs = PersonaMemRetriever(filled, "bob", k=1).retrieve("barbecue")
    post = PersonaMemProfilePostprocessor.from_memory(filled, "alice")
    with pytest.raises(ValueError, match="belongs to user 'bob', not 'alice'"):
        post.postprocess_nodes(bobs, query_str="barbecue")
    with pytest.raises(ValueError):
        PersonaMemProfilePostprocessor.from_memory(filled, "alice", k=0)


def test_postprocessor_takes_a_selector_by_name(filled: PersonaMem) -> None:
    post = PersonaMemProfilePostprocessor.from_memory(filled, "alice", k=1, selector="earliest")
    assert post.selector is filled.selector("earliest")  # built once per memory
    nodes = PersonaMemRetriever(filled, "alice", k=5).retrieve("cello")
    [kept] = post.postprocess_nodes(nodes, query_str="cello")
    assert kept.node.get_content(metadata_mode=MetadataMode.NONE) == "Booked a cello lesson."  # the dated one
    with pytest.raises(MethodError, match="unknown selector 'tfidf'"):
        PersonaMemProfilePostprocessor.from_memory(filled, "alice", selector="tfidf")


# -- a trained PURPLE checkpoint --------------------------------------------------------------------


async def test_purple_retriever_and_postprocessor_agree_with_the_memory(
    cook_mem: PersonaMem, purple: str
) -> None:
    query = "what should I cook tonight?"
    want = cook_mem.search("cook", query, k=5, method=purple)
    retriever = PersonaMemRetriever(cook_mem, "cook", k=5, method=purple)
    for nodes in (retriever.retrieve(query), await retriever.aretrieve(query)):
        assert [(n.node.node_id, n.score) for n in nodes] == [(h.record.id, h.score) for h in want]
    candidates = PersonaMemRetriever(cook_mem, "cook", k=20, method="hybrid").retrieve(query)
    assert len(candidates) == 8  # the profile is 5 of them
    post = PersonaMemProfilePostprocessor.from_memory(cook_mem, "cook", k=5, selector=purple)
    kept = post.postprocess_nodes(candidates, query_str=query)
    assert [n.node.node_id for n in kept] == [h.record.id for h in want]
    assert [n.score for n in kept] == pytest.approx([h.score for h in want])


# -- memory block ---------------------------------------------------------------------------------


async def test_block_stores_flushed_messages_and_returns_the_context(mem: PersonaMem) -> None:
    block = PersonaMemMemoryBlock(memory=mem, user_id="dana")
    messages = [
        ChatMessage(role=MessageRole.USER, content="My daughter is allergic to shellfish."),
        ChatMessage(role=MessageRole.ASSISTANT, content="Noted."),
        ChatMessage(role=MessageRole.USER, content="Noted."),  # the same words again: a turn of its own
        ChatMessage(role=MessageRole.ASSISTANT, content=""),  # nothing to remember
    ]
    await block.aput(messages, session_id="s1")
    records = mem.records("dana")
    assert [(r.text, r.metadata) for r in records] == [
        ("My daughter is allergic to shellfish.", {"role": "user", "position": 0, "session": "s1"}),
        ("Noted.", {"role": "assistant", "position": 1, "session": "s1"}),
        ("Noted.", {"role": "user", "position": 2, "session": "s1"}),
    ]
    assert all(r.kind is RecordKind.CONVERSATION and isinstance(r.timestamp, datetime) for r in records)

    query = "Can we have a seafood paella for dinner?"
    text = await block.aget([*messages, ChatMessage(role=MessageRole.USER, content=query)])
    assert text == mem.context("dana", query).text == block.context(query).text
    assert text.splitlines()[0] == "- My daughter is allergic to shellfish."  # the role is metadata only
    assert text.splitlines()[1:] == ["- Noted."]  # the same words twice are shown once
    assert await block.aget([]) == ""
    assert await block.aget([ChatMessage(role=MessageRole.ASSISTANT, content="Hello!")]) == ""


@pytest.mark.parametrize("pipeline", ["bm25", "earliest5", "purple"])
async def test_block_text_is_the_memorys_context(cook_mem: PersonaMem, purple: str, pipeline: str) -> None:
    method = purple if pipeline == "purple" else pipeline
    query = "what should I cook tonight?"
    asked = [ChatMessage(role=MessageRole.USER, content=query)]
    for budget in (None, 20):
        block = PersonaMemMemoryBlock(memory=cook_mem, user_id="cook", budget_tokens=budget, pipeline=method)
        want = cook_mem.context("cook", query, budget_tokens=budget, method=method)
        assert await block.aget(asked) == want.text
        assert want.tokens <= want.budget_tokens == (512 if budget is None else budget)
        assert want.text.splitlines() == [f"- {h.record.text}" for h in want.hits]
        if budget is not None and pipeline != "bm25":  # (bm25 finds one record: only it says "cook")
            assert want.dropped  # a small budget keeps fewer records, in the same order
    assert [h.record.id for h in block.context(query).hits] == [
        h.record.id for h in cook_mem.search("cook", query, k=len(want.hits), method=method)
    ]


async def test_block_with_a_config_and_with_the_memorys_pipeline(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    config = method_config("bm25").model_copy(update={"profile_k": 1, "budget_tokens": 64})
    with PersonaMem.open(tmp_path / "store", encoder=encoder, pipeline=config) as mem:
        mem.add_many([{"text": f} for f in FACTS["alice"]], user_id="alice")
        asked = [ChatMessage(role=MessageRole.USER, content="which instrument do I play?")]
        text = await PersonaMemMemoryBlock(memory=mem, user_id="alice").aget(asked)
        assert text == "- I play the cello in a string quartet."  # the memory's pipeline: bm25, one record
        other = method_config("dense").model_copy(update={"profile_k": 2})
        block = PersonaMemMemoryBlock(memory=mem, user_id="alice", pipeline=other)
        assert await block.aget(asked) == mem.context("alice", asked[0].content or "", method=other).text
        assert len((await block.aget(asked)).splitlines()) == 2


def test_block_settings_fail_when_it_is_made(filled: PersonaMem) -> None:
    with pytest.raises(ValidationError, match=r"unknown method 'fuzzy'; choose from: dense, bm25, hybrid"):
        PersonaMemMemoryBlock(memory=filled, user_id="alice", pipeline="fuzzy")
    with pytest.raises(ValidationError, match="method 'listwise' needs a frozen LLM"):
        PersonaMemMemoryBlock(memory=filled, user_id="alice", pipeline="listwise")
    with pytest.raises(ValidationError, match="budget_tokens"):
        PersonaMemMemoryBlock(memory=filled, user_id="alice", budget_tokens=-1)
    with pytest.raises(ValidationError, match="Extra inputs"):  # the profile's size is the pipeline's now
        PersonaMemMemoryBlock(memory=filled, user_id="alice", k=2)  # type: ignore[call-arg]


async def test_two_users_memories_in_one_process_never_mix(mem: PersonaMem, chat_store: AsyncEngine) -> None:
    said = {
        "erin": [
            "My dog Pepper is a border collie.",
            "I teach chemistry at a high school.",
            "I knit scarves.",
        ],
        "femi": [
            "My parrot Kiwi can whistle tunes.",
            "I drive a night bus in Lagos.",
            "I play chess online.",
        ],
    }
    memories = {
        user: _memory(PersonaMemMemoryBlock(memory=mem, user_id=user), chat_store, f"{user}-session")
        for user in said
    }
    for turn in range(3):  # interleaved, as two users chatting with one server at the same time
        for user, facts in said.items():
            await memories[user].aput(ChatMessage(role=MessageRole.USER, content=facts[turn]))
            await memories[user].aput(ChatMessage(role=MessageRole.ASSISTANT, content="Good to know!"))
    for memory in memories.values():
        await memory.aput(ChatMessage(role=MessageRole.USER, content="What pet do I have?"))

    for user, facts in said.items():
        other = said[next(u for u in said if u != user)]
        stored = {r.text for r in mem.records(user)}
        assert facts[0] in stored and not stored & set(other)
        everything = {m.content for m in await memories[user].aget_all(status=None)}  # queue and archive
        assert not everything & set(other)
        system, *history = await memories[user].aget()
        assert facts[0] not in {m.content for m in history}  # flushed out of the short-term queue...
        assert system.role == MessageRole.SYSTEM and facts[0] in (system.content or "")  # ...and recalled
        shown = "\n".join(m.content or "" for m in [system, *history])
        assert not any(fact in shown for fact in other)


async def test_long_term_memory_survives_reopening(
    tmp_path: Path, encoder: SentenceEncoder, chat_store: AsyncEngine
) -> None:
    path = tmp_path / "persist"
    with PersonaMem.open(path, encoder=encoder) as mem:
        memory = _memory(PersonaMemMemoryBlock(memory=mem, user_id="gus"), chat_store, "monday")
        for role, text in [
            (MessageRole.USER, "I am training for the Berlin marathon."),
            (MessageRole.ASSISTANT, "Sounds great!"),
            (MessageRole.USER, "Thanks, talk to you tomorrow."),
            (MessageRole.ASSISTANT, "Bye!"),
        ]:
            await memory.aput(ChatMessage(role=role, content=text))
        assert mem.count("gus") >= 2
    with PersonaMem.open(path, encoder=encoder) as mem:
        memory = _memory(PersonaMemMemoryBlock(memory=mem, user_id="gus"), chat_store, "tuesday")
        await memory.aput(ChatMessage(role=MessageRole.USER, content="Which race am I running?"))
        messages = await memory.aget()
        assert "- I am training for the Berlin marathon." in (messages[0].content or "")


@pytest.fixture
def logged(tmp_path: Path, encoder: SentenceEncoder) -> Iterator[PersonaMem]:
    """Alice's facts in a memory that logs every call, so the block's context calls get interaction ids."""
    config = PipelineConfig(log_interactions=True)
    with PersonaMem.open(tmp_path / "logged", encoder=encoder, pipeline=config) as memory:
        memory.add_many([{"text": fact, "kind": "knowledge"} for fact in FACTS["alice"]], user_id="alice")
        yield memory


async def test_block_reports_a_turns_reply_when_the_next_turn_reads_it(
    logged: PersonaMem, llm: TransformersLLM, chat_store: AsyncEngine
) -> None:
    block = PersonaMemMemoryBlock(memory=logged, user_id="alice")
    memory = Memory.from_defaults(  # a queue far from full: nothing flushes, the read alone reports
        session_id="alice-1", tokenizer_fn=str.split, memory_blocks=[block], async_engine=chat_store
    )
    engine = SimpleChatEngine.from_defaults(llm=PersonaMemLLM(llm, max_tokens=8), memory=memory)
    first = await engine.achat("Which instrument do I play?")
    [asked] = logged.inspection.interactions("alice")
    assert asked.feedback is None  # the reply exists, but no turn has read the block since
    await engine.achat("Where do I live?")
    asked, second = logged.inspection.interactions("alice")
    assert first.response.strip() and asked.feedback is not None
    assert (asked.query, asked.feedback.answer) == ("Which instrument do I play?", first.response)
    assert second.query == "Where do I live?" and second.feedback is None  # the final turn's, not yet


async def test_block_reports_a_flushed_reply_once_and_warns_when_it_cannot(logged: PersonaMem) -> None:
    block = PersonaMemMemoryBlock(memory=logged, user_id="alice")
    asked = ChatMessage(role=MessageRole.USER, content="Which instrument do I play?")
    assert "cello" in await block.aget([asked])
    await block.aput([asked, ChatMessage(role=MessageRole.ASSISTANT, content="")])  # no text: no reply yet
    [call] = logged.inspection.interactions("alice")
    assert call.feedback is None
    await block.aput([asked, ChatMessage(role=MessageRole.ASSISTANT, content="The cello.")])
    await block.aput([asked, ChatMessage(role=MessageRole.ASSISTANT, content="A flute?")])  # reported once
    [call] = logged.inspection.interactions("alice")
    assert call.feedback is not None and call.feedback.answer == "The cello."

    again = ChatMessage(role=MessageRole.USER, content="Where do I live?")
    await block.aget([again])
    logged.forget("alice")  # the logged call goes with the user, so its reply cannot be reported
    turn = [again, ChatMessage(role=MessageRole.ASSISTANT, content="In Lyon.")]
    with pytest.warns(PersonaMemWarning, match="could not report the reply of interaction .*no interaction"):
        assert await block.aget([*turn, ChatMessage(role=MessageRole.USER, content="And my pets?")]) == ""


# -- LLM and embedding --------------------------------------------------------------------------------


def test_llm_chats_through_the_models_chat_template(llm: TransformersLLM) -> None:
    wrapped = PersonaMemLLM(llm, max_tokens=8)
    assert wrapped.metadata.context_window == llm.context_window
    assert wrapped.metadata.num_output == 8
    assert wrapped.metadata.model_name == llm.name
    assert wrapped.metadata.is_chat_model
    turns = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    messages = [ChatMessage(role=t["role"], content=t["content"]) for t in turns]
    response = wrapped.chat(messages)
    want = llm.generate([turns], max_tokens=8)
    assert response.message.role == MessageRole.ASSISTANT
    assert response.message.content == want[0][0] and want[0][0]
    assert response.additional_kwargs == {
        "prompt_tokens": want.usage.prompt_tokens,
        "completion_tokens": want.usage.completion_tokens,
    }
    assert [c.message.content for c in wrapped.stream_chat(messages)] == [want[0][0]]
    shorter = wrapped.chat(messages, max_tokens=2)
    assert shorter.additional_kwargs["completion_tokens"] <= 2


async def test_llm_completes_plain_text_and_async(llm: TransformersLLM) -> None:
    wrapped = PersonaMemLLM(llm, max_tokens=6)
    prompt = "The capital of France is"
    want = llm.generate([prompt], max_tokens=6)[0][0]
    assert wrapped.complete(prompt).text == want
    assert [c.text for c in wrapped.stream_complete(prompt)] == [want]
    assert (await wrapped.acomplete(prompt)).text == want
    messages = [ChatMessage(role=MessageRole.USER, content="Say hi.")]
    assert (await wrapped.achat(messages)).message.content == wrapped.chat(messages).message.content
    assert len(wrapped.tokenizer_fn("The capital of France")) == llm.count_tokens("The capital of France")


async def test_embedding_is_the_encoders(encoder: SentenceEncoder) -> None:
    embedding = PersonaMemEmbedding(encoder)
    texts = ["I like tea.", "Telescopes need dark skies."]
    want = encoder.encode(texts)
    assert embedding.model_name == encoder.name
    assert np.allclose(embedding.get_text_embedding_batch(texts), want, atol=1e-6)
    assert np.allclose(await embedding.aget_query_embedding(texts[1]), want[1], atol=1e-6)


# -- packaging and the example --------------------------------------------------------------------


def test_missing_llama_index_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in sys.modules if n == "llama_index" or n.startswith("llama_index.")]:
        monkeypatch.setitem(sys.modules, name, None)  # makes `import llama_index...` fail
    monkeypatch.delitem(sys.modules, "personamem.adapters.llamaindex")
    with pytest.raises(MissingExtraError, match=r'pip install "personamem\[llamaindex\]"'):
        importlib.import_module("personamem.adapters.llamaindex")


@pytest.mark.slow
def test_example_keeps_each_users_memory_apart(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the example sets LlamaIndex's globals, as an application would; restore them afterwards
    for attribute in ("_llm", "_embed_model"):
        monkeypatch.setattr(Settings, attribute, getattr(Settings, attribute))
    monkeypatch.setattr(llama_index.core, "global_tokenizer", llama_index.core.global_tokenizer)
    example = runpy.run_path(str(EXAMPLE), run_name="example")
    example["main"]()
    out = capsys.readouterr().out
    facts: dict[str, list[str]] = example["FACTS"]
    sections = dict(part.split(" ==\n", 1) for part in out.split("== ")[1:])
    assert set(sections) == set(facts)
    for user, section in sections.items():
        used = section.split("records used:\n", 1)[1].split("\nQ: ")[0].splitlines()
        assert used and all(any(line.endswith(f) for f in facts[user]) for line in used)
        assert "feedback logged on the first answer: True" in section  # reported when the follow-up read it
        for other in set(facts) - {user}:
            assert not any(fact in section for fact in facts[other])
