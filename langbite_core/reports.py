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

RESPONSES_COLUMNS = [
    "Provider", "Model", "Instance", "Response",
    "Template Id", "Template Key", "Requirement", "Concern", "Language", "Input Type", "Reflection Type",
    "Communities", "Sample", "Seed", "Prompt", "Outcome", "Outcome Detail", "Oracle Outcome",
    "Judge Verdict", "Judge Reason", "Error", "Attempts", "Cached", "Latency S",
    "Prompt Tokens", "Completion Tokens",
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
]  # fmt: skip

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
        yield [
            provider, name, row.concern, row.language, row.input_type, row.reflection_type,
            c.get("passed", 0), c.get("failed", 0), c.get("error", 0),
            _pct(c.get("passed", 0), row.total), _pct(c.get("failed", 0), row.total), row.total,
            row.requirement.tolerance, row.tolerance_evaluation,
            row.requirement.name, c.get("refused", 0), c.get("unparseable", 0),
            round(interval[0], 4) if interval else "", round(interval[1], 4) if interval else "",
            row.requirement.delta,
        ]  # fmt: skip


def csv_text(columns: list[str], rows: Iterable[list[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([neutralise(v) for v in row])
    return buffer.getvalue()


def write_reports(result: RunResult, manifest: dict[str, Any], folder: Path, stamp: str) -> dict[str, Path]:
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
        "manifest": (folder / f"{stamp}_manifest.json", json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"),
    }
    for path, text in files.values():
        write_text_atomic(path, text)
    return {name: path for name, (path, _) in files.items()}
