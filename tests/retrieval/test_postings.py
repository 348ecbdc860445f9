"""The growing BM25 postings score and select exactly as a bm25s index of the same documents."""

from __future__ import annotations

import json
import random
from importlib import resources

import numpy as np
import pytest

from personamem.retrieval.bm25 import _bm25s, tokenize
from personamem.retrieval.postings import Postings


def _texts() -> list[str]:
    """Sentences from the packaged data, and word soups drawn from them (repeats, long and short ones)."""
    data = resources.files("personamem") / "data"
    lines = [
        json.loads(line)
        for name in ("demo.jsonl", "conflict_pairs.jsonl")
        for line in (data / name).read_text().splitlines()
    ]
    sentences = [line.get("text") or line.get("newer") for line in lines]
    words = " ".join(sentences).split()
    rng = random.Random(7)
    soups = [" ".join(rng.choices(words, k=rng.choice([1, 3, 8, 20, 60]))) for _ in range(400)]
    return [*sentences, *soups, "ok", "1", "the and of"]  # the last three hold no searchable term


def _bm25s_index(documents: list[list[str]]):
    index = _bm25s().BM25()
    index.index(documents, show_progress=False)
    return index


@pytest.mark.parametrize("grown", [False, True])
def test_scores_and_top_k_are_bm25s_bit_for_bit(grown: bool) -> None:
    documents = tokenize(_texts())
    if grown:  # appended in uneven steps, as writes come: the same postings as built at once
        postings = Postings.of(documents[:1])
        for start, stop in [(1, 2), (2, 50), (50, 51), (51, 300), (300, len(documents))]:
            postings = postings.extended(documents[start:stop])
    else:
        postings = Postings.of(documents)
    reference = _bm25s_index(documents)
    queries = tokenize([*_texts()[:60], "vegan honey race", "trail trail trail", "nothing matches zzqx"])
    for query in queries:
        expected = (
            np.asarray(reference.get_scores(query), np.float32)
            if any(term in reference.vocab_dict for term in query)
            else np.zeros(len(documents), np.float32)
        )
        assert np.array_equal(postings.scores(query), expected), query
        docs, scores = reference.retrieve([query], k=25, show_progress=False, n_threads=1)
        rows, mine = postings.top(query, 25)
        assert rows.tolist() == docs[0].tolist() and np.array_equal(mine, scores[0]), query


def test_extending_leaves_the_postings_it_came_from_as_they_were() -> None:
    documents = tokenize(_texts())
    before = Postings.of(documents[:100])
    query = tokenize(["vegan trail race Kyoto"])[0]
    scores = before.scores(query)
    before.extended(documents[100:])
    assert len(before) == 100 and np.array_equal(before.scores(query), scores)
