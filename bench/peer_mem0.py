"""The Mem0 side of ``bench/add_vs_mem0.py``: run by the Python of a virtual environment with mem0ai.

Reads one JSON object per stdin line, ``{"user": ..., "text": ...}``, adds it with
``Memory.add(..., infer=False)`` (embed, then write; no LLM), and answers with the seconds that call
took, one line each. The embedder is the same MiniLM folder personamem uses; the vector store is
Mem0's default, an on-disk local Qdrant, and its history database sits beside it.

    <mem0 venv>/bin/python bench/peer_mem0.py MODEL_DIR STORE_DIR
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> int:
    model, folder = sys.argv[1], sys.argv[2]
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
    memory.add([{"role": "user", "content": "warm up"}], user_id="warm-up", infer=False)
    print("ready", flush=True)
    for line in sys.stdin:
        turn = json.loads(line)
        start = time.perf_counter()
        memory.add([{"role": "user", "content": turn["text"]}], user_id=turn["user"], infer=False)
        print(time.perf_counter() - start, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
