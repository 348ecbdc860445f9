"""``personamem context`` and the pipeline config file, driven through ``main(argv)``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.cli import main
from personamem.contract import Context
from personamem.testing.contracts import CONTEXT_KEYS, HIT_KEYS, RECORD_KEYS


@pytest.fixture
def store(tmp_path: Path, encoder: SentenceEncoder) -> list[str]:
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as mem:
        mem.add_many(
            [
                {"text": "I'm allergic to cats."},
                {"text": "I love jazz and play the saxophone."},
                {"text": "My dog Rex is a beagle."},
                {"text": "I cook ramen on Fridays."},
            ],
            user_id="ana",
        )
    return ["--store", str(tmp_path / "store")]


def test_context_prints_the_profile_and_its_json(
    store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*store, "context", "--user", "ana", "which pets do I have?"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == 4 and all(line.startswith("- ") for line in lines)
    assert "4 record(s)" in captured.err and "first_stage" in captured.err

    assert (
        main([*store, "context", "--user", "ana", "which pets do I have?", "--json", "--budget-tokens", "12"])
        == 0
    )
    body = json.loads(capsys.readouterr().out)
    assert body["tokens"] <= body["budget_tokens"] == 12 and len(body["records"]) + len(body["dropped"]) == 4
    assert body["text"].splitlines() == [f"- {r['text']}" for r in body["records"]]
    # the REST API's shape: what Context.to_json gives and a client reads back
    assert set(body) == CONTEXT_KEYS and Context.model_validate(body).to_json() == body
    assert all(set(hit) == HIT_KEYS for hit in body["records"] + body["dropped"])


def test_search_prints_one_rest_shaped_hit_a_line(
    store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*store, "search", "--user", "ana", "which pets do I have?", "-k", "2", "--json"]) == 0
    hits = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [hit["rank"] for hit in hits] == [1, 2] and all(set(hit) == HIT_KEYS for hit in hits)
    assert all(set(hit["record"]) == RECORD_KEYS and hit["record"]["user_id"] == "ana" for hit in hits)


def test_a_config_file_configures_search_and_context(
    tmp_path: Path, store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "personamem.toml"
    config.write_text('[pipeline]\nfirst_stage = "dense"\nprofile_k = 2\n', encoding="utf-8")
    assert main([*store, "--config", str(config), "context", "--user", "ana", "pets?", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["records"]) == 2

    config.write_text("[pipeline]\nprofile_k = 0\n", encoding="utf-8")
    assert main([*store, "--config", str(config), "context", "--user", "ana", "pets?"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        f"{config}: profile_k: Input should be greater than or equal to 1" in err and "Traceback" not in err
    )

    config.write_text("[pipeline]\nselectr = 'relevance'\n", encoding="utf-8")
    assert main([*store, "--config", str(config), "search", "--user", "ana", "pets?"]) == 2
    assert "selectr: Extra inputs are not permitted" in " ".join(capsys.readouterr().err.split())


def test_a_personamem_toml_in_the_working_directory_is_read(
    tmp_path: Path, store: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "personamem.toml").write_text("[pipeline]\nprofile_k = 1\n", encoding="utf-8")
    monkeypatch.chdir(work)
    assert main([*store, "context", "--user", "ana", "music?", "--json"]) == 0
    assert [r["text"] for r in json.loads(capsys.readouterr().out)["records"]] == [
        "I love jazz and play the saxophone."
    ]


def test_an_llm_method_without_an_llm_is_a_usage_error(
    store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*store, "context", "--user", "ana", "pets?", "--method", "pbr"]) == 2
    assert "method 'pbr' needs a frozen LLM" in " ".join(capsys.readouterr().err.split())
