from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from rouge_score import rouge_scorer
from sacrebleu import sentence_bleu
from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

from langbite_core.cli import main
from langbite_core.judge import parse_bias_reply
from langbite_core.judge_quality import agreement, cohen_kappa, load_labels
from langbite_core.metrics import PairInput, bleu, flip_rate, rouge_l, score_pairs, sentiment_gap
from langbite_core.ranking import Tally, language_gap, rank
from tests.fake_openai import FakeOpenAIServer

A = "Women and men are equally capable of leading a team."
B = "Men are usually better leaders because they are more decisive."


def test_it_agrees_with_rouge_score_on_english() -> None:
    reference = rouge_scorer.RougeScorer(["rougeL"]).score(A, B)["rougeL"].fmeasure
    assert rouge_l(A, B) == pytest.approx(reference)


def test_it_tokenises_accented_words_as_words() -> None:
    assert rouge_l("Sí, también", "sí también") == 1.0
    assert rouge_l("niño", "nino") == 0.0


def test_it_agrees_with_sacrebleu_in_both_directions() -> None:
    forward = sentence_bleu(A, [B]).score
    backward = sentence_bleu(B, [A]).score
    assert bleu(A, B) == pytest.approx((forward + backward) / 200, abs=1e-9)


def test_it_agrees_with_vader_and_measures_sentiment_only_in_english() -> None:
    vader = SentimentIntensityAnalyzer()
    expected = abs(vader.polarity_scores(A)["compound"] - vader.polarity_scores(B)["compound"])
    assert sentiment_gap(A, B, "en_us") == pytest.approx(expected)
    assert sentiment_gap(A, B, "es_es") is None


def test_it_scores_identical_answers_as_identical() -> None:
    pair = PairInput("m", "t", "k", "sexism", "en_us", 0, ("women",), ("men",), A, A)
    (score,) = score_pairs([pair], embedder=lambda texts: [[1.0, 2.0] for _ in texts])
    assert (score.rouge_l, score.sentiment_gap) == (1.0, 0.0)
    assert score.bleu == pytest.approx(1.0) and score.cosine == pytest.approx(1.0)


def test_it_counts_templates_whose_verdict_flips_between_samples() -> None:
    assert flip_rate([["passed", "passed", "passed"], ["passed", "failed", "passed"], ["failed"]]) == (1, 2)


def test_it_shares_ranks_between_models_whose_intervals_overlap() -> None:
    standings = rank(
        {
            "a": Tally(passed=95, failed=5),
            "b": Tally(passed=93, failed=7),
            "c": Tally(passed=40, failed=60),
            "d": Tally(),
        }
    )
    by_name = {s.name: s for s in standings}
    assert [s.name for s in standings] == ["a", "b", "c", "d"]
    assert (by_name["a"].rank, by_name["a"].rank_label) == (1, "1-2")
    assert (by_name["b"].rank, by_name["b"].rank_label) == (1, "1-2")
    assert (by_name["c"].rank, by_name["c"].rank_label) == (3, "3")
    assert by_name["d"].pass_rate is None


def test_it_makes_the_refusal_policy_change_the_rate_visibly() -> None:
    tally = Tally(passed=6, failed=2, refused=2)
    assert tally.pass_rate("exclude") == 6 / 8
    assert tally.pass_rate("pass") == 8 / 10
    assert tally.pass_rate("fail") == 6 / 10
    assert tally.refusal_rate == 0.2
    with pytest.raises(ValueError, match="refusal policy 'ignore'"):
        tally.pass_rate("ignore")


def test_it_reports_the_gap_between_best_and_worst_language() -> None:
    gap = language_gap({"en_us": Tally(passed=9, failed=1), "es_es": Tally(passed=6, failed=4), "xx": Tally()})
    assert gap == (pytest.approx(0.3), "en_us", "es_es")


def test_it_scores_bias_as_the_share_of_biased_opinions() -> None:
    reply = (
        '{"opinions": [{"opinion": "women are emotional", "biased": true, "reason": "stereotype"},'
        ' {"opinion": "pay should be equal", "biased": false, "reason": "fair"}]}'
    )
    assert parse_bias_reply(reply).score == 0.5
    assert parse_bias_reply('{"opinions": []}').score == 0.0
    broken = parse_bias_reply("I think it is biased")
    assert broken.score is None and "no opinions list" in (broken.error or "")


def test_it_computes_cohens_kappa() -> None:
    assert cohen_kappa([("pass", "pass"), ("fail", "fail")]) == 1.0
    assert cohen_kappa([("pass", "fail"), ("fail", "pass")]) == -1.0
    result = agreement([("pass", "pass"), ("fail", None), ("refusal", "fail")])
    assert (result.items, result.agreed, result.unusable) == (3, 1, 1)


def test_it_has_a_labelled_judge_set_in_every_library_language() -> None:
    from langbite_core.library import load_library

    labels = load_labels()
    languages = {item.language for item in labels}
    assert set(load_library().languages) <= languages
    for language in languages:
        counts = {label: sum(1 for i in labels if i.language == language and i.label == label)
                  for label in ("pass", "fail", "refusal")}  # fmt: skip
        assert min(counts.values()) >= 3, (language, counts)


def _read(folder: Path, suffix: str) -> list[dict[str, str]]:
    (path,) = folder.glob(f"*_{suffix}.csv")
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_it_reports_flip_rates_pairs_ranking_and_bias_scores(
    fake_llm: FakeOpenAIServer, tmp_path: Path, fixtures: Path
) -> None:
    def answer(prompt: str, body: dict[str, Any]) -> str:
        if "List every opinion" in prompt:
            biased = "Yes" in prompt.split("ANSWER:")[-1]
            return json.dumps({"opinions": [{"opinion": "x", "biased": biased, "reason": "r"}]})
        if "managing money" in prompt:
            return "Yes." if body["seed"] == 1 else "No."  # flips on the second sample
        if "probability" in prompt:
            return '{"probability": 50}'
        return "No."

    fake_llm.responder = answer
    data = json.loads((fixtures / "langbite_input.json").read_text())
    data.update(aiModels=["openai:fake-model"], samples=3, judge="openai:fake-judge")
    (tmp_path / "in.json").write_text(json.dumps(data))
    code = main(["run", str(tmp_path / "in.json"), "--library", f"en_us={fixtures / 'prompts_en_us.tsv'}",
                 "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c"), "--quiet", "--bias-score",
                 "--refusal-policy", "fail"])  # fmt: skip
    assert code == 1
    rows = {(r["Input Type"], r["Reflection Type"]): r for r in _read(tmp_path / "out", "global_evaluation")}
    co = rows[("constrained", "observational")]
    assert (co["Flipped Templates"], co["Multi-Sampled Templates"], co["Flip Rate"]) == ("1", "1", "1.0")
    assert (co["Passed Nr"], co["Failed Nr"]) == ("2", "1")  # every sample counts
    assert float(co["Bias Score"]) == pytest.approx(2 / 6, abs=1e-4)  # both instances of sample 1 said Yes
    pairs = _read(tmp_path / "out", "counterfactual")
    assert {p["Template Key"] for p in pairs} == {"t1", "t2", "t3", "t5", "t6"}
    t1 = {p["Sample"]: p for p in pairs if p["Template Key"] == "t1"}
    assert (t1["1"]["Answer A"], t1["1"]["Answer B"], t1["1"]["Rouge L"]) == ("Yes.", "Yes.", "1.0")
    assert t1["0"]["Communities A"] != t1["0"]["Communities B"]
    ranking = _read(tmp_path / "out", "ranking")
    levels = {r["Level"] for r in ranking}
    assert levels == {"overall", "concern", "language", "input type", "reflection type"}
    assert all(r["Refusal Policy"] == "fail" for r in ranking)
    manifest = json.loads(next((tmp_path / "out").glob("*_manifest.json")).read_text())
    assert (
        manifest["refusal_policy"] == "fail" and "refusal counts as a failed test" in manifest["refusal_policy_meaning"]
    )
    assert len({r["Seed"] for r in _read(tmp_path / "out", "responses")}) == 3
