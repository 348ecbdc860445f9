"""LLM scoring throughput: ``TransformersLLM.loglikelihood`` against this machine's fp32 matmul floor.

``--pairs`` (256) realistic (prompt, target) pairs of 60-120 tokens (a profile of 2-4 personal
statements and a question as the prompt, a short answer as the target; seeded word lists) are scored
with the default model (SmolLM2-135M-Instruct, fp32, on the CPU).

The floor is what this machine's fp32 matmuls allow: a forward pass costs 2 x parameters FLOPs per
token, so floor tokens/s = R / (2 x parameters), where R is the fp32 ``torch.matmul`` rate measured in
this process (same threads) on the shapes of the model's own linear layers, weighted by how often the
model runs each. R is probed before every measured block and its median is used, so the floor and the
scoring see the same machine load.

The pairs are split into ``--chunks`` (4) chunks; for each chunk the batched call
``llm.loglikelihood(chunk)`` and one-at-a-time calls ``llm.loglikelihood([pair])`` alternate, swapping
which goes first every chunk, so drift hits both. Tokens are ``scores.usage.prompt_tokens`` (prompt +
target tokens). The 256 pairs are also scored in a single call (reported, not gated), and that call is
where the backend's peak resident memory is taken. Load time is measured with the converted cache
(the normal path) and without it (a fresh temporary cache: the packaged GGUF is dequantized again, ~20 s;
``--skip-cold-load`` skips it). Where torch sees a GPU, batched vs one-at-a-time is also timed there.

Where the time goes is reported from the model's forward calls: tokenization, the forward (of which the
LM head), and the rest (log_softmax over the vocabulary, gathering, Python), plus the padding waste.

The CTranslate2 runtime (int8) is then set against this transformers path on the same model and
threads: scoring tokens/s on the same pairs (interleaved chunks), decoded tokens/s on chat prompts
(greedy, alternating), each also as a ratio to the fp32 floor, and how far int8 moves the scores.

Gates: batched tokens/s / floor tokens/s >= 0.5; CTranslate2 decoding >= 3x and scoring >= 1.8x
transformers'. The last stdout line is ``llm_scoring_ct2_speedup: S (target >= 1.8)`` (the floor ratio
and decoding lines come just before it) and the exit status is 1 when any target is missed.

    python bench/llm_scoring.py [--pairs 256] [--chunks 4] [--skip-cold-load] [--skip-gpu]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness import arguments, gate, paired

TARGET_FLOOR_RATIO = 0.5
TARGET_CT2_SCORING = 1.8  # CTranslate2 int8 scoring tokens/s over transformers', same model and threads
TARGET_CT2_DECODING = 3.0  # and decoded tokens/s
EXPECTED_GPU_SPEEDUP = 5.0  # the expectation for a lent GPU; reported, not gated

# -- synthetic (prompt, target) pairs --------------------------------------------------------------

_CITIES = ["Lisbon", "Berlin", "Kyoto", "Chicago", "Toronto", "Oslo", "Seville", "Melbourne", "Nairobi"]
_RELATIVES = ["sister", "brother", "partner", "mother", "father", "best friend", "grandmother", "cousin"]
_JOBS = ["nurse", "software engineer", "teacher", "chef", "accountant", "architect", "bus driver"]
_ALLERGENS = ["peanuts", "shellfish", "gluten", "lactose", "cats", "pollen", "eggs"]
_DIETS = ["vegetarian", "vegan", "spicy", "low-carb", "Mediterranean", "Japanese", "Mexican"]
_DISHES = ["curry", "lasagna", "ramen", "tacos", "risotto", "stir-fry", "salad", "soup"]
_INSTRUMENTS = ["piano", "guitar", "violin", "drums", "cello", "ukulele"]
_ACTIVITIES = ["hiking", "cycling", "swimming", "rock climbing", "running", "kayaking", "birdwatching"]
_ITEMS = ["camera", "bicycle", "coffee grinder", "tent", "laptop", "pair of running shoes", "e-reader"]
_ADJECTIVES = ["second-hand", "waterproof", "vintage", "lightweight", "handmade", "electric", "cheap"]
_MONTHS = ["March", "May", "July", "September", "October", "December"]
_SEASONS = ["spring", "summer", "autumn", "winter"]
_STATEMENTS = [
    "I am allergic to {allergen}.",
    "I work as a {job} in {city}.",
    "My {relative} lives in {city} and I visit every {season}.",
    "I have been learning the {instrument} for {n} years.",
    "I mostly eat {diet} food these days.",
    "On weekends I usually go {activity} with my {relative}.",
    "Last month I bought a {adjective} {item} and I use it every day.",
    "I am saving money for a trip to {city} in {month}.",
    "I really dislike crowded places and loud music.",
    "My budget for hobbies is about {n}0 dollars a month.",
    "I started {activity} after my doctor told me to exercise more.",
    "My {relative} and I cook {dish} together every Sunday.",
]
_QUESTIONS = [
    ("What should I cook for dinner tonight?", "How about a {diet} {dish}, without any {allergen}?"),
    ("Where should I go on my next holiday?", "{city} in {month} would suit you; you could go {activity}."),
    ("What gift should I buy for my {relative}?", "A {adjective} {item}, since you both enjoy {activity}."),
    ("Which hobby could I pick up this year?", "Keep going with the {instrument}, or try {activity}."),
    ("Can you suggest a weekend plan?", "Go {activity} on Saturday and cook {dish} on Sunday."),
    ("What should I pack for my trip?", "A {adjective} {item}, warm layers and snacks free of {allergen}."),
    ("Any tips to save money this month?", "Skip eating out, cook {dish} at home and sell the {item}."),
    (
        "Do I need anything for my new job?",
        "A {adjective} {item} and a quiet place to practise {instrument}.",
    ),
]


def _fill(template: str, rng: random.Random) -> str:
    return template.format(
        allergen=rng.choice(_ALLERGENS),
        job=rng.choice(_JOBS),
        city=rng.choice(_CITIES),
        relative=rng.choice(_RELATIVES),
        season=rng.choice(_SEASONS),
        instrument=rng.choice(_INSTRUMENTS),
        n=rng.randint(2, 12),
        diet=rng.choice(_DIETS),
        dish=rng.choice(_DISHES),
        activity=rng.choice(_ACTIVITIES),
        adjective=rng.choice(_ADJECTIVES),
        item=rng.choice(_ITEMS),
        month=rng.choice(_MONTHS),
    )


def realistic_pair(rng: random.Random) -> tuple[str, str]:
    """A short profile of 2-4 statements and a question as the prompt; a short answer as the target."""
    statements = [_fill(s, rng) for s in rng.sample(_STATEMENTS, rng.randint(2, 4))]
    question, answer = rng.choice(_QUESTIONS)
    profile = "\n".join(f"- {s}" for s in statements)
    prompt = (
        "You are a personal assistant. Answer in one sentence, using what the user told you.\n"
        f"What the user told you:\n{profile}\nQuestion: {_fill(question, rng)}\nAnswer:"
    )
    return prompt, " " + _fill(answer, rng)


def make_pairs(
    n: int, seed: int, count_tokens: Callable[[str], int], lo: int, hi: int
) -> list[tuple[str, str]]:
    """``n`` seeded pairs whose prompt + target take between ``lo`` and ``hi`` tokens."""
    rng = random.Random(seed)
    pairs: list[tuple[str, str]] = []
    for _ in range(100 * n):
        prompt, target = realistic_pair(rng)
        if lo <= count_tokens(prompt + target) <= hi:
            pairs.append((prompt, target))
            if len(pairs) == n:
                return pairs
    raise SystemExit(f"could not generate {n} pairs of {lo}-{hi} tokens; widen --min/--max-tokens")


# -- helpers ---------------------------------------------------------------------------------------


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def status_mib(key: str) -> float | None:
    """A ``/proc/self/status`` memory line (VmRSS, VmHWM) in MiB, or None off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def rss_mib() -> float:
    return status_mib("VmRSS") or 0.0


def peak_mib() -> float:
    """Peak resident memory so far (VmHWM; ru_maxrss, in KiB on Linux, where /proc is missing)."""
    return status_mib("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def load_avg() -> str:
    return f"{os.getloadavg()[0]:.2f}"


# -- the floor: fp32 matmul rate on the model's own shapes -----------------------------------------


def linear_shapes(config: Any) -> list[tuple[str, int, int, int]]:
    """(name, in, out, times per forward) of every matmul with weights, for a Llama-style model."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    q, kv = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim
    return [
        ("attn q", hidden, q, layers),
        ("attn k, v", hidden, kv, 2 * layers),
        ("attn o", q, hidden, layers),
        ("mlp gate, up", hidden, config.intermediate_size, 2 * layers),
        ("mlp down", config.intermediate_size, hidden, layers),
        ("lm head", hidden, config.vocab_size, 1),
    ]


class MatmulProbe:
    """Times ``torch.matmul(x, w.T)`` (the layout ``nn.Linear`` uses) for each of the model's shapes.

    The rate is the model-weighted one: FLOPs of one token through every shape, over the time one token
    takes through every shape at the measured speeds; each shape's time is the median of ``repeats``.
    """

    def __init__(self, shapes: list[tuple[str, int, int, int]], rows: int, head_rows: int, repeats: int):
        import torch

        gen = torch.Generator().manual_seed(0)
        self.repeats = repeats
        self.items = []
        for name, fan_in, fan_out, count in shapes:
            n = head_rows if name == "lm head" else rows
            x = torch.randn(n, fan_in, generator=gen)
            w = torch.randn(fan_out, fan_in, generator=gen)
            self.items.append((name, count, x, w))
        self.rates: list[float] = []
        self.shape_rates: dict[str, list[float]] = {name: [] for name, *_ in shapes}

    def run(self) -> float:
        import torch

        per_token_s = 0.0
        per_token_flops = 0.0
        for name, count, x, w in self.items:
            times = []
            for _ in range(self.repeats):
                start = time.perf_counter()
                torch.matmul(x, w.t())
                times.append(time.perf_counter() - start)
            seconds = statistics.median(times)
            flops = 2 * x.shape[0] * x.shape[1] * w.shape[0]
            self.shape_rates[name].append(flops / seconds)
            per_token_s += count * seconds / x.shape[0]
            per_token_flops += count * flops / x.shape[0]
        rate = per_token_flops / per_token_s
        self.rates.append(rate)
        return rate

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)


# -- instrumentation of the forward ----------------------------------------------------------------


@dataclass
class ForwardLog:
    """Every forward call of the model: (batch, width, logits kept, seconds), and the LM head's seconds."""

    calls: list[tuple[int, int, int, float]] = field(default_factory=list)
    head_s: float = 0.0

    def mark(self) -> tuple[int, float]:
        return len(self.calls), self.head_s


def instrument(model: Any) -> ForwardLog:
    """Wrap ``model.forward`` and hook ``model.lm_head`` to record shapes and times (microseconds of cost)."""
    record = ForwardLog()
    original = model.forward
    head_start: list[float] = []

    def forward(*args: Any, **kwargs: Any) -> Any:
        ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
        start = time.perf_counter()
        out = original(*args, **kwargs)
        keep = int(kwargs.get("logits_to_keep") or ids.shape[1])
        record.calls.append((int(ids.shape[0]), int(ids.shape[1]), keep, time.perf_counter() - start))
        return out

    def pre_hook(module: Any, inputs: Any) -> None:
        head_start.append(time.perf_counter())

    def post_hook(module: Any, inputs: Any, output: Any) -> None:
        record.head_s += time.perf_counter() - head_start.pop()

    model.forward = forward
    model.lm_head.register_forward_pre_hook(pre_hook)
    model.lm_head.register_forward_hook(post_hook)
    return record


@dataclass
class Side:
    """One side of the comparison (batched or one at a time): totals over the chunks."""

    seconds: float = 0.0
    tokens: int = 0
    calls: list[tuple[int, int, int, float]] = field(default_factory=list)
    head_s: float = 0.0

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds


def score_batched(llm: Any, pairs: Sequence[tuple[str, str]], record: ForwardLog, side: Side) -> float:
    n_calls, head_s = record.mark()
    start = time.perf_counter()
    scores = llm.loglikelihood(pairs)
    seconds = time.perf_counter() - start
    side.seconds += seconds
    side.tokens += scores.usage.prompt_tokens
    side.calls += record.calls[n_calls:]
    side.head_s += record.head_s - head_s
    return scores.usage.prompt_tokens / seconds


def score_one_at_a_time(llm: Any, pairs: Sequence[tuple[str, str]], record: ForwardLog, side: Side) -> float:
    n_calls, head_s = record.mark()
    tokens = 0
    start = time.perf_counter()
    for pair in pairs:
        tokens += llm.loglikelihood([pair]).usage.prompt_tokens
    seconds = time.perf_counter() - start
    side.seconds += seconds
    side.tokens += tokens
    side.calls += record.calls[n_calls:]
    side.head_s += record.head_s - head_s
    return tokens / seconds


def matmul_flops(
    calls: list[tuple[int, int, int, float]], shapes: list[tuple[str, int, int, int]], cfg
) -> float:
    """FLOPs the forwards really did: every position through the layers (padding included), the LM head
    on the kept positions only, and attention's scores and weighted sums (full width, as computed)."""
    body = sum(2 * i * o * c for name, i, o, c in shapes if name != "lm head")
    head = sum(2 * i * o for name, i, o, _ in shapes if name == "lm head")
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    attn = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim  # x width^2 per row
    return sum(b * (body * w + head * k + attn * w * w) for b, w, k, _ in calls)


# -- load times ------------------------------------------------------------------------------------

_COLD_LOAD = """
import json, sys, time
import torch, transformers  # imported before timing, as in the warm case
from transformers import AutoModelForCausalLM, AutoTokenizer
from personamem.llm.hf import TransformersLLM
cache = sys.argv[1]
start = time.perf_counter()
llm = TransformersLLM.default(cache_dir=__import__("pathlib").Path(cache))
cold = time.perf_counter() - start
del llm
start = time.perf_counter()
llm = TransformersLLM.default(cache_dir=__import__("pathlib").Path(cache))
warm = time.perf_counter() - start
status = open("/proc/self/status").read().split("\\n")
hwm = next((int(x.split()[1]) / 1024 for x in status if x.startswith("VmHWM:")), None)
print(json.dumps({"cold_s": cold, "warm_s": warm, "peak_mib": hwm}))
"""


def cold_load() -> dict[str, float] | None:
    """Load the default model through a fresh, empty cache in a subprocess (the GGUF is converted)."""
    tmp = tempfile.mkdtemp(prefix="personamem-bench-llm-")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _COLD_LOAD, tmp], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            log(f"[load] cold load failed:\n{proc.stderr[-2000:]}")
            return None
        return json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- GPU (only where torch sees one) ---------------------------------------------------------------


def gpu_comparison(pairs: list[tuple[str, str]]) -> tuple[float, float] | None:
    """Batched vs one-at-a-time tokens/s on the GPU (bf16, as ``from_pretrained`` picks off the CPU)."""
    import torch

    from personamem.llm.hf import TransformersLLM
    from personamem.llm.packaged import default_cache_dir, local_model_path

    if not torch.cuda.is_available():
        return None
    log(f"[gpu] {torch.cuda.get_device_name(0)}: loading the default model (bf16)")
    llm = TransformersLLM.from_pretrained(
        local_model_path("smollm2-135m", default_cache_dir()), device="cuda"
    )
    llm.loglikelihood(pairs[:16])
    for pair in pairs[:4]:
        llm.loglikelihood([pair])

    def timed_batched() -> tuple[float, int]:
        torch.cuda.synchronize()
        start = time.perf_counter()
        tokens = llm.loglikelihood(pairs).usage.prompt_tokens  # the .cpu() inside synchronizes
        return time.perf_counter() - start, tokens

    first, tokens = timed_batched()  # batched before and after the one-at-a-time pass; the better is kept
    start = time.perf_counter()
    for pair in pairs:
        llm.loglikelihood([pair])
    sequential = time.perf_counter() - start
    second, _ = timed_batched()
    return tokens / min(first, second), tokens / sequential


# -- benchmark -------------------------------------------------------------------------------------


@dataclass
class Baseline:
    """What the transformers run leaves for the runtime comparison: its model, pairs and floor."""

    ratio: float
    llm: Any
    pairs: list[tuple[str, str]]
    floor_tps: float
    rate: float
    params: int


def run(args: argparse.Namespace) -> Baseline:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM  # noqa: F401  (imported before the baseline)

    from personamem.llm.hf import TransformersLLM
    from personamem.llm.packaged import default_cache_dir, local_model_path
    from personamem.llm.tokens import encode_pair

    threads = torch.get_num_threads()
    start = time.perf_counter()
    path = local_model_path("smollm2-135m", default_cache_dir())  # converts only where no cache is yet
    if (convert_s := time.perf_counter() - start) > 2:
        log(f"[load] the converted cache was missing; converted in {convert_s:.1f}s before timing the load")
    # the probe's operands exist before the memory baseline, so they are not counted as the backend's
    shapes = linear_shapes(AutoConfig.from_pretrained(path, local_files_only=True))
    probe = MatmulProbe(shapes, args.probe_rows, args.head_rows, args.probe_repeats)
    rss_before = rss_mib()

    # -- load with the converted cache --
    reset_peak()
    start = time.perf_counter()
    if args.batch_tokens is None:
        llm = TransformersLLM.default()
    else:  # default() with another batch budget
        llm = TransformersLLM.from_pretrained(path, batch_tokens=args.batch_tokens)
    warm_load_s = time.perf_counter() - start
    rss_loaded, peak_loading = rss_mib(), peak_mib()
    log(f"[load] default model from the converted cache in {warm_load_s:.2f}s")

    model = llm.model
    cfg = model.config
    # Parameters: model.parameters() yields the tied embedding / LM head matrix once. That is the count
    # the floor wants: the embedding lookup is a gather (no FLOPs) while the LM head is a real
    # (hidden x vocab) matmul, so the tied matrix counted once, as the LM head, plus the layers' weights
    # (and the norms, 0.03%) is the matmul work of a forward that projects every position to the vocab.
    params = sum(p.numel() for p in model.parameters())
    record = instrument(model)

    pairs = make_pairs(args.pairs, args.seed, llm.count_tokens, args.min_tokens, args.max_tokens)
    start = time.perf_counter()
    encoded = [encode_pair(llm.tokenizer, llm.render(p), t, llm.context_window) for p, t in pairs]
    tokenize_s = time.perf_counter() - start
    lengths = [len(c) + len(t) for c, t in encoded]
    target_lengths = [len(t) for _, t in encoded]
    log(f"[pairs] {len(pairs)} pairs, {sum(lengths) / len(lengths):.1f} tokens each on average")

    log("[warmup] probe, a batched call and single calls")
    probe.run()
    llm.loglikelihood(pairs[:16])
    for pair in pairs[:4]:
        llm.loglikelihood([pair])
    probe.rates.clear()
    for rates in probe.shape_rates.values():
        rates.clear()
    rss_warm = rss_mib()  # the safetensors weights are memory-mapped: resident once the forward read them

    load_before = load_avg()
    # -- all pairs in one call (reported; the backend's scoring peak memory is taken here) --
    full = Side()
    full_tps = None
    peak_scoring = None
    if not args.skip_full_call:
        probe.run()
        peak_reset = reset_peak()
        log(f"[time] all {len(pairs)} pairs in one batched call")
        full_tps = score_batched(llm, pairs, record, full)
        peak_scoring = peak_mib() if peak_reset else None
        log(f"[time] {full_tps:.0f} tokens/s")

    # -- interleaved chunks: batched vs one at a time --
    batched, sequential = Side(), Side()
    size = -(-len(pairs) // args.chunks)
    chunks = [pairs[i : i + size] for i in range(0, len(pairs), size)]
    per_chunk = []
    for c, chunk in enumerate(chunks):
        log(f"[time] chunk {c + 1}/{len(chunks)} ({len(chunk)} pairs)")
        sides = [("batched", score_batched, batched), ("one at a time", score_one_at_a_time, sequential)]
        if c % 2:
            sides.reverse()
        tps, probe_at = {}, {}
        for name, fn, side in sides:  # a probe before each side; the one after is the next side's
            rate = probe.run()
            probe_at[name] = len(probe.rates) - 1
            tps[name] = fn(llm, chunk, record, side)
            log(f"[time]   matmul rate {rate / 1e9:.1f} GFLOP/s, {name}: {tps[name]:.0f} tokens/s")
        per_chunk.append((probe_at["batched"], tps["batched"], tps["one at a time"]))
    probe.run()
    load_after = load_avg()
    peak_total = peak_mib()

    # -- where the batched time goes: log_softmax over the vocabulary, measured on the same shapes --
    softmax_s = 0.0
    with torch.inference_mode():
        for b, _, k, _ in batched.calls:
            logits = torch.randn(b, k, cfg.vocab_size)
            start = time.perf_counter()
            torch.log_softmax(logits, dim=-1)
            softmax_s += time.perf_counter() - start
    del logits

    cold = None
    if not args.skip_cold_load:
        log("[load] cold load: converting the packaged GGUF into a fresh cache (subprocess, ~20 s)")
        cold = cold_load()

    gpu = None
    if not args.skip_gpu:
        gpu = gpu_comparison(pairs)  # only where torch.cuda.is_available()

    # -- report --
    rate = probe.rate
    floor_tps = rate / (2 * params)
    ratio = batched.tps / floor_tps
    mean_tokens = sum(lengths) / len(lengths)
    print(
        f"load average before / after timing: {load_before} / {load_after} "
        f"({os.cpu_count()} cpus, torch {torch.__version__} using {threads} threads)"
    )
    print(
        f"model: {llm.name}, {params / 1e6:.1f}M parameters (tied embedding counted once, as the LM head), "
        f"fp32 on the CPU, batch budget {llm._batch_tokens} tokens"
    )
    print(
        f"pairs: {len(pairs)}, {mean_tokens:.1f} tokens each on average (min {min(lengths)}, max "
        f"{max(lengths)}), {sum(target_lengths) / len(target_lengths):.1f} of them target tokens; "
        f"{len(chunks)} interleaved chunks of {size}"
    )
    print()
    print(
        f"fp32 matmul rate R (median of {len(probe.rates)} probes, {args.probe_rows} rows, "
        f"LM head {args.head_rows} rows): {rate / 1e9:.1f} GFLOP/s "
        f"(probes {min(probe.rates) / 1e9:.1f}-{max(probe.rates) / 1e9:.1f})"
    )
    print(
        "  by shape (GFLOP/s, median): "
        + ", ".join(f"{n} {statistics.median(r) / 1e9:.0f}" for n, r in probe.shape_rates.items())
    )
    print(f"floor = R / (2 x {params / 1e6:.1f}M) = {floor_tps:.0f} tokens/s")
    print()
    header = f"{'chunk':<7} {'R GFLOP/s':>10} {'batched tok/s':>14} {'single tok/s':>13} {'speedup':>8}"
    header += f" {'ratio':>6}"
    print(header)
    print("-" * len(header))
    for c, (i, b, s) in enumerate(per_chunk):
        r = (probe.rates[i] + probe.rates[i + 1]) / 2  # the probes just before and after the batched call
        print(f"{c + 1:<7} {r / 1e9:10.1f} {b:14.0f} {s:13.0f} {b / s:8.2f} {b / (r / (2 * params)):6.2f}")
    print(
        f"{'all':<7} {rate / 1e9:10.1f} {batched.tps:14.0f} {sequential.tps:13.0f} "
        f"{batched.tps / sequential.tps:8.2f} {ratio:6.2f}"
    )
    print(
        "ratio = batched tokens/s / floor tokens/s; speedup = batched / one at a time; "
        f"{sequential.seconds / len(pairs):.3f} s per pair one at a time"
    )
    if full_tps is not None:
        print(
            f"all {len(pairs)} pairs in one call: {full_tps:.0f} tokens/s, ratio {full_tps / floor_tps:.2f} "
            f"({full.seconds:.1f}s, {len(full.calls)} forward batches)"
        )
    print(
        "note: the floor counts every token through every parameter, LM head included; TransformersLLM "
        "runs the LM head only on the kept target positions (logits_to_keep), so it does less matmul work "
        "than the floor counts (a perfect backend would exceed ratio 1), while padding adds work the "
        "token count does not see."
    )

    print()
    print("where the time goes (the interleaved calls):")
    for name, side in (("batched", batched), ("one at a time", sequential)):
        padded = sum(b * w for b, w, _, _ in side.calls)
        forward_s = sum(s for *_, s in side.calls)
        flops = matmul_flops(side.calls, shapes, cfg)
        print(
            f"  {name:<14} {side.seconds:7.1f}s total: forward {forward_s:6.1f}s "
            f"({100 * forward_s / side.seconds:4.1f}%, of which LM head {side.head_s:5.2f}s), "
            f"other {side.seconds - forward_s:5.2f}s; {len(side.calls)} forwards, padded positions "
            f"{padded:,} for {side.tokens:,} tokens ({100 * (padded - side.tokens) / padded:4.1f}% padding); "
            f"forward does {flops / forward_s / 1e9:.1f} GFLOP/s = {flops / forward_s / rate:.2f} R"
        )
    print(
        f"  tokenization (encode_pair, all {len(pairs)} pairs): {tokenize_s:.2f}s; log_softmax over the "
        f"vocabulary on the batched shapes: {softmax_s:.2f}s"
    )

    print()
    base = rss_before
    mem_parts = [
        f"{base:.0f} MiB before loading",
        f"+{rss_loaded - base:.0f} MiB after loading (peak while loading +{peak_loading - base:.0f}; "
        "weights memory-mapped)",
        f"+{rss_warm - base:.0f} MiB once the first calls paged the weights in",
    ]
    if peak_scoring is not None:
        mem_parts.append(f"peak while scoring all {len(pairs)} pairs in one call +{peak_scoring - base:.0f}")
    mem_parts.append(f"peak over the run +{peak_total - base:.0f} MiB (includes the probes' outputs)")
    print("resident memory of the backend: " + ", ".join(mem_parts))
    load_line = f"load time: with the converted cache {warm_load_s:.2f}s"
    if cold is not None:
        load_line += (
            f"; without it (GGUF dequantized into a fresh cache, subprocess) {cold['cold_s']:.1f}s, "
            f"then from that cache {cold['warm_s']:.2f}s in the same subprocess "
            f"(its peak RSS {cold['peak_mib']:.0f} MiB)"
        )
    elif args.skip_cold_load:
        load_line += "; without it: skipped (--skip-cold-load)"
    print(load_line)
    if gpu is not None:
        b, s = gpu
        verdict = "as expected" if b / s >= EXPECTED_GPU_SPEEDUP else "BELOW the expected"
        print(
            f"GPU (cuda, bf16): batched {b:.0f} tokens/s, one at a time {s:.0f} tokens/s, "
            f"speedup {b / s:.1f}x ({verdict} >= {EXPECTED_GPU_SPEEDUP:.0f}x)"
        )
    else:
        print("GPU: none visible to torch (or --skip-gpu); batched vs one at a time on a GPU not measured")
    spread = max(probe.rates) / min(probe.rates)
    if spread > 1.5:
        print(
            f"WARNING: the matmul rate varied {spread:.1f}x between probes: the CPU was contended during "
            "the run (other processes); rerun on a quiet machine"
        )
    return Baseline(ratio, llm, pairs, floor_tps, rate, params)


_TOPICS = ["cats", "rain", "Lisbon", "bread", "chess", "tea", "running", "jazz", "tents", "gardens"]


def runtime_comparison(base: Baseline, args: argparse.Namespace) -> tuple[float, float]:
    """CTranslate2 int8 against transformers on the same model and threads: scoring and decoding.

    Scoring: the same pairs in ``--chunks`` chunks, each chunk scored by both backends in alternating
    order (batched calls, each backend's own batching). Decoding: ``--gen-prompts`` chat prompts,
    greedy, ``--gen-tokens`` new tokens at most, both backends twice, alternating. Both are also put
    against the fp32 floor of the baseline (int8 matmuls can pass it: it is a float32 floor).
    """
    import numpy as np
    import torch

    from personamem.llm.ct2 import CTranslate2LLM

    hf = base.llm
    threads = torch.get_num_threads()
    start = time.perf_counter()
    ct2 = CTranslate2LLM.local("smollm2-135m", threads=threads)
    log(f"[ct2] loaded (converted once if missing) in {time.perf_counter() - start:.1f}s, {threads} threads")
    ct2.loglikelihood(base.pairs[:16])
    llms = {"transformers": hf, "ctranslate2": ct2}
    chunks = [base.pairs[i :: args.chunks] for i in range(args.chunks)]
    tokens = {"transformers": 0, "ctranslate2": 0}
    deltas: list[float] = []

    def compare(c: int, results: dict[str, Any]) -> None:
        for name, scores in results.items():
            tokens[name] += scores.usage.prompt_tokens
        deltas.extend(
            abs(a - b) / n
            for a, b, n in zip(
                results["ctranslate2"],
                results["transformers"],
                results["ctranslate2"].token_counts,
                strict=True,
            )
        )

    seconds = paired(
        {name: lambda c, llm=llm: llm.loglikelihood(chunks[c]) for name, llm in llms.items()},
        len(chunks),
        warmup=0,  # both warmed up above
        check=compare,
    )
    score_tps = {name: tokens[name] / sum(seconds[name]) for name in llms}
    prompts = [
        [{"role": "user", "content": f"Write a short note about {_TOPICS[i % len(_TOPICS)]}."}]
        for i in range(args.gen_prompts)
    ]
    ct2.generate(prompts[:2], max_tokens=4)
    gen_tokens = {"transformers": 0, "ctranslate2": 0}

    def count(round_: int, outs: dict[str, Any]) -> None:
        for name, out in outs.items():
            gen_tokens[name] += out.usage.completion_tokens

    gen_s = paired(
        {
            name: lambda _, llm=llm: llm.generate(prompts, max_tokens=args.gen_tokens)
            for name, llm in llms.items()
        },
        2,
        warmup=0,
        check=count,
    )
    gen_tps = {name: gen_tokens[name] / sum(gen_s[name]) for name in llms}
    scoring, decoding = (
        score_tps["ctranslate2"] / score_tps["transformers"],
        gen_tps["ctranslate2"] / gen_tps["transformers"],
    )
    print()
    print(
        f"runtimes on the same model (SmolLM2-135M-Instruct), {threads} threads, "
        f"fp32 floor {base.floor_tps:.0f} tokens/s:"
    )
    print(f"{'runtime':<13} {'score tok/s':>12} {'floor ratio':>12} {'decode tok/s':>13} {'floor ratio':>12}")
    for name in ("transformers", "ctranslate2"):
        print(
            f"{name:<13} {score_tps[name]:12.0f} {score_tps[name] / base.floor_tps:12.2f} "
            f"{gen_tps[name]:13.1f} {gen_tps[name] / base.floor_tps:12.3f}"
        )
    print(
        f"ctranslate2 / transformers: scoring {scoring:.2f}x (target >= {TARGET_CT2_SCORING}), "
        f"decoding {decoding:.2f}x (target >= {TARGET_CT2_DECODING}; {args.gen_prompts} prompts, "
        f"<= {args.gen_tokens} new tokens, greedy)"
    )
    print(
        f"int8 vs float32 log-likelihood: {np.mean(deltas):.3f} nats per target token on average, "
        f"{np.max(deltas):.3f} at most (over {len(deltas)} pairs)"
    )
    return scoring, decoding


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--pairs", type=int, default=256)
    parser.add_argument("--chunks", type=int, default=4, help="interleaved chunks (batched vs one at a time)")
    parser.add_argument("--min-tokens", type=int, default=60, help="fewest prompt + target tokens per pair")
    parser.add_argument("--max-tokens", type=int, default=120, help="most prompt + target tokens per pair")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-tokens", type=int, help="TransformersLLM's batch budget (default: its own)")
    parser.add_argument("--probe-rows", type=int, default=2048, help="rows of the layers' matmul probes")
    parser.add_argument("--head-rows", type=int, default=512, help="rows of the LM head's matmul probe")
    parser.add_argument("--probe-repeats", type=int, default=3)
    parser.add_argument("--skip-full-call", action="store_true", help="skip scoring all pairs in one call")
    parser.add_argument("--skip-cold-load", action="store_true", help="skip the load without the cache")
    parser.add_argument("--skip-gpu", action="store_true", help="skip the GPU comparison")
    parser.add_argument("--gen-prompts", type=int, default=32, help="prompts decoded per runtime and round")
    parser.add_argument("--gen-tokens", type=int, default=48, help="most new tokens per decoded prompt")
    args = parser.parse_args()

    base = run(args)
    scoring, decoding = runtime_comparison(base, args)
    return max(
        gate("llm_scoring_floor_ratio", base.ratio, TARGET_FLOOR_RATIO, higher_is_better=True, digits=2),
        gate(
            "llm_scoring_ct2_decoding_speedup", decoding, TARGET_CT2_DECODING, higher_is_better=True, digits=2
        ),
        gate("llm_scoring_ct2_speedup", scoring, TARGET_CT2_SCORING, higher_is_better=True, digits=2),
    )


if __name__ == "__main__":
    sys.exit(main())
