"""``personamem analyze``: look at how a user's records actually help the frozen LLM."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from personamem.cli.options import runtime_option
from personamem.console import out, progress_bar
from personamem.datasets.table import BenchmarkName
from personamem.llm.load import REFERENCE_RUNTIME, Runtime

__all__ = ["analyze_app"]

analyze_app = typer.Typer(help="Analyses of a user's memory against the frozen LLM.", no_args_is_help=True)


@analyze_app.command("utility")
def utility(
    user: Annotated[
        str, typer.Option(help="The benchmark user (a LoCoMo conversation, a PersonaBench person).")
    ],
    benchmark: Annotated[BenchmarkName, typer.Option(help="QA benchmark with the user's history.")],
    data: Annotated[Path, typer.Option(help="The benchmark folder in its upstream layout.")],
    questions: Annotated[int, typer.Option(min=1, help="The user's first N answered questions.")] = 20,
    candidates: Annotated[
        int, typer.Option(min=1, help="Candidates per question from the first stage.")
    ] = 20,
    first_stage: Annotated[str, typer.Option(help="dense, bm25 or hybrid.")] = "hybrid",
    noise: Annotated[float, typer.Option(help="PersonaBench distractor level.")] = 0.0,
    llm: Annotated[
        str, typer.Option(help="smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b or a model folder.")
    ] = "smollm2-135m",
    llm_runtime: Annotated[Runtime, runtime_option()] = REFERENCE_RUNTIME,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for utility.json and utility.png.")] = Path(
        "personamem-analysis"
    ),
) -> None:
    """Relevance (cosine) vs. utility (Δ answer log-likelihood) of each candidate record, with Pearson r."""
    import dataclasses

    from personamem.datasets import DataSource
    from personamem.datasets.vectors import default_vector_cache
    from personamem.encoder import default_encoder
    from personamem.llm.load import load_llm
    from personamem.trainers.purple.data import examples_from_benchmark
    from personamem.trainers.purple.utility import (
        gold_auc,
        gold_auc_gap,
        pearson,
        plot_utility,
        record_utility,
    )

    bench = DataSource.model_validate({"benchmark": benchmark, "data": data, "noise": noise}).questions()
    mine = [q for q in bench.questions if q.user_id == user and q.answer and q.answer.strip()][:questions]
    if not mine:
        known = ", ".join(sorted(bench.users())[:10])
        raise typer.BadParameter(
            f"user {user!r} has no answered questions in {bench.name} (users: {known}, …)"
        )
    encoder = default_encoder()
    with progress_bar() as progress:
        examples = examples_from_benchmark(
            dataclasses.replace(bench, questions=mine),
            encoder,
            first_stage=first_stage,
            candidates=candidates,
            cache_dir=default_vector_cache(),
            progress=progress,
        )
        task = progress.add_task("scoring records one at a time", total=len(examples))
        model = load_llm(llm, runtime=llm_runtime)
        points = []
        for example in examples:
            points += record_utility(model, encoder, [example])
            progress.advance(task)
    r, p = pearson(points)
    out_dir.mkdir(parents=True, exist_ok=True)
    title = f"{bench.name}, user {user}: {len(examples)} questions, Pearson r = {r:.3f}"
    plot = plot_utility(points, out_dir / "utility.png", title)
    gold = {(q.id, rid) for q in mine for rid in q.relevant}
    aucs, gap = gold_auc(points, gold), gold_auc_gap(points, gold)
    summary = {
        "user": user,
        "benchmark": bench.name,
        "llm": model.name,
        "pearson_r": r,
        "p": p,
        "gold_auc_utility": aucs and aucs[0],
        "gold_auc_relevance": aucs and aucs[1],
        "gold_auc_gap_ci95": gap and [gap[1], gap[2]],
    }
    (out_dir / "utility.json").write_text(
        json.dumps({**summary, "points": [asdict(x) for x in points]}, indent=2) + "\n", encoding="utf-8"
    )
    helpful = sum(x.utility > 1.0 for x in points)
    out.print(
        f"{len(points)} (question, record) pairs: Pearson r = {r:.3f} (p = {p:.3g}); "
        f"{helpful} records raise the answer's log-likelihood by more than 1 nat. Plot: {plot}"
    )
    if aucs and gap:
        out.print(
            f"gold records ranked above the others (ROC AUC): by utility {aucs[0]:.3f}, "
            f"by relevance {aucs[1]:.3f}; difference {gap[0]:+.3f}, 95% CI over questions "
            f"[{gap[1]:+.3f}, {gap[2]:+.3f}]"
        )


@analyze_app.command("judge")
def judge(
    benchmark: Annotated[BenchmarkName, typer.Option(help="Benchmark with gold records per question.")],
    data: Annotated[Path, typer.Option(help="The benchmark folder in its upstream layout.")],
    questions: Annotated[int, typer.Option(min=1, help="Questions sampled (their users' gold pairs).")] = 60,
    mode: Annotated[str, typer.Option(help="query-likelihood or yes-no.")] = "query-likelihood",
    llm: Annotated[
        str, typer.Option(help="smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b or a model folder.")
    ] = "smollm2-135m",
    llm_runtime: Annotated[Runtime, runtime_option()] = REFERENCE_RUNTIME,
    seed: Annotated[int, typer.Option(help="Seeds which questions and random negatives are drawn.")] = 0,
) -> None:
    """How well the LLM relevance judge (PG-Ret's reward) agrees with a benchmark's gold records.

    Gold records are the positives; dense's two best non-gold records (hard) and one at random are
    the negatives. Prints ROC AUC, the best threshold's TPR and FPR, and pairs judged per second.
    """
    import time

    from personamem.datasets import DataSource
    from personamem.datasets.vectors import default_vector_cache
    from personamem.encoder import default_encoder
    from personamem.eval.judge import RelevanceJudge, calibrate
    from personamem.llm.load import load_llm
    from personamem.trainers.pgret.data import data_from_benchmark
    from personamem.trainers.pgret.trainer import calibration_pairs

    if mode not in ("query-likelihood", "yes-no"):
        raise typer.BadParameter(f"--mode must be query-likelihood or yes-no, got {mode!r}")
    bench = DataSource(benchmark=benchmark, data=data).questions()
    with progress_bar() as progress:
        logged = data_from_benchmark(
            bench, default_encoder(), cache_dir=default_vector_cache(), progress=progress
        )
    pairs, labels = calibration_pairs(logged, queries=questions, seed=seed)
    scorer = RelevanceJudge(load_llm(llm, runtime=llm_runtime), mode=mode)  # type: ignore[arg-type]  # checked above
    start = time.perf_counter()
    calibration = calibrate(scorer.margins(pairs), labels)
    seconds = time.perf_counter() - start
    out.print(
        f"judge {scorer.llm.name} ({mode}) on {bench.name}: AUC {calibration.auc:.3f} over "
        f"{calibration.pairs} pairs ({sum(labels)} gold); at margin ≥ {calibration.threshold:.2f}: "
        f"TPR {calibration.tpr:.2f}, FPR {calibration.fpr:.2f}; {len(pairs) / seconds:.1f} pairs/s"
    )


@analyze_app.command("duplicates")
def duplicates(
    data_root: Annotated[Path, typer.Option(help="The folder holding each benchmark's folder.")],
    threshold: Annotated[
        list[float] | None,
        typer.Option(help="Cosine thresholds to count at; repeat. [default: 0.9 0.95 0.99]"),
    ] = None,
) -> None:
    """How many records of each benchmark's users nearly repeat one of the same user's earlier records.

    What ``add``'s near-duplicate check would report (``keep``) or drop (``skip``) on that history,
    counted against the user's earlier records, with exact repeats of the text apart.
    """
    import numpy as np
    from rich.table import Table

    from personamem.datasets import DATASETS, read_questions
    from personamem.datasets.vectors import corpus_vectors, default_vector_cache
    from personamem.encoder import default_encoder

    levels = sorted(threshold or [0.9, 0.95, 0.99])
    encoder = default_encoder()
    table = Table("benchmark", "users", "records", "same text", *(f"cos ≥ {t:g}" for t in levels))
    for spec in DATASETS:
        folder = data_root / str(spec.folder)
        if spec.questions is None or not folder.is_dir():
            continue
        bench = read_questions(spec.name, folder)
        vectors = corpus_vectors(encoder, [r.text for r in bench.records], default_vector_cache())
        rows: dict[str, list[int]] = {}
        for i, record in enumerate(bench.records):
            rows.setdefault(record.user_id, []).append(i)
        same_text, near = 0, [0] * len(levels)
        for indices in rows.values():
            texts = [bench.records[i].text for i in indices]
            same_text += len(texts) - len(set(texts))
            user = vectors[indices]
            cosine = np.tril(user @ user.T, k=-1)  # each record against the user's earlier ones
            best = cosine.max(axis=1) if len(indices) > 1 else np.zeros(1)
            for j, level in enumerate(levels):
                near[j] += int((best >= level).sum())
        n = len(bench.records)
        table.add_row(
            spec.name, str(len(rows)), str(n), str(same_text), *(f"{c} ({c / n:.1%})" for c in near)
        )
    out.print(table)


@analyze_app.command("profile")
def profile(
    data_root: Annotated[
        Path, typer.Option(help="The folder holding the benchmarks (locomo/, personabench/, ...).")
    ],
    benchmark: Annotated[
        list[BenchmarkName] | None,
        typer.Option(
            help="Benchmarks with gold records to measure on (repeatable). [default: locomo personabench]"
        ),
    ] = None,
    duplicate_cosine: Annotated[
        list[float] | None,
        typer.Option(
            help="PipelineConfig.duplicate_cosine values to measure (repeatable). [default: 1.0 0.9]"
        ),
    ] = None,
    diversity: Annotated[
        list[float] | None,
        typer.Option(
            help="PipelineConfig.diversity values, with each duplicate_cosine (repeatable). [default: 0]"
        ),
    ] = None,
    answer_ll: Annotated[
        bool, typer.Option(help="Also score the gold answer's log-likelihood on changed profiles.")
    ] = False,
    llm: Annotated[
        str, typer.Option(help="smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b or a model folder.")
    ] = "qwen2.5-coder-0.5b",
    llm_runtime: Annotated[Runtime, runtime_option()] = REFERENCE_RUNTIME,
    seed: Annotated[
        int, typer.Option(help="Seeds which users are held out (train adapter's --split-seed).")
    ] = 0,
    out_file: Annotated[
        Path,
        typer.Option("--out", help="The report (JSON); answer scores are cached beside it (<out>.ll.jsonl)."),
    ] = Path("personamem-analysis/profile.json"),
) -> None:
    """Recall of gold records in context()'s profile per duplicate_cosine and diversity, on held-out users.

    Each setting is compared with the first stage's top profile_k (the profile before these knobs):
    how many profiles change, the paired difference in recall, ms per context() call and, with
    --answer-ll, the gold answer's log-likelihood under --llm (scored on changed profiles only).
    """
    import shlex

    from pydantic import ValidationError

    from personamem.datasets.vectors import default_vector_cache
    from personamem.encoder import default_encoder
    from personamem.eval.profile_eval import LoglikCache, evaluate_profiles, profile_settings
    from personamem.llm.load import load_llm
    from personamem.pipeline import PipelineConfig

    settings = profile_settings(duplicate_cosine or [1.0, 0.9], diversity or [0.0])
    for setting in settings:
        try:
            PipelineConfig(duplicate_cosine=setting.duplicate_cosine, diversity=setting.diversity)
        except ValidationError as exc:
            raise typer.BadParameter(f"{setting.label}: {exc.errors()[0]['msg']}") from None
    benchmarks = benchmark or [BenchmarkName("locomo"), BenchmarkName("personabench")]
    model = load_llm(llm, runtime=llm_runtime) if answer_ll else None
    cache = LoglikCache(out_file.with_suffix(".ll.jsonl"), f"{model.name} ({llm_runtime})") if model else None
    with progress_bar() as progress:
        report = evaluate_profiles(
            data_root,
            benchmarks,
            settings,
            default_encoder(),
            llm=model,
            cache=cache,
            seed=seed,
            cache_dir=default_vector_cache(),
            progress=progress,
        )
    given = ["--data-root", str(data_root)]
    given += [arg for b in benchmarks for arg in ("--benchmark", b.value)]
    given += [
        arg
        for c in dict.fromkeys(s.duplicate_cosine for s in settings)
        for arg in ("--duplicate-cosine", f"{c:g}")
    ]
    given += [arg for d in dict.fromkeys(s.diversity for s in settings) for arg in ("--diversity", f"{d:g}")]
    given += ["--answer-ll", "--llm", llm, "--llm-runtime", llm_runtime] if answer_ll else []
    given += [] if seed == 0 else ["--seed", str(seed)]
    report.command = shlex.join(["personamem", "analyze", "profile", *given, "--out", str(out_file)])
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
    out.print(report.markdown(), markup=False, soft_wrap=True)
    out.print(f"Report: {out_file}")


@analyze_app.command("improve")
def improve_gain(
    data_root: Annotated[
        Path, typer.Option(help="The folder holding the benchmarks (locomo/, personabench/, ...).")
    ],
    benchmark: Annotated[
        list[BenchmarkName] | None,
        typer.Option(help="Benchmarks to run improve on (repeatable). [default: locomo personabench]"),
    ] = None,
    signal: Annotated[
        list[str] | None,
        typer.Option(
            help="feedback (a share of all questions logged, their served gold reported), answers (the "
            "same, reporting only the reference answer), llm-answers (the answer --answer-llm writes "
            "from the served records) or synthetic (improve's LLM questions, nothing logged); "
            "repeatable. [default: feedback]"
        ),
    ] = None,
    share: Annotated[
        float,
        typer.Option(min=0.01, max=1.0, help="With feedback or answers: the share of all questions logged."),
    ] = 0.2,
    seeds: Annotated[int, typer.Option(min=1, help="improve's seeds 0..N-1 (and the logged calls').")] = 3,
    llm: Annotated[
        str, typer.Option(help="improve's question writer where it writes synthetic questions.")
    ] = "smollm2-135m",
    max_synthetic: Annotated[int, typer.Option(min=1, help="improve's --max-synthetic.")] = 600,
    answer_llm: Annotated[
        str, typer.Option(help="With llm-answers: the LLM that answers from the served records.")
    ] = "qwen2.5-coder-1.5b",
    answer_runtime: Annotated[Runtime, runtime_option()] = "ctranslate2",
    ranker: Annotated[
        str,
        typer.Option(
            help="The store's live ranker before improve, which it is compared with: auto (the shipped "
            "default's) or a ranker folder, e.g. one trained without the benchmark."
        ),
    ] = "auto",
    synthetic_live: Annotated[
        bool,
        typer.Option(
            "--synthetic-live",
            help="improve's --synthetic-live: let candidates learned from synthetic questions go live.",
        ),
    ] = False,
    out_file: Annotated[
        Path,
        typer.Option("--out", help="The report (JSON); trials are kept beside it (<out>.trials.jsonl)."),
    ] = Path("personamem-analysis/improve.json"),
) -> None:
    """What personamem improve gains on held-out users, from feedback on a share of calls or from no label.

    Per benchmark and seed: a store of all its users, the logged calls (with feedback), improve, then
    the store's live pipeline after improve against before it on the held-out users' unlogged questions
    (recall@5/10, nDCG@10, MRR; paired t-test). Each finished trial is kept, so a rerun resumes.
    """
    import shlex

    from personamem.datasets.vectors import default_vector_cache
    from personamem.encoder import default_encoder
    from personamem.eval import improve_eval

    signals = signal or ["feedback"]
    unknown = sorted(set(signals) - {"feedback", "answers", "llm-answers", "synthetic"})
    if unknown:
        raise typer.BadParameter(f"--signal {unknown[0]!r}: use feedback, answers, llm-answers or synthetic")
    benchmarks = benchmark or [BenchmarkName("locomo"), BenchmarkName("personabench")]
    trials_file = out_file.with_suffix(".trials.jsonl")
    trials = improve_eval.load_trials(trials_file)
    done = {t.key for t in trials}
    encoder = default_encoder()
    settings = {"llm": llm, "max_synthetic": max_synthetic, "synthetic_live": synthetic_live}
    writer = None
    if "llm-answers" in signals:
        from personamem.llm.load import load_llm

        writer = load_llm(answer_llm, runtime=answer_runtime)
    with progress_bar() as progress:
        for name in benchmarks:
            loaded = improve_eval.read_benchmark(data_root, name)
            for kind in signals:
                used_share = share if kind in improve_eval.LOGGED else 0.0
                for seed in range(seeds):
                    if (name.value, kind, seed, used_share, ranker, synthetic_live) in done:
                        continue
                    trial = improve_eval.improve_trial(
                        loaded,
                        name=name.value,
                        signal=kind,
                        seed=seed,
                        share=used_share,
                        settings=settings,
                        encoder=encoder,
                        ranker=ranker,
                        cache_dir=default_vector_cache(),
                        progress=progress,
                        writer=writer,
                    )
                    improve_eval.append_trial(trials_file, trial)
                    trials.append(trial)
    given = ["--data-root", str(data_root), *[a for b in benchmarks for a in ("--benchmark", b.value)]]
    given += [a for k in signals for a in ("--signal", k)] + ["--share", f"{share:g}", "--seeds", str(seeds)]
    given += ["--llm", llm, "--max-synthetic", str(max_synthetic)]
    given += ["--answer-llm", answer_llm, "--answer-runtime", answer_runtime] if writer is not None else []
    given += [] if ranker == "auto" else ["--ranker", ranker]
    given += ["--synthetic-live"] if synthetic_live else []
    asked = {(b.value, k, ranker, synthetic_live) for b in benchmarks for k in signals}
    trials = [t for t in trials if (t.benchmark, t.signal, t.ranker, t.synthetic_live) in asked]
    rows = improve_eval.summarize_trials([t for t in trials if t.seed < seeds])
    report = {
        "command": shlex.join(["personamem", "analyze", "improve", *given, "--out", str(out_file)]),
        "rows": rows,
        "trials": [{k: v for k, v in asdict(t).items() if k != "scores"} for t in trials],
    }
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    out.print(_improve_markdown(rows), markup=False, soft_wrap=True)
    out.print(f"Report: {out_file}")


def _improve_markdown(rows: list[dict[str, Any]]) -> str:
    """The report's table: after improve (mean ± std over seeds) vs before it, difference and paired p."""
    from personamem.eval.improve_eval import METRICS

    lines = [
        "| benchmark | signal | went live | calls with feedback | " + " | ".join(METRICS) + " |",
        "|---|---|---|---|" + "---|" * len(METRICS),
    ]
    for row in rows:
        cells = []
        for metric in METRICS:
            m = row[metric]
            cells.append(
                f"{m['improved']:.3f} ± {m['improved_std']:.3f} vs {m['default']:.3f} "
                f"({m['difference']:+.3f}, p {m['p']:.2g})"
            )
        feedback = {
            "feedback": f"{row['reported_share']:.0%} of {row['calls']:.0f} "
            f"(gold reported {row['gold_reported']:.0%})",
            "answers": f"{row['reported_share']:.0%} of {row['calls']:.0f} (answers only)",
            "llm-answers": f"{row['reported_share']:.0%} of {row['calls']:.0f} (the LLM's answers only)",
        }.get(str(row["signal"]), "none")
        used = row["learned_from"]
        signal = str(row["signal"])
        if used != [signal] and not (signal in ("answers", "llm-answers") and used == ["feedback"]):
            signal += f" (learned from {', '.join(map(str, used))})"
        lines.append(
            f"| {row['benchmark']} | {signal} | {row['live']}/{row['seeds']} | {feedback} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


@analyze_app.command("ranker")
def ranker_gate(
    ctx: typer.Context,
    user: Annotated[
        list[str] | None, typer.Option(help="Users to show (repeatable). [default: every user]")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Which users of this store the learned ranker's trees serve, and why (the gate's reason per user).

    The trees serve a user only where the history is shaped like a benchmark they gained on (record
    length, records past the encoder's window, who wrote them, names, dates); everyone else gets the
    score fusion, and a user whose ranker signals outgrow the store's cache gets hybrid. The score
    fusion reads the query adapter's cosine only for a history shaped like a benchmark the adapter
    gained on (the ranker's adapter gate), the base cosine elsewhere. Read from the store's live
    pipeline.
    """
    from personamem.retrieval.ranker_gate import PROFILE

    with ctx.obj.open_live() as mem:
        pipeline = mem.pipeline()
        served = pipeline.ranker
        users = user or mem.users()
        rows = []
        for user_id in users:
            if served is None:
                rows.append({"user_id": user_id, "trees": False, "reason": "the live pipeline has no ranker"})
                continue
            shape = served.profile(user_id)  # builds the user's signals, once
            decision, hybrid = served.decide(user_id, shape), not served.fits(user_id)
            adapter = served.model.decide_adapter(shape)
            rows.append(
                {
                    "user_id": user_id,
                    "trees": decision.serves,
                    "hybrid": hybrid,
                    "reason": decision.reason,
                    "adapter": adapter.serves,
                    "adapter_reason": adapter.reason,
                    **shape,
                }
            )
    if as_json:
        out.print_json(json.dumps({"ranker": pipeline.ranker_name, "users": rows}))
        return
    out.print(f"ranker: {pipeline.ranker_name or 'none'}")
    for row in rows:
        verdict = "trees" if row["trees"] else "hybrid" if row.get("hybrid") else "the score fusion"
        out.print(f"{row['user_id']}: {verdict} ({row['reason']})", markup=False, soft_wrap=True)
        if "adapter" in row:
            cosine = "the adapter's cosine" if row["adapter"] else "the base cosine"
            out.print(f"  reads {cosine} ({row['adapter_reason']})", markup=False, soft_wrap=True)
        if PROFILE[0] in row:
            out.print("  " + ", ".join(f"{name} {row[name]:.2f}" for name in PROFILE), markup=False)


@analyze_app.command("interleaving")
def interleaving_agreement(
    data_root: Annotated[
        Path, typer.Option(help="The folder holding the benchmarks (locomo/, personabench/, ...).")
    ],
    benchmark: Annotated[
        list[BenchmarkName] | None,
        typer.Option(help="Benchmarks to simulate on (repeatable). [default: locomo personabench ikat]"),
    ] = None,
    feedback: Annotated[
        list[str] | None,
        typer.Option(
            help="gold (the user reports the gold records served) or answers (only the reference answer, "
            "attributed); repeatable. [default: gold answers]"
        ),
    ] = None,
    trials: Annotated[int, typer.Option(min=1, help="Simulated trials per pair of methods.")] = 20,
    calls: Annotated[int, typer.Option(min=10, help="Most interleaved calls a trial may take.")] = 1000,
    out_file: Annotated[
        Path, typer.Option("--out", help="The report (JSON); pairs are kept beside it (<out>.pairs.jsonl).")
    ] = Path("personamem-analysis/interleaving.json"),
) -> None:
    """Does interleaving on live traffic reach the decision the held-out data reaches?

    Per benchmark, every pair of dense, bm25, hybrid, the default and the default without its trees:
    the paired t-test over the held-out users' questions (nDCG@10) against simulated trials in which
    the pair is served interleaved (team draft) and credited from feedback, stopped by the sign test
    the store uses. Each finished benchmark is kept, so a rerun resumes.
    """
    import shlex

    from personamem.datasets.vectors import default_vector_cache
    from personamem.encoder import default_encoder
    from personamem.eval.improve_eval import read_benchmark
    from personamem.eval.interleaving_eval import PairResult, interleaving_trials, summarize_pairs

    kinds = feedback or ["gold", "answers"]
    unknown = sorted(set(kinds) - {"gold", "answers"})
    if unknown:
        raise typer.BadParameter(f"--feedback {unknown[0]!r}: use gold or answers")
    benchmarks = benchmark or [BenchmarkName(n) for n in ("locomo", "personabench", "ikat")]
    pairs_file = out_file.with_suffix(".pairs.jsonl")
    kept = (
        [PairResult(**json.loads(line)) for line in pairs_file.read_text().splitlines()]
        if pairs_file.exists()
        else []
    )
    done = {(r.benchmark, r.feedback) for r in kept if len(r.decisions) == trials and max(r.calls) <= calls}
    encoder = default_encoder()
    with progress_bar() as progress:
        for name in benchmarks:
            loaded = None
            for kind in kinds:
                if (name.value, kind) in done:
                    continue
                loaded = loaded or read_benchmark(data_root, name)
                found = interleaving_trials(
                    loaded,
                    name=name.value,
                    feedback=kind,
                    trials=trials,
                    calls=calls,
                    encoder=encoder,
                    cache_dir=default_vector_cache(),
                    progress=progress,
                )
                pairs_file.parent.mkdir(parents=True, exist_ok=True)
                with pairs_file.open("a", encoding="utf-8") as handle:
                    handle.writelines(json.dumps(asdict(r)) + "\n" for r in found)
                kept += found
    asked = {(b.value, k) for b in benchmarks for k in kinds}
    results = [r for r in kept if (r.benchmark, r.feedback) in asked and len(r.decisions) == trials]
    rows = [
        {
            "benchmark": b.value,
            "feedback": k,
            **summarize_pairs([r for r in results if (r.benchmark, r.feedback) == (b.value, k)]),
        }
        for b in benchmarks
        for k in kinds
    ]
    rows += [
        {"benchmark": "all", "feedback": k, **summarize_pairs([r for r in results if r.feedback == k])}
        for k in kinds
    ]
    given = ["--data-root", str(data_root), *[a for b in benchmarks for a in ("--benchmark", b.value)]]
    given += [a for k in kinds for a in ("--feedback", k)] + ["--trials", str(trials), "--calls", str(calls)]
    report = {
        "command": shlex.join(["personamem", "analyze", "interleaving", *given, "--out", str(out_file)]),
        "rows": rows,
        "pairs": [asdict(r) for r in results],
    }
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    lines = [
        "| benchmark | feedback | trials (decided pairs) | agree | opposite | undecided | "
        "decided on undecided pairs | median calls |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['benchmark']} | {row['feedback']} | {row['trials_on_decided_pairs']} | "
            f"{row['agreement']:.0%} | {row['opposite']:.0%} | {row['undecided']:.0%} | "
            f"{row['decided_anyway']:.0%} of {row['trials_on_undecided_pairs']} "
            f"({row['decided_anyway_with_the_mean']:.0%} with the better mean) | {row['median_calls']:.0f} |"
        )
    out.print("\n".join(lines), markup=False, soft_wrap=True)
    out.print(f"Report: {out_file}")
