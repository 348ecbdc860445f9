"""A BM25 index that grows by appending documents, scoring exactly as bm25s does.

bm25s computes every (term, document) score when it indexes, with the corpus's IDF and mean length
baked in, so one more document means indexing the whole user again: 0.1-0.4 s at 5,000-20,000
records, paid by the first search after every write (``bench/search_after_write.py``). These
postings keep what the scores are made of (per term: the documents holding it and how often; per
document: its length) and score a query's terms when asked, with bm25s's "lucene" variant and its
dtypes (the IDF in float32, the term-frequency part in float64, each term's scores cast to float32
and summed in the query's order), so the scores are bit-identical to a bm25s index of the same
documents (``tests/retrieval/test_postings.py`` holds them to it) and the default's order does not
move. Top ``k`` is bm25s's own selection, so ties fall as they did.

A :class:`Postings` never changes once made: :meth:`Postings.extended` returns a new one that shares
the arrays of every term the new documents do not hold, so a reader of the old one is never
disturbed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Postings"]

K1 = 1.5  # bm25s's defaults, which the index built with bm25s used
B = 0.75


@dataclass(frozen=True)
class Postings:
    """Per term, the documents holding it and its count in each; per document, its length in terms."""

    terms: dict[str, tuple[np.ndarray, np.ndarray]]
    """Term -> (document rows, int32; the term's count in each, float32), rows ascending."""
    lengths: np.ndarray
    """Each document's count of terms (int64), empty documents included, as bm25s's mean length."""

    @classmethod
    def of(cls, documents: Sequence[Sequence[str]]) -> Postings:
        """The postings of ``documents``' terms (each document a list of terms, as ``tokenize`` gives).

        Counted in numpy, as one sort of (term, document) pairs, rather than per document as
        :meth:`extended` does: 0.7 / 6 / 47 ms at 100 / 1,000 / 5,000 LoCoMo turns, where bm25s's
        index took 1.9 / 17 / 85. Each term's arrays are views of two shared ones.
        """
        n = len(documents)
        lengths = np.fromiter((len(terms) for terms in documents), np.int64, n)
        vocabulary: dict[str, int] = {}
        ids = np.fromiter(
            (vocabulary.setdefault(term, len(vocabulary)) for terms in documents for term in terms),
            np.int64,
            int(lengths.sum()),
        )
        if not len(ids):
            return cls({}, lengths)
        pairs, counts = np.unique(
            ids * n + np.repeat(np.arange(n, dtype=np.int64), lengths), return_counts=True
        )
        term_of, rows = np.divmod(pairs, n)  # sorted by term, then by document
        starts = np.flatnonzero(np.diff(term_of, prepend=-1))
        ends = [*starts[1:].tolist(), len(pairs)]
        rows, tf = rows.astype(np.int32), counts.astype(np.float32)
        names = list(vocabulary)
        return cls(
            {
                names[term]: (rows[start:end], tf[start:end])
                for term, start, end in zip(term_of[starts].tolist(), starts.tolist(), ends, strict=True)
            },
            lengths,
        )

    def __len__(self) -> int:
        return len(self.lengths)

    def extended(self, documents: Sequence[Sequence[str]]) -> Postings:
        """These postings with ``documents`` appended as the next rows; ``self`` is left as it is."""
        start = len(self.lengths)
        added: dict[str, tuple[list[int], list[int]]] = {}
        for row, terms in enumerate(documents, start=start):
            for term, count in Counter(terms).items():
                rows, counts = added.setdefault(term, ([], []))
                rows.append(row)
                counts.append(count)
        merged = dict(self.terms)
        for term, (rows, counts) in added.items():
            new = (np.asarray(rows, np.int32), np.asarray(counts, np.float32))
            old = merged.get(term)
            merged[term] = (
                new if old is None else (np.concatenate((old[0], new[0])), np.concatenate((old[1], new[1])))
            )
        lengths = np.concatenate((self.lengths, np.asarray([len(terms) for terms in documents], np.int64)))
        return Postings(merged, lengths)

    def scores(self, query: Sequence[str]) -> np.ndarray:
        """BM25 score of every document for the query's terms, float32 (zeros where none is held)."""
        n = len(self.lengths)
        out = np.zeros(n, np.float32)
        found = [self.terms[term] for term in query if term in self.terms]
        if not found:
            return out
        mean_length = self.lengths.mean()
        for rows, counts in found:
            idf = np.float32(math.log(1 + (n - len(rows) + 0.5) / (len(rows) + 0.5)))
            tfc = counts / (K1 * ((1 - B) + B * self.lengths[rows] / mean_length) + counts)
            np.add.at(out, rows, (idf * tfc).astype(np.float32))
        return out

    def top(self, query: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best documents' rows and scores, best first, as bm25s's ``retrieve`` selects them."""
        from bm25s.selection import topk

        scores, rows = topk(self.scores(query), k=k, backend="auto", sorted=True)
        return rows, scores
