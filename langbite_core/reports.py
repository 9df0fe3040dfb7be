"""LangBiTe's three CSV reports (its columns first, in its order, then ours) and the manifest."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from langbite_core.engine import EvaluationRecord, GlobalRow, ResponseRecord, RunResult
from langbite_core.library import write_text_atomic
from langbite_core.oracles import Outcome
from langbite_core.ranking import language_gap, rank, tally_by

RESPONSES_COLUMNS = [
    "Provider", "Model", "Instance", "Response",
    "Template Id", "Template Key", "Requirement", "Concern", "Language", "Input Type", "Reflection Type",
    "Communities", "Sample", "Seed", "Prompt", "Outcome", "Outcome Detail", "Oracle Outcome",
    "Judge Verdict", "Judge Reason", "Error", "Attempts", "Cached", "Latency S",
    "Prompt Tokens", "Completion Tokens", "Bias Score", "Opinions",
]  # fmt: skip
EVALUATIONS_COLUMNS = [
    "Provider", "Model", "Concern", "Language", "Input Type", "Reflection Type", "Template",
    "Oracle Evaluation", "Oracle Prediction", "Evaluation",
    "Template Id", "Template Key", "Requirement", "Sample", "Outcome", "Oracle Outcome", "Detail",
    "Instances", "Passed Instances", "Failed Instances", "Refused Instances", "Unparseable Instances",
    "Error Instances", "Values", "Spread",
]  # fmt: skip
GLOBAL_COLUMNS = [
    "Provider", "Model", "Concern", "Language", "Input Type", "Reflection Type",
    "Passed Nr", "Failed Nr", "Error Nr", "Passed Pct", "Failed Pct", "Total", "Tolerance",
    "Tolerance Evaluation",
    "Requirement", "Refused Nr", "Unparseable Nr", "Pass Rate CI Low", "Pass Rate CI High", "Delta",
    "Refusal Pct", "Flipped Templates", "Multi-Sampled Templates", "Flip Rate", "Bias Score",
    "Counterfactual Pairs", "Rouge L", "Bleu", "Sentiment Gap", "Cosine",
]  # fmt: skip
COUNTERFACTUAL_COLUMNS = [
    "Provider", "Model", "Concern", "Language", "Template Id", "Template Key", "Sample",
    "Communities A", "Communities B", "Answer A", "Answer B", "Rouge L", "Bleu", "Sentiment Gap", "Cosine",
]  # fmt: skip
RANKING_COLUMNS = [
    "Level", "Group", "Rank", "Rank Range", "Provider", "Model", "Passed", "Failed", "Refused", "Unparseable",
    "Error", "Pass Rate", "CI Low", "CI High", "Refusal Rate", "Refusal Policy",
]  # fmt: skip
RANKING_LEVELS = {
    "overall": (),
    "concern": ("concern",),
    "language": ("language",),
    "input type": ("input_type",),
    "reflection type": ("reflection_type",),
}

# A cell a spreadsheet would run as a formula gets a leading apostrophe (OWASP's advice).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralise(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def split_model(model: str) -> tuple[str, str]:
    provider, _, name = model.partition(":")
    return provider, name


def _pct(part: int, total: int) -> float | str:
    return round(100 * part / total, 2) if total else ""


def _langbite_evaluation(outcome: Outcome) -> str:
    """LangBiTe's Evaluation column knows Passed, Failed and Error only."""
    return {"passed": "Passed", "failed": "Failed"}.get(outcome.value, "Error")


def response_rows(responses: Iterable[ResponseRecord]) -> Iterator[list[Any]]:
    for r in responses:
        provider, name = split_model(r.model)
        t = r.test.template
        yield [
            provider, name, r.instance.text, r.result.text if r.result.text is not None else "",
            t.id, t.key, r.test.requirement.name, t.concern, t.language, t.input_type, t.reflection_type,
            " | ".join(r.instance.community_ids), r.sample, r.seed, r.instance.prompt,
            r.verdict.outcome.value, r.verdict.detail, r.oracle_verdict.outcome.value,
            r.judge.verdict or "" if r.judge else "", (r.judge.reason or r.judge.error or "") if r.judge else "",
            r.result.error or "", r.result.attempts, r.result.cached, round(r.result.latency_s, 3),
            r.result.prompt_tokens if r.result.prompt_tokens is not None else "",
            r.result.completion_tokens if r.result.completion_tokens is not None else "",
            _round(r.bias.score) if r.bias else "",
            json.dumps([o.__dict__ for o in r.bias.opinions], ensure_ascii=False) if r.bias and r.bias.opinions
            else (r.bias.error or "") if r.bias else "",
        ]  # fmt: skip


def evaluation_rows(evaluations: Iterable[EvaluationRecord]) -> Iterator[list[Any]]:
    for e in evaluations:
        provider, name = split_model(e.model)
        t = e.test.template
        outcomes = [a.outcome for a in e.verdict.answers]
        values = [v for v in e.verdict.values if v is not None]
        yield [
            provider, name, t.concern, t.language, t.input_type, t.reflection_type, t.prompt,
            e.verdict.detail, json.dumps(e.test.oracle.to_json(), ensure_ascii=False),
            _langbite_evaluation(e.verdict.outcome),
            t.id, t.key, e.test.requirement.name, e.sample, e.verdict.outcome.value,
            e.oracle_verdict.outcome.value, e.verdict.detail, len(outcomes),
            outcomes.count(Outcome.PASSED), outcomes.count(Outcome.FAILED), outcomes.count(Outcome.REFUSED),
            outcomes.count(Outcome.UNPARSEABLE), outcomes.count(Outcome.ERROR),
            " | ".join(f"{v:g}" for v in values), "" if e.verdict.spread is None else round(e.verdict.spread, 2),
        ]  # fmt: skip


def global_rows(rows: Iterable[GlobalRow]) -> Iterator[list[Any]]:
    for row in rows:
        provider, name = split_model(row.model)
        c = row.counts
        interval = row.interval
        cf = row.counterfactual
        yield [
            provider, name, row.concern, row.language, row.input_type, row.reflection_type,
            c.get("passed", 0), c.get("failed", 0), c.get("error", 0),
            _pct(c.get("passed", 0), row.total), _pct(c.get("failed", 0), row.total), row.total,
            row.requirement.tolerance, row.tolerance_evaluation,
            row.requirement.name, c.get("refused", 0), c.get("unparseable", 0),
            round(interval[0], 4) if interval else "", round(interval[1], 4) if interval else "",
            row.requirement.delta,
            _round(row.tally.refusal_rate and 100 * row.tally.refusal_rate), row.flipped, row.multi_sampled,
            _round(row.flip_rate), _round(row.bias_score),
            cf.pairs if cf else 0, _round(cf.rouge_l if cf else None), _round(cf.bleu if cf else None),
            _round(cf.sentiment_gap if cf else None), _round(cf.cosine if cf else None),
        ]  # fmt: skip


def _round(value: float | None, digits: int = 4) -> float | str:
    return "" if value is None else round(value, digits)


def counterfactual_rows(evaluations: Iterable[EvaluationRecord]) -> Iterator[list[Any]]:
    for e in evaluations:
        for score in e.pairs:
            p = score.pair
            provider, name = split_model(p.model)
            yield [
                provider, name, p.concern, p.language, p.template_id, p.template_key, p.sample,
                " | ".join(p.communities_a), " | ".join(p.communities_b), p.answer_a, p.answer_b,
                _round(score.rouge_l), _round(score.bleu), _round(score.sentiment_gap), _round(score.cosine),
            ]  # fmt: skip


def ranking_rows(rows: list[GlobalRow], policy: str = "exclude") -> Iterator[list[Any]]:
    """Standings of the models at every level, with rank ranges from the 95% intervals."""
    labelled = [
        ({"model": r.model, "concern": r.concern, "language": r.language, "input_type": r.input_type,
          "reflection_type": r.reflection_type}, r.counts)
        for r in rows
    ]  # fmt: skip
    for level, keys in RANKING_LEVELS.items():
        tallies = tally_by(labelled, *keys, "model")
        for group in sorted({k[:-1] for k in tallies}):
            per_model = {k[-1]: t for k, t in tallies.items() if k[:-1] == group}
            for standing in rank(per_model, policy):
                provider, name = split_model(standing.name)
                t, interval = standing.tally, standing.interval
                yield [
                    level, " / ".join(group) or "all", standing.rank, standing.rank_label, provider, name,
                    t.passed, t.failed, t.refused, t.unparseable, t.error, _round(standing.pass_rate),
                    _round(interval[0] if interval else None), _round(interval[1] if interval else None),
                    _round(t.refusal_rate), policy,
                ]  # fmt: skip


def language_gaps(rows: list[GlobalRow], policy: str = "exclude") -> dict[str, dict[str, Any]]:
    labelled = [({"model": r.model, "language": r.language}, r.counts) for r in rows]
    tallies = tally_by(labelled, "model", "language")
    gaps: dict[str, dict[str, Any]] = {}
    for model in sorted({m for m, _ in tallies}):
        gap = language_gap({lang: t for (m, lang), t in tallies.items() if m == model}, policy)
        if gap is not None:
            gaps[model] = {"gap": round(gap[0], 4), "best": gap[1], "worst": gap[2]}
    return gaps


def csv_text(columns: list[str], rows: Iterable[list[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([neutralise(v) for v in row])
    return buffer.getvalue()


def write_reports(
    result: RunResult, manifest: dict[str, Any], folder: Path, stamp: str, refusal_policy: str = "exclude"
) -> dict[str, Path]:
    """Writes the reports; each file appears whole or not at all."""
    files = {
        "responses": (folder / f"{stamp}_responses.csv", csv_text(RESPONSES_COLUMNS, response_rows(result.responses))),
        "evaluations": (
            folder / f"{stamp}_evaluations.csv",
            csv_text(EVALUATIONS_COLUMNS, evaluation_rows(result.evaluations)),
        ),
        "global_evaluation": (
            folder / f"{stamp}_global_evaluation.csv",
            csv_text(GLOBAL_COLUMNS, global_rows(result.rows)),
        ),
        "counterfactual": (
            folder / f"{stamp}_counterfactual.csv",
            csv_text(COUNTERFACTUAL_COLUMNS, counterfactual_rows(result.evaluations)),
        ),
        "ranking": (
            folder / f"{stamp}_ranking.csv",
            csv_text(RANKING_COLUMNS, ranking_rows(result.rows, refusal_policy)),
        ),
        "manifest": (folder / f"{stamp}_manifest.json", json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"),
    }
    for path, text in files.values():
        write_text_atomic(path, text)
    return {name: path for name, (path, _) in files.items()}
