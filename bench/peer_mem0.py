"""The Mem0 side of ``bench/add_vs_mem0.py``: run by the Python of a virtual environment with mem0ai.

Reads one JSON object per stdin line and answers each with one JSON line, ``{"seconds": S}`` (plus
``"count"`` where a call returns memories), S being how long Mem0's own call took (the pipe is not
timed). The operations:

- ``{"op": "add", "user": U, "text": T}``: ``Memory.add([{"role": "user", "content": T}],
  user_id=U, infer=False)`` (embed, then write; no LLM).
- ``{"op": "add_batch", "user": U, "texts": [...]}``: the same call with every text as a message.
  This is Mem0's only way to add many memories at once with ``infer=False``: 2.2.1 has no batch
  embedding on that path (``_add_to_vector_store`` embeds and inserts the messages one at a time), so
  its batch ingest is its add loop, run inside one call.
- ``{"op": "search", "user": U, "query": Q, "k": K}``: ``Memory.search(Q, top_k=K,
  filters={"user_id": U})``. 2.2.1 rejects ``user_id=`` and ``limit=`` here (a ValueError): the user
  goes in ``filters`` and the count is ``top_k``. Without the optional fastembed and spaCy (not in the
  environment the bench asks for) its hybrid scoring falls back to semantic search alone: no BM25
  sparse vectors, no lemmas, no entity boosts.
- ``{"op": "encode", "text": T}``: ``memory.embedding_model.embed(T, "search")``, the encoder call a
  search makes, so Mem0's search / encoder ratio can be set beside ours.

The embedder is the same MiniLM folder personamem uses; the vector store is Mem0's default, an on-disk
local Qdrant, and its history database sits beside it. Anything the libraries print goes to stderr, so
stdout carries only the answers.

    <mem0 venv>/bin/python bench/peer_mem0.py MODEL_DIR STORE_DIR
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def main() -> int:
    model, folder = sys.argv[1], sys.argv[2]
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not corrupt the protocol
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("OPENAI_API_KEY", "unused")  # Mem0 builds an LLM client; infer=False never calls it
    os.environ["MEM0_DIR"] = folder
    import torch
    from mem0 import Memory

    torch.set_num_threads(1)
    memory = Memory.from_config(
        {
            "embedder": {"provider": "huggingface", "config": {"model": model, "embedding_dims": 384}},
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "collection_name": "bench",
                    "path": os.path.join(folder, "qdrant"),
                    "embedding_model_dims": 384,
                    "on_disk": True,
                },
            },
            "history_db_path": os.path.join(folder, "history.db"),
        }
    )

    def messages(texts: list[str]) -> list[dict[str, str]]:
        return [{"role": "user", "content": text} for text in texts]

    def call(request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        start = time.perf_counter()
        if op == "add":
            memory.add(messages([request["text"]]), user_id=request["user"], infer=False)
            return {"seconds": time.perf_counter() - start}
        if op == "add_batch":
            memory.add(messages(request["texts"]), user_id=request["user"], infer=False)
            return {"seconds": time.perf_counter() - start}
        if op == "search":
            found = memory.search(request["query"], top_k=request["k"], filters={"user_id": request["user"]})
            return {"seconds": time.perf_counter() - start, "count": len(found["results"])}
        if op == "encode":
            memory.embedding_model.embed(request["text"], "search")
            return {"seconds": time.perf_counter() - start}
        raise ValueError(f"unknown op {op!r}")

    call({"op": "add", "user": "warm-up", "text": "warm up"})
    call({"op": "search", "user": "warm-up", "query": "warm up", "k": 1})
    answers.write("ready\n")
    for line in sys.stdin:
        answers.write(json.dumps(call(json.loads(line))) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
