from __future__ import annotations

import importlib
import runpy
import sys
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, ChatMessage, HumanMessage, SystemMessage
from langchain_core.prompts import PromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_tests.integration_tests import RetrieversIntegrationTests
from pydantic import ValidationError

from personamem import (
    Encoder,
    MissingExtraError,
    PersonaMem,
    PipelineConfig,
    Record,
    RecordKind,
    SentenceEncoder,
)
from personamem.adapters.langchain import (
    PersonaMemAnswerReporter,
    PersonaMemChatMessageHistory,
    PersonaMemCompressor,
    PersonaMemLLM,
    PersonaMemRetriever,
)
from personamem.datasets.jsonl import read_jsonl
from personamem.demo import demo_records_path
from personamem.errors import MethodError, PersonaMemWarning
from personamem.llm import Generations, Prompt, TransformersLLM
from personamem.methods import method_config
from personamem.profile import RelevanceSelector
from personamem.retrieval.base import Hit, ranked
from personamem.testing import FakeLLM

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langchain_chain.py"
PURPLE_EXAMPLE = EXAMPLE.with_name("langchain_purple.py")

ALICE = [
    "I'm vegetarian and allergic to peanuts.",
    "I play the cello in a community orchestra.",
    "My sister lives in Lisbon and I visit her every spring.",
    "I'm training for a half marathon in October.",
    "I prefer window seats on long flights.",
]
BOB = [
    "I love smoked brisket and pork ribs.",
    "I play the cello badly but with enthusiasm.",
    "I'm training for a triathlon next summer.",
]


@pytest.fixture(scope="module")
def shared_mem(tmp_path_factory: pytest.TempPathFactory, encoder: SentenceEncoder) -> Iterator[PersonaMem]:
    """Two users with overlapping topics, written once for the read-only tests of this module."""
    with PersonaMem.open(tmp_path_factory.mktemp("lc") / "store", encoder=encoder) as memory:
        memory.add_many([{"text": t, "kind": "knowledge"} for t in ALICE], user_id="alice")
        memory.add_many([{"text": t, "kind": "knowledge"} for t in BOB], user_id="bob")
        yield memory


def test_missing_langchain_core_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in sys.modules if n.split(".")[0] == "langchain_core"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "langchain_core", None)  # what an uninstalled package looks like
    monkeypatch.delitem(sys.modules, "personamem.adapters.langchain")
    with pytest.raises(MissingExtraError, match=r'pip install "personamem\[langchain\]"'):
        importlib.import_module("personamem.adapters.langchain")


# -- retriever ----------------------------------------------------------------------------------


class TestRetrieverStandard(RetrieversIntegrationTests):
    """LangChain's own conformance suite for retrievers."""

    @pytest.fixture(autouse=True)
    def _memory(self, shared_mem: PersonaMem) -> None:
        self.mem = shared_mem

    @property
    def retriever_constructor(self) -> type[PersonaMemRetriever]:
        return PersonaMemRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"memory": self.mem, "user_id": "alice", "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return "what should I cook for dinner?"


def test_documents_carry_the_record(mem: PersonaMem) -> None:
    record = mem.add(
        "alice",
        "I'm vegetarian.",
        kind="knowledge",
        category="food",
        timestamp="2024-05-01T12:30:00+00:00",
        metadata={"source": "onboarding", "score": "not ours"},
    )
    [doc] = PersonaMemRetriever(memory=mem, user_id="alice", k=1).invoke("what do I eat?")
    assert doc.page_content == record.text
    assert doc.id == record.id
    metadata = dict(doc.metadata)
    score = metadata.pop("score")
    # the search that found it, where the memory logs calls (its pipeline's log_interactions)
    logged = mem.inspection.interactions("alice")[0].id if mem.config.log_interactions else None
    assert metadata.pop("interaction_id", None) == logged
    assert score == mem.search("alice", "what do I eat?", k=1)[0].score  # ours wins over the record's own
    assert metadata == {
        "source": "onboarding",
        "record_id": record.id,
        "user_id": "alice",
        "kind": "knowledge",
        "rank": 1,
        "category": "food",
        "timestamp": "2024-05-01T12:30:00+00:00",
    }


@pytest.mark.parametrize("method", ["dense", "bm25", "hybrid"])
def test_retriever_never_returns_another_users_records(shared_mem: PersonaMem, method: str) -> None:
    bob_ids = {record.id for record in shared_mem.records("bob")}
    for query in ["cello", "training for a race", "brisket ribs", *BOB]:
        docs = PersonaMemRetriever(memory=shared_mem, user_id="alice", k=10, method=method).invoke(query)
        assert {doc.metadata["user_id"] for doc in docs} <= {"alice"}
        assert not {doc.id for doc in docs} & bob_ids
        assert not {doc.page_content for doc in docs} & set(BOB)


async def test_k_keyword_overrides_the_field(shared_mem: PersonaMem) -> None:
    retriever = PersonaMemRetriever(memory=shared_mem, user_id="alice", k=1)
    assert len(retriever.invoke("music", k=4)) == 4
    assert len(await retriever.ainvoke("music", k=3)) == 3
    assert len(retriever.invoke("music")) == 1


def test_bad_settings_fail_at_construction(shared_mem: PersonaMem) -> None:
    with pytest.raises(
        ValidationError, match=r"unknown method 'tfidf'; choose from: dense, bm25, hybrid, pbr"
    ):
        PersonaMemRetriever(memory=shared_mem, user_id="alice", method="tfidf")
    with pytest.raises(
        ValidationError,
        match=r"listwise.*purple:<folder>, pgret:<folder>, "
        r"pgret-rrf:<folder>, adapter:<name>, adapter-rrf:<name>, default, pipeline:<file>",
    ):
        PersonaMemRetriever(memory=shared_mem, user_id="alice", method="tfidf")
    with pytest.raises(ValidationError):
        PersonaMemRetriever(memory=shared_mem, user_id="alice", k=0)
    with pytest.raises(ValueError, match="k must be at least 1"):
        PersonaMemRetriever(memory=shared_mem, user_id="alice").invoke("music", k=0)
    with pytest.raises(ValidationError, match="method or pipeline, not both"):
        PersonaMemRetriever(
            memory=shared_mem, user_id="alice", method="bm25", pipeline=method_config("dense")
        )


def test_what_cannot_run_fails_at_construction(shared_mem: PersonaMem, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="method 'listwise' needs a frozen LLM"):  # no LLM configured
        PersonaMemRetriever(memory=shared_mem, user_id="alice", method="listwise")
    with pytest.raises(ValidationError, match="needs a frozen LLM"):
        PersonaMemRetriever(memory=shared_mem, user_id="alice", pipeline=method_config("pbr"))
    with pytest.raises(ValidationError, match=r"no-such\.toml"):
        PersonaMemRetriever(
            memory=shared_mem, user_id="alice", method=f"pipeline:{tmp_path / 'no-such.toml'}"
        )
    with pytest.raises(MethodError, match="unknown selector 'tfidf'"):
        PersonaMemCompressor.from_memory(shared_mem, "alice", selector="tfidf")
    with pytest.raises(MethodError, match="needs a frozen LLM"):
        PersonaMemCompressor.from_memory(shared_mem, "alice", selector="listwise")


@pytest.mark.parametrize("method", ["hybrid", "earliest5", "pbr-no-prf"])
def test_a_method_gives_what_memory_search_gives(shared_mem: PersonaMem, method: str) -> None:
    query = "what should I cook for dinner?"
    docs = PersonaMemRetriever(memory=shared_mem, user_id="alice", k=3, method=method).invoke(query)
    hits = shared_mem.search("alice", query, k=3, method=method)
    assert [(doc.id, doc.metadata["score"], doc.metadata["rank"]) for doc in docs] == [
        (hit.record.id, hit.score, hit.rank) for hit in hits
    ]


async def test_a_pipeline_config_searches_through_that_pipeline(shared_mem: PersonaMem) -> None:
    config = method_config("earliest5").model_copy(update={"profile_k": 2, "first_stage": "bm25"})
    retriever = PersonaMemRetriever(memory=shared_mem, user_id="alice", k=3, pipeline=config)
    query = "training for a race"
    want = [hit.record.id for hit in shared_mem.pipeline(config).search("alice", query, 3)]
    assert [doc.id for doc in retriever.invoke(query)] == want
    assert [doc.id for doc in await retriever.ainvoke(query)] == want
    assert want != [hit.record.id for hit in shared_mem.search("alice", query, k=3)]  # not the default


def test_unknown_user_gets_no_documents(shared_mem: PersonaMem) -> None:
    assert PersonaMemRetriever(memory=shared_mem, user_id="carol").invoke("cello") == []


# -- compressor ---------------------------------------------------------------------------------


class ReversingSelector:
    """Keeps the last ``k`` candidates, last first, and remembers what it was given."""

    def __init__(self) -> None:
        self.seen: list[Record] = []

    def select(self, user_id: str, query: str, candidates: Sequence[Record], k: int) -> list[Hit]:
        self.seen = list(candidates)
        return ranked([(record, float(-i)) for i, record in enumerate(reversed(candidates))][:k])


def _docs() -> list[Document]:
    return [
        Document("I love hiking in the Alps.", id="d1", metadata={"source": "wiki", "tags": ["x"]}),
        Document("I'm vegetarian.", metadata={"record_id": "r2", "kind": "knowledge"}),
        Document(
            "I play chess on Sundays.", metadata={"timestamp": "2024-01-02T03:04:05", "category": "hobby"}
        ),
    ]


def test_compressor_follows_the_selector_and_k() -> None:
    selector = ReversingSelector()
    docs = _docs()
    out = PersonaMemCompressor(user_id="alice", selector=selector, k=2).compress_documents(docs, "q")
    assert [doc.page_content for doc in out] == [docs[2].page_content, docs[1].page_content]
    assert [doc.metadata["profile_rank"] for doc in out] == [1, 2]
    assert [doc.metadata["profile_score"] for doc in out] == [0.0, -1.0]


def test_compressor_builds_records_from_documents() -> None:
    selector = ReversingSelector()
    PersonaMemCompressor(user_id="alice", selector=selector).compress_documents(_docs(), "q")
    first, second, third = selector.seen
    assert {record.user_id for record in selector.seen} == {"alice"}
    assert (first.id, first.metadata) == ("d1", {"source": "wiki"})  # the list is no JSON scalar
    assert (second.id, second.kind) == ("r2", RecordKind.KNOWLEDGE)
    assert len(third.id) == 32  # content hash
    assert third.timestamp == datetime(2024, 1, 2, 3, 4, 5)
    assert third.category == "hobby"


def test_compressor_keeps_metadata_and_leaves_inputs_alone() -> None:
    docs = _docs()
    out = PersonaMemCompressor(user_id="alice", selector=ReversingSelector(), k=3).compress_documents(
        docs, "q"
    )
    by_content = {doc.page_content: doc for doc in out}
    for doc in docs:
        assert "profile_rank" not in doc.metadata
        kept = by_content[doc.page_content]
        assert {key: kept.metadata[key] for key in doc.metadata} == doc.metadata
        assert kept.id == doc.id


def test_compressor_drops_duplicates_and_empty_documents() -> None:
    selector = ReversingSelector()
    docs = [Document("same", id="a"), Document("same again", id="a"), Document("   "), Document("other")]
    out = PersonaMemCompressor(user_id="alice", selector=selector, k=4).compress_documents(docs, "q")
    assert [record.text for record in selector.seen] == ["same", "other"]
    assert [doc.page_content for doc in out] == ["other", "same"]


def test_compressor_refuses_another_users_documents(shared_mem: PersonaMem) -> None:
    bobs = PersonaMemRetriever(memory=shared_mem, user_id="bob").invoke("cello")
    compressor = PersonaMemCompressor.from_memory(shared_mem, "alice")
    with pytest.raises(ValueError, match="bob"):
        compressor.compress_documents(bobs, "cello")


def test_compressor_ranks_by_relevance_by_default(shared_mem: PersonaMem) -> None:
    compressor = PersonaMemCompressor.from_memory(shared_mem, "alice", k=2)
    assert isinstance(compressor.selector, RelevanceSelector)
    docs = PersonaMemRetriever(memory=shared_mem, user_id="alice", k=5).invoke("music and concerts")
    assert docs[0].page_content != ALICE[0]
    out = compressor.compress_documents(docs, "what should I eat? I have food allergies")
    assert len(out) == 2
    assert out[0].page_content == "I'm vegetarian and allergic to peanuts."
    assert out[0].metadata["profile_score"] >= out[1].metadata["profile_score"]
    assert out[0].metadata["user_id"] == "alice"  # the retriever's metadata rides along


def test_compressor_takes_a_selector_by_name(shared_mem: PersonaMem) -> None:
    compressor = PersonaMemCompressor.from_memory(shared_mem, "alice", k=2, selector="earliest")
    assert compressor.selector is shared_mem.selector("earliest")  # built once per memory
    docs = _docs()  # only the third has a timestamp: it is the earliest, then the first given
    assert [doc.page_content for doc in compressor.compress_documents(docs, "q")] == [
        docs[2].page_content,
        docs[0].page_content,
    ]


# -- a trained PURPLE checkpoint ----------------------------------------------------------------


async def test_purple_retriever_gives_the_memorys_purple_ranking(cook_mem: PersonaMem, purple: str) -> None:
    query = "what should I cook tonight?"
    retriever = PersonaMemRetriever(memory=cook_mem, user_id="cook", k=5, method=purple)
    want = cook_mem.search("cook", query, k=5, method=purple)
    for docs in (retriever.invoke(query), await retriever.ainvoke(query)):
        assert [(doc.id, doc.metadata["score"], doc.metadata["rank"]) for doc in docs] == [
            (hit.record.id, hit.score, hit.rank) for hit in want
        ]
    assert {doc.metadata["user_id"] for doc in retriever.invoke(query, k=20)} == {"cook"}
    candidates = [hit.record for hit in cook_mem.search("cook", query, k=20, method="hybrid")]
    assert len(candidates) == 8  # the profile is 5 of them, by PURPLE's propensity
    profile = cook_mem.selector(purple).select("cook", query, candidates, 5)
    assert [hit.record.id for hit in profile] == [hit.record.id for hit in want]


def test_purple_compressor_picks_the_same_profile(cook_mem: PersonaMem, purple: str) -> None:
    query = "what should I cook tonight?"
    candidates = PersonaMemRetriever(memory=cook_mem, user_id="cook", k=20, method="hybrid")
    compressor = PersonaMemCompressor.from_memory(cook_mem, "cook", k=5, selector=purple)
    assert compressor.selector is cook_mem.selector(purple)  # the checkpoint is loaded once
    chosen = compressor.compress_documents(candidates.invoke(query), query)
    want = cook_mem.search("cook", query, k=5, method=purple)
    assert [doc.id for doc in chosen] == [hit.record.id for hit in want]
    assert [doc.metadata["profile_score"] for doc in chosen] == pytest.approx([hit.score for hit in want])
    assert [doc.metadata["profile_rank"] for doc in chosen] == [1, 2, 3, 4, 5]


def test_a_missing_checkpoint_fails_at_construction(cook_mem: PersonaMem, tmp_path: Path) -> None:
    from personamem.errors import CheckpointError

    with pytest.raises(CheckpointError):
        PersonaMemRetriever(memory=cook_mem, user_id="cook", method=f"purple:{tmp_path / 'none'}")
    with pytest.raises(CheckpointError):
        PersonaMemCompressor.from_memory(cook_mem, "cook", selector=f"purple:{tmp_path / 'none'}")


class EncoderEmbeddings(Embeddings):
    """Our encoder as LangChain embeddings, to feed a retriever that is not ours."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.encoder.encode(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


async def test_compressor_on_another_frameworks_retriever(encoder: SentenceEncoder) -> None:
    store = InMemoryVectorStore(EncoderEmbeddings(encoder))
    store.add_texts(ALICE, metadatas=[{"source": "notes", "line": i} for i in range(len(ALICE))])
    docs = store.as_retriever(search_kwargs={"k": 5}).invoke("trip abroad")
    compressor = PersonaMemCompressor(user_id="alice", selector=RelevanceSelector(encoder), k=2)
    out = await compressor.acompress_documents(docs, "where do I travel each year?")
    assert out[0].page_content == "My sister lives in Lisbon and I visit her every spring."
    assert out[0].metadata["source"] == "notes"
    assert out[0].id in {doc.id for doc in docs}
    assert [doc.metadata["profile_rank"] for doc in out] == [1, 2]


# -- chat history -------------------------------------------------------------------------------


def test_history_round_trip(mem: PersonaMem) -> None:
    history = PersonaMemChatMessageHistory(mem, "alice", "s1")
    assert history.messages == []
    history.add_messages(
        [
            SystemMessage("Be brief."),
            HumanMessage("I'm moving to Porto next month.", id="m1"),
            AIMessage("Congratulations!"),
            ChatMessage(role="critic", content="Too short."),
        ]
    )
    history.add_user_message("Any tips?")
    messages = history.messages
    assert [(type(m), m.text) for m in messages] == [
        (SystemMessage, "Be brief."),
        (HumanMessage, "I'm moving to Porto next month."),
        (AIMessage, "Congratulations!"),
        (ChatMessage, "Too short."),
        (HumanMessage, "Any tips?"),
    ]
    assert isinstance(messages[3], ChatMessage) and messages[3].role == "critic"
    assert messages[1].id == "m1"
    records = mem.records("alice")
    assert [m.id for m in messages] == [r.id for r in records]
    assert all(r.kind is RecordKind.CONVERSATION and r.timestamp is not None for r in records)
    assert [r.metadata for r in records] == [
        {"role": role, "session_id": "s1", "position": i}
        for i, role in enumerate(["system", "user", "assistant", "critic", "user"])  # one word per author
    ]


def test_history_sessions_and_users_are_kept_apart(mem: PersonaMem) -> None:
    histories = {
        (user, session): PersonaMemChatMessageHistory(mem, user, session)
        for user in ("alice", "bob")
        for session in ("s1", "s2")
    }
    for (user, session), history in histories.items():
        history.add_messages([HumanMessage(f"{user} in {session}"), AIMessage(f"reply to {user} {session}")])
    mem.add("alice", "A note that is no chat turn.", metadata={"session_id": "s1"})
    for (user, session), history in histories.items():
        assert [m.text for m in history.messages] == [f"{user} in {session}", f"reply to {user} {session}"]


def test_history_survives_reopening(tmp_path: Path, encoder: SentenceEncoder) -> None:
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as memory:
        PersonaMemChatMessageHistory(memory, "alice", "s1").add_messages(
            [HumanMessage("Remember that I hate cilantro."), AIMessage("Noted.")]
        )
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as memory:
        history = PersonaMemChatMessageHistory(memory, "alice", "s1")
        assert [m.text for m in history.messages] == ["Remember that I hate cilantro.", "Noted."]
        history.add_ai_message("Still noted.")
        assert [r.metadata["position"] for r in memory.records("alice")] == [0, 1, 2]


def test_history_turns_become_searchable(mem: PersonaMem) -> None:
    PersonaMemChatMessageHistory(mem, "alice", "s1").add_messages(
        [HumanMessage("My daughter is allergic to shellfish."), AIMessage("I'll keep that in mind.")]
    )
    PersonaMemChatMessageHistory(mem, "bob", "s1").add_messages([HumanMessage("I adore shellfish.")])
    [doc] = PersonaMemRetriever(memory=mem, user_id="alice", k=1).invoke("seafood allergy")
    assert doc.page_content == "My daughter is allergic to shellfish."
    assert doc.metadata["role"] == "user"
    assert doc.metadata["session_id"] == "s1"
    assert doc.metadata["kind"] == "conversation"


def test_history_refuses_textless_messages_before_writing(mem: PersonaMem) -> None:
    history = PersonaMemChatMessageHistory(mem, "alice", "s1")
    empty = AIMessage("", tool_calls=[{"name": "lookup", "args": {}, "id": "call-1"}])
    with pytest.raises(ValueError, match="message 1 has no text"):
        history.add_messages([HumanMessage("hi"), empty])
    assert mem.count("alice") == 0


def test_history_clear_deletes_only_its_session(mem: PersonaMem) -> None:
    history = PersonaMemChatMessageHistory(mem, "alice", "s1")
    history.add_user_message("hello from the first session")
    other = PersonaMemChatMessageHistory(mem, "alice", "s2")
    other.add_user_message("hello from the second session")
    mem.add("alice", "I like tea")
    history.clear()
    assert history.messages == []
    assert [m.text for m in other.messages] == ["hello from the second session"]
    assert sorted(r.text for r in mem.records("alice")) == ["I like tea", "hello from the second session"]
    history.add_user_message("a fresh start")  # positions restart in a cleared session
    assert [m.text for m in history.messages] == ["a fresh start"]


async def test_history_async_defaults(mem: PersonaMem) -> None:
    history = PersonaMemChatMessageHistory(mem, "alice", "s1")
    await history.aadd_messages([HumanMessage("async hello")])
    assert [m.text for m in await history.aget_messages()] == ["async hello"]


# -- LLM ----------------------------------------------------------------------------------------


class RecordingLLM(FakeLLM):
    """The fake LLM, remembering each generate call's prompts and options."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[list[Prompt], dict[str, Any]]] = []

    def generate(self, prompts: Sequence[Prompt], **options: Any) -> Generations:
        self.requests.append((list(prompts), options))
        return super().generate(prompts, **options)


def test_llm_sends_one_user_message_with_limits() -> None:
    fake = RecordingLLM()
    llm = PersonaMemLLM(llm=fake, max_tokens=5)
    assert llm.invoke("say: one two STOP three", stop=["STOP"]) == "user: say: one two "
    assert fake.requests == [
        ([[{"role": "user", "content": "say: one two STOP three"}]], {"max_tokens": 5, "stop": ["STOP"]})
    ]


def test_llm_raw_prompts_and_call_options() -> None:
    fake = RecordingLLM()
    llm = PersonaMemLLM(llm=fake, chat=False)
    assert llm.invoke("first line\nsecond line", temperature=0.7, seed=3).startswith("second line ")
    assert fake.requests == [
        (["first line\nsecond line"], {"max_tokens": 64, "temperature": 0.7, "seed": 3, "stop": ()})
    ]
    assert llm._llm_type == "personamem"


# -- answer reporter ----------------------------------------------------------------------------


@pytest.fixture
def logged(tmp_path: Path, encoder: SentenceEncoder) -> Iterator[PersonaMem]:
    """Alice's records in a memory that logs every call, so retrievals carry interaction ids."""
    config = PipelineConfig(log_interactions=True)
    with PersonaMem.open(tmp_path / "store", encoder=encoder, pipeline=config) as memory:
        memory.add_many([{"text": t, "kind": "knowledge"} for t in ALICE], user_id="alice")
        yield memory


def _answer_chain(memory: PersonaMem, llm: TransformersLLM) -> Runnable[str, str]:
    """Question in, the small local LLM's answer out, from two of alice's retrieved records."""
    retriever = PersonaMemRetriever(memory=memory, user_id="alice", k=2)
    context = retriever | RunnableLambda(lambda docs: "\n".join(doc.page_content for doc in docs))
    prompt = PromptTemplate.from_template("What you know about me:\n{context}\n\nAnswer briefly: {question}")
    return (
        {"context": context, "question": RunnablePassthrough()}
        | prompt
        | PersonaMemLLM(llm=llm, max_tokens=8)
    )


def _forgot_every_run(reporter: PersonaMemAnswerReporter) -> bool:
    return not reporter._roots and not reporter._root_of


async def test_reporter_posts_the_chains_answer_on_the_retrieval_it_used(
    logged: PersonaMem, llm: TransformersLLM
) -> None:
    chain = _answer_chain(logged, llm)
    reporter = PersonaMemAnswerReporter(logged)
    answer = chain.invoke("what should I cook tonight?", config={"callbacks": [reporter]})
    later = await chain.ainvoke("which instrument do I play?", config={"callbacks": [reporter]})
    assert answer.strip() and later.strip()  # the local LLM answered: there was something to report
    first, second = logged.inspection.interactions("alice")
    assert (first.call, first.query) == ("search", "what should I cook tonight?")
    assert first.feedback is not None and first.feedback.answer == answer
    assert second.feedback is not None and second.feedback.answer == later  # from LangChain's executor
    assert (first.feedback.rating, first.feedback.used_record_ids) == (None, None)  # an answer alone
    assert _forgot_every_run(reporter)
    with pytest.raises(TypeError, match="a PersonaMem or a Client"):
        PersonaMemAnswerReporter(object())  # type: ignore[arg-type]


def test_a_chain_that_fails_reports_nothing(logged: PersonaMem, llm: TransformersLLM) -> None:
    def fail(answer: str) -> str:
        raise RuntimeError(f"the application refused {answer!r}")

    reporter = PersonaMemAnswerReporter(logged)
    failing = _answer_chain(logged, llm) | RunnableLambda(fail)
    with pytest.raises(RuntimeError, match="the application refused"):
        failing.invoke("what should I cook tonight?", config={"callbacks": [reporter]})
    [asked] = logged.inspection.interactions("alice")
    assert asked.feedback is None  # the LLM answered, but the run that used it failed
    assert _forgot_every_run(reporter)


def test_a_failed_report_warns_and_the_chain_still_answers(logged: PersonaMem, llm: TransformersLLM) -> None:
    reporter = PersonaMemAnswerReporter(logged.tenant("elsewhere"))  # another tenant: not its interaction
    with pytest.warns(PersonaMemWarning, match="could not report the answer of interaction .*no interaction"):
        answer = _answer_chain(logged, llm).invoke("what should I cook?", config={"callbacks": [reporter]})
    assert answer.strip()
    [asked] = logged.inspection.interactions("alice")
    assert asked.feedback is None
    assert _forgot_every_run(reporter)


# -- example ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_example_chain_prints_each_users_records(capsys: pytest.CaptureFixture[str]) -> None:
    example = runpy.run_path(str(EXAMPLE))
    example["main"]()
    out = capsys.readouterr().out
    maya, tom = out.split("== tom:")
    assert "== maya:" in maya
    for section, own, other in [(maya, "maya", "tom"), (tom, "tom", "maya")]:
        records = section.split("records used:")[1]
        assert "answer:" in section
        assert "feedback logged on 1 of 1 calls" in section  # the reporter posted the answer
        assert sum(text in records for text in example["USERS"][own]) == 2
        assert not any(text in records for text in example["USERS"][other])


@pytest.mark.slow
def test_purple_example_trains_and_answers_from_each_users_records(
    capsys: pytest.CaptureFixture[str],
) -> None:
    example = runpy.run_path(str(PURPLE_EXAMPLE))
    main = example["main"]
    shorter = example["TRAINING"].model_copy(update={"steps": 1, "batch_size": 2, "samples": 2})
    # one step on two questions, validated on one, is enough to check the wiring
    main.__globals__.update(
        TRAINING=shorter, TRAIN=example["TRAIN"][:2], VALIDATION=example["VALIDATION"][:1]
    )
    main()
    out = capsys.readouterr().out
    assert "trained 1 steps" in out and "validation reward" in out and "training PURPLE on 2 questions" in out
    demo = {
        user: {r.text for r in read_jsonl(demo_records_path()) if r.user_id == user}
        for user in ("maya", "omar")
    }
    sections = dict(part.split(": ", 1) for part in out.split("== ")[1:])
    assert set(sections) == set(demo)
    for user, section in sections.items():
        assert "answer: " in section
        used = section.split("records used (PURPLE's choice):\n")[1].split("for comparison")[0].splitlines()
        assert len(used) == 3 and all(line.split("] ", 1)[1] in demo[user] for line in used)
