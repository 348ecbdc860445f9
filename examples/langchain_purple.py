"""Train a PURPLE profile selector for a few steps, then let it pick each user's records in a LangChain chain.

PURPLE learns which of a user's records to show the LLM: its reward is the frozen LLM's
log-likelihood of the user's true answer given the chosen records and the question. Here it trains on
a handful of (user, question, answer) triples written for the demo users of
``personamem/data/demo.jsonl`` (maya and omar; lena is held out for validation), with the real local
LLM (SmolLM2-135M-Instruct) as the reward, and the checkpoint is then used by name in a chain:
``PersonaMemRetriever(method="purple:<checkpoint>")`` → prompt → ``PersonaMemLLM``.

Runs offline in a minute or two on two CPU cores (``python examples/langchain_purple.py``). Five
steps on ten questions show the wiring, not a trained selector: its picks are still close to those
of its random initialization, so the output also prints hybrid search's top 3 for comparison. Train
with ``personamem train purple`` on a benchmark (hundreds of steps) for a selector worth using.
"""

from __future__ import annotations

import tempfile
import time
from operator import itemgetter
from pathlib import Path

from langchain_core.documents import Document
from langchain_core.prompts import PromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda, RunnableParallel, RunnablePassthrough

from personamem import PersonaMem, SentenceEncoder, default_encoder
from personamem.adapters.langchain import PersonaMemLLM, PersonaMemRetriever
from personamem.datasets.jsonl import read_jsonl
from personamem.demo import demo_records_path
from personamem.llm import TransformersLLM
from personamem.profile.purple import PurpleConfig
from personamem.trainers.purple import PurpleTrainConfig, train_purple
from personamem.trainers.purple.data import ProfileExample
from personamem.trainers.purple.reward import LLMReward

# (user, question, the user's true answer): each answer rests on one or two of the user's records
TRAIN = [
    ("maya", "What diet do I follow?", "Vegan, and no honey either."),
    ("maya", "Which race am I training for?", "A 50k trail race in the Alps."),
    ("maya", "Where do I live?", "In Lyon, with my cat Miso."),
    ("maya", "How do I like to travel?", "On a tight budget, by train."),
    ("maya", "Which language am I learning?", "Japanese."),
    ("omar", "What do I cook on weekends?", "Smoked brisket and lamb ribs."),
    ("omar", "What is my job?", "I'm a dentist in Toronto."),
    ("omar", "Which telescope do I have?", "A 10-inch Dobsonian."),
    ("omar", "What game do I play at night?", "Online blitz chess."),
    ("omar", "Why do I avoid cruises?", "I get seasick."),
]
VALIDATION = [
    ("lena", "What can't I eat?", "Tree nuts; I'm pescatarian."),
    ("lena", "Which instrument do I play?", "The cello."),
    ("lena", "How old are my kids?", "4 and 7."),
    ("lena", "What grows in my garden?", "Basil and zucchini."),
    ("lena", "Where would I like a beach holiday?", "A quiet beach town in Portugal."),
]
USERS = ["maya", "omar"]
QUESTION = "What should I cook for dinner tonight?"  # asked in the chain, never trained on
TRAINING = PurpleTrainConfig(
    model=PurpleConfig(layers=1, dropout=0.0),
    k=3,  # the chain shows three records
    batch_size=4,
    samples=4,
    lr=1e-3,
    steps=5,
    validate_every=5,
)
PROMPT = PromptTemplate.from_template(
    "What you know about me:\n{context}\n\nGiven that, answer in one or two sentences: {question}"
)


def examples(mem: PersonaMem, triples: list[tuple[str, str, str]]) -> list[ProfileExample]:
    """A training example per triple, its candidates the user's top 20 by hybrid search.

    The same candidates the ``purple:<folder>`` method picks its profile from (as
    ``personamem.trainers.purple.data.build_examples`` does for a benchmark).
    """
    return [
        ProfileExample(
            f"{user}-{i}",
            user,
            question,
            answer,
            tuple(hit.record for hit in mem.search(user, question, k=20, method="hybrid")),
        )
        for i, (user, question, answer) in enumerate(triples)
    ]


def format_docs(docs: list[Document]) -> str:
    return "\n".join(f"- {doc.page_content}" for doc in docs)


def build_chain(retriever: PersonaMemRetriever, llm: PersonaMemLLM) -> Runnable:
    """Answer from the selected records and return those records too, so the answer can be checked."""
    context = RunnableLambda(itemgetter("docs")) | format_docs
    answer = {"context": context, "question": itemgetter("question")} | PROMPT | llm
    return RunnableParallel(docs=retriever, question=RunnablePassthrough()).assign(answer=answer)


def train(mem: PersonaMem, encoder: SentenceEncoder, frozen: TransformersLLM, out: Path) -> Path:
    """Train PURPLE against the frozen LLM's answer log-likelihood; returns the best checkpoint."""
    reward = LLMReward(frozen)
    started = time.perf_counter()
    result = train_purple(examples(mem, TRAIN), examples(mem, VALIDATION), encoder, reward, TRAINING, out)
    for row in result.history:
        if "loss" in row:
            print(f"  step {row['step']}: mean reward {row['reward_mean']:.2f}, best {row['reward_max']:.2f}")
        else:
            print(f"  step {row['step']}: validation reward {row['validation']:.2f} (held-out user lena)")
    print(
        f"trained {TRAINING.steps} steps in {time.perf_counter() - started:.0f}s: {reward.scored} profiles "
        f"scored by the LLM, {reward.hits} from its cache; best step {result.best_step}\n"
    )
    return result.best


def main() -> None:
    encoder = default_encoder()
    frozen = TransformersLLM.default()
    llm = PersonaMemLLM(llm=frozen, max_tokens=48)
    with (
        tempfile.TemporaryDirectory() as folder,
        PersonaMem.open(Path(folder) / "store", encoder=encoder) as mem,
    ):
        mem.add_many(read_jsonl(demo_records_path()))
        print(f"training PURPLE on {len(TRAIN)} questions of {', '.join(USERS)}")
        checkpoint = train(mem, encoder, frozen, Path(folder) / "purple")
        for user in USERS:
            retriever = PersonaMemRetriever(memory=mem, user_id=user, k=3, method=f"purple:{checkpoint}")
            result = build_chain(retriever, llm).invoke(QUESTION)
            print(f"== {user}: {QUESTION}")
            print(f"answer: {result['answer'].strip()}")
            print("records used (PURPLE's choice):")
            for doc in result["docs"]:
                print(f"  {doc.metadata['rank']}. [{doc.metadata['score']:+.2f}] {doc.page_content}")
            print("for comparison, hybrid search's top 3 (PURPLE's candidates come from its top 20):")
            for hit in mem.search(user, QUESTION, k=3, method="hybrid"):
                print(f"  {hit.rank}. {hit.record.text}")
            print()


if __name__ == "__main__":
    main()
