"""What a GPU changes for the learned stages: PURPLE's reward and MemRerank's rollouts, GPU against CPU.

The expensive part of a PURPLE step is its reward, the frozen LLM's log-likelihood of the answer given
each sampled profile: ``B x M`` scoring requests a step (the paper's B = 16 examples x M = 32 profiles
= 512). A MemRerank (GRPO) step is the extractor's group of sampled memories per user. Both go through
the same :class:`~personamem.llm.hf.TransformersLLM` calls the trainers make (``answer_loglikelihood``
over :func:`~personamem.pipeline.prompt.profile_prompt` prompts; ``generate(n=8)``), on one machine:
the CPU (float32, all its cores) and, where torch sees one, the GPU (bfloat16).

The requests are realistic in shape: a profile of five records of 1-3 sentences (seeded synthetic
texts, as in the other benches), a question and a 3-8 word answer. ``--random-weights`` builds the
model from its ``config.json`` with random weights: the arithmetic, and so the time, is the trained
model's, which lets a GPU machine that cannot receive the 1 GB of weights still time it (the numbers
it prints are times only; the scores mean nothing).

Gate: GPU rewards/s / CPU rewards/s >= 20 (a paper-size step then costs seconds, not minutes). The
last stdout line is ``gpu_reward_speedup: R (target >= 20)``; the exit status is 1 when it is missed.
Without a GPU the CPU side is measured and printed, and the last line says ``n/a``.

    python bench/gpu_reward.py [--model qwen2.5-coder-0.5b] [--random-weights] [--pairs 512] [--cpu-pairs 16]
        [--gpu-batch-tokens N]
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import QUERIES, log, realistic_text
from harness import arguments, gate

TARGET = 20.0
PAPER_STEP = 16 * 32  # PURPLE's B x M
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "generation_config.json",
)


def model_folder(model: str, random_weights: bool, scratch: Path) -> Path:
    """The model's transformers folder; with ``random_weights``, a copy with fresh random weights."""
    from personamem.llm.packaged import local_model_path, packaged_model

    folder = local_model_path(model) if packaged_model(model) else Path(model)
    if not random_weights:
        return folder
    from transformers import AutoConfig, AutoModelForCausalLM

    log(f"[setup] random weights in the shape of {folder.name}")
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder)).save_pretrained(scratch)
    for name in _TOKENIZER_FILES:
        if (folder / name).is_file():
            shutil.copy(folder / name, scratch / name)
    return scratch


def reward_requests(llm: object, n: int, seed: int) -> tuple[list[object], list[str]]:
    """``n`` (profile prompt, answer) pairs shaped like PURPLE's reward requests."""
    from personamem.pipeline.prompt import profile_prompt
    from personamem.records import Record

    rng = random.Random(seed)
    prompts, answers = [], []
    for i in range(n):
        profile = [Record(user_id="u", id=f"r{i}-{j}", text=realistic_text(rng)) for j in range(5)]
        prompts.append(profile_prompt(llm, profile, rng.choice(QUERIES)))  # type: ignore[arg-type]
        answers.append(" ".join(realistic_text(rng).split()[: rng.randint(3, 8)]))
    return prompts, answers


def time_rewards(llm: object, n: int, seed: int, sync: object) -> float:
    """Rewards per second over ``n`` requests in one batched call (after a small warm-up call)."""
    from personamem.eval.answers import answer_loglikelihood

    prompts, answers = reward_requests(llm, n + 4, seed)
    answer_loglikelihood(llm, prompts[:4], answers[:4])  # type: ignore[arg-type]
    start = time.perf_counter()
    answer_loglikelihood(llm, prompts[4:], answers[4:])  # type: ignore[arg-type]
    sync()  # type: ignore[operator]
    return n / (time.perf_counter() - start)


def time_rollouts(llm: object, prompts: int, seed: int, sync: object) -> float:
    """Completion tokens per second sampling 8 memories of up to 64 tokens for each of ``prompts`` users."""
    rng = random.Random(seed)
    histories = [
        [{"role": "user", "content": "Summarise this person's preferences:\n" + realistic_text(rng) * 3}]
        for _ in range(prompts)
    ]
    llm.generate(histories[:1], n=2, max_tokens=8, temperature=1.0, seed=seed)  # type: ignore[attr-defined]
    start = time.perf_counter()
    out = llm.generate(histories, n=8, max_tokens=64, temperature=1.0, seed=seed)  # type: ignore[attr-defined]
    sync()  # type: ignore[operator]
    return out.usage.completion_tokens / (time.perf_counter() - start)


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="packaged name or model folder")
    parser.add_argument("--random-weights", action="store_true", help="time the shape, not the weights")
    parser.add_argument("--pairs", type=int, default=PAPER_STEP, help="reward requests timed on the GPU")
    parser.add_argument("--cpu-pairs", type=int, default=16, help="reward requests timed on the CPU")
    parser.add_argument("--rollout-users", type=int, default=16, help="users sampled for on the GPU")
    parser.add_argument(
        "--gpu-batch-tokens", type=int, default=None, help="padded tokens per GPU forward [backend default]"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    from personamem.llm.hf import TransformersLLM

    with tempfile.TemporaryDirectory() as scratch:
        folder = model_folder(args.model, args.random_weights, Path(scratch))
        rows: list[tuple[str, float, float]] = []
        log(f"[cpu] {args.cpu_pairs} rewards, 1 user's rollouts ({torch.get_num_threads()} threads)")
        cpu = TransformersLLM.from_pretrained(folder, device="cpu")
        cpu_rate = time_rewards(cpu, args.cpu_pairs, args.seed, lambda: None)
        cpu_tokens = time_rollouts(cpu, 1, args.seed, lambda: None)
        rows.append(("cpu, float32", cpu_rate, cpu_tokens))
        del cpu
        gpu_rate = None
        if torch.cuda.is_available():
            log(f"[gpu] {args.pairs} rewards, {args.rollout_users} users' rollouts")
            gpu = TransformersLLM.from_pretrained(folder, device="cuda", batch_tokens=args.gpu_batch_tokens)
            gpu_rate = time_rewards(gpu, args.pairs, args.seed, torch.cuda.synchronize)
            gpu_tokens = time_rollouts(gpu, args.rollout_users, args.seed, torch.cuda.synchronize)
            rows.append((f"gpu ({torch.cuda.get_device_name()}), bfloat16", gpu_rate, gpu_tokens))
    weights = "random weights" if args.random_weights else "trained weights"
    print(f"{folder.name if not args.random_weights else args.model} ({weights})")
    print(f"{'device':<40}{'rewards/s':>10}{'s / paper step':>16}{'rollout tokens/s':>18}")
    for name, rate, tokens in rows:
        print(f"{name:<40}{rate:10.1f}{PAPER_STEP / rate:16.1f}{tokens:18.1f}")
    if gpu_rate is None:
        print(f"gpu_reward_speedup: n/a (no GPU here; target >= {TARGET:.0f})")
        return 0
    return gate("gpu_reward_speedup", gpu_rate / cpu_rate, TARGET, higher_is_better=True, digits=1)


if __name__ == "__main__":
    sys.exit(main())
