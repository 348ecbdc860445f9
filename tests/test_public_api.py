import personamem


def test_public_api_is_pinned() -> None:
    assert personamem.__all__ == [
        "BM25Retriever",
        "ConsistencyReport",
        "DenseRetriever",
        "Encoder",
        "Hit",
        "HybridRetriever",
        "IngestError",
        "InvalidRecordError",
        "MissingExtraError",
        "PersonaMem",
        "PersonaMemError",
        "ProfileSelector",
        "Record",
        "RecordKind",
        "RelevanceSelector",
        "Retriever",
        "SearchMethod",
        "SentenceEncoder",
        "Store",
        "StoreError",
        "TokenStates",
        "TruncationWarning",
        "default_encoder",
    ]
    for name in personamem.__all__:
        assert getattr(personamem, name) is not None


def test_errors_share_one_base() -> None:
    for error in (
        personamem.IngestError,
        personamem.InvalidRecordError,
        personamem.MissingExtraError,
        personamem.StoreError,
    ):
        assert issubclass(error, personamem.PersonaMemError)


def test_eval_api_is_pinned() -> None:
    import personamem.eval

    assert personamem.eval.__all__ == [
        "BM25",
        "DEFAULT_METRICS",
        "DENSE",
        "FIRST_STAGE",
        "HYBRID",
        "Benchmark",
        "BenchmarkName",
        "EvalConfig",
        "Method",
        "MethodRun",
        "Question",
        "Report",
        "Skip",
        "build_store",
        "evaluate_method",
        "load_benchmark",
        "run_eval",
    ]
