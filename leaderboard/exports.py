"""Downloads: any table as CSV or JSON, and a run as LangBiTe's three reports plus its manifest.

Everything streams: rows are produced from querysets with iterator(), so exporting a run of a
million answers holds one chunk of rows in memory, not the run.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Avg
from django.http import HttpRequest, StreamingHttpResponse
from django.utils.text import slugify

from langbite_core.engine import GlobalRow
from langbite_core.library import LanguagePack
from langbite_core.metrics import flip_rate
from langbite_core.oracles import OraclePrediction
from langbite_core.ranking import REFUSAL_POLICIES
from langbite_core.reports import (
    COUNTERFACTUAL_COLUMNS,
    EVALUATIONS_COLUMNS,
    GLOBAL_COLUMNS,
    RESPONSES_COLUMNS,
    global_rows,
    language_gaps,
    neutralise,
    split_model,
)
from leaderboard.models import JudgeCheck, PairMeans, Response, Run, RunPrompt, Verdict
from leaderboard.ranking import DEFAULT_POLICY

FORMATS = ("csv", "json")


def requested_format(request: HttpRequest) -> str | None:
    value = request.GET.get("format", "")
    return value if value in FORMATS else None


class _Line:
    """A file-like object whose write() returns the text, for csv.writer in a generator."""

    def write(self, value: str) -> str:
        return value


def csv_lines(columns: list[str], rows: Iterable[Iterable[Any]]) -> Iterator[str]:
    writer = csv.writer(_Line(), lineterminator="\r\n")
    yield "\ufeff"  # so spreadsheet programs read UTF-8 (names, answers in every language)
    yield writer.writerow(columns)
    for row in rows:
        # A cell starting with = + - @ would run as a formula in a spreadsheet: neutralised.
        yield writer.writerow([neutralise(_cell(v)) for v in row])


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return value


def json_lines(columns: list[str], rows: Iterable[Iterable[Any]]) -> Iterator[str]:
    yield "["
    for i, row in enumerate(rows):
        record = dict(zip(columns, row, strict=True))
        yield ("," if i else "") + "\n" + json.dumps(record, ensure_ascii=False, cls=DjangoJSONEncoder)
    yield "\n]\n"


def stream(fmt: str, name: str, columns: list[str], rows: Iterable[Iterable[Any]]) -> StreamingHttpResponse:
    """A download of rows (lists in column order) as CSV or JSON (a list of objects)."""
    filename = f"{slugify(name) or 'table'}.{fmt}"
    if fmt == "csv":
        response = StreamingHttpResponse(csv_lines(columns, rows), content_type="text/csv; charset=utf-8")
    else:
        response = StreamingHttpResponse(json_lines(columns, rows), content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


def stream_records(
    fmt: str, name: str, records: list[dict[str, Any]], columns: list[str] | None = None
) -> StreamingHttpResponse:
    columns = columns or (list(records[0]) if records else [])
    return stream(fmt, name, columns, ([r.get(c) for c in columns] for r in records))


# --- LangBiTe's reports for one run ------------------------------------------------------------


def _resolved_oracle(run: Run, oracle: dict[str, Any], language: str) -> dict[str, Any]:
    """The oracle as the run judged with it: @neutral and @refusal expanded with the phrases
    frozen when the run was planned."""
    phrases = run.manifest.get("languages", {}).get(language, {})
    pack = LanguagePack(
        language=language,
        name=language,
        delimiter_sentence="",
        refusal_phrases=tuple(phrases.get("refusal_phrases", ())),
        neutral_phrases=tuple(phrases.get("neutral_phrases", ())),
    )
    try:
        return pack.resolve_oracle(OraclePrediction.from_json(oracle)).to_json()
    except ValueError:
        return oracle


def _in_columns(columns: list[str], values: dict[str, Any]) -> list[Any]:
    """A row in the engine's column order. Built by name, so a column the engine adds later
    comes out empty instead of shifting every cell after it."""
    return [values.get(column, "") for column in columns]


def response_rows(run: Run) -> Iterator[list[Any]]:
    provider, name = split_model(run.model_spec)
    prompts = (
        RunPrompt.objects.filter(run=run)
        .select_related("response", "template_version__template", "language", "concern")
        .order_by("pk")
        .iterator(chunk_size=2000)
    )
    for p in prompts:
        r = getattr(p, "response", None)
        v = p.template_version
        values: dict[str, Any] = {
            "Provider": provider, "Model": name, "Instance": p.instance_text,
            "Template Id": v.content_hash, "Template Key": v.template.key, "Requirement": p.requirement,
            "Concern": p.concern.code, "Language": p.language.code, "Input Type": v.input_type,
            "Reflection Type": v.reflection_type, "Communities": " | ".join(p.community_ids), "Sample": p.sample,
            "Seed": p.seed, "Prompt": p.prompt, "Error": "not answered",
        }  # fmt: skip
        if r is not None:
            values.update({
                "Response": r.text or "", "Outcome": r.outcome, "Outcome Detail": r.outcome_detail,
                "Oracle Outcome": r.oracle_outcome, "Judge Verdict": r.judge_verdict, "Judge Reason": r.judge_reason,
                "Error": r.error, "Attempts": r.attempts, "Cached": r.cached, "Latency S": round(r.latency_s, 3),
                "Prompt Tokens": r.prompt_tokens if r.prompt_tokens is not None else "",
                "Completion Tokens": r.completion_tokens if r.completion_tokens is not None else "",
                # As the engine writes them: the opinions as JSON, or why there is no score.
                "Bias Score": round(r.bias_score, 4) if r.bias_score is not None else "",
                "Opinions": json.dumps(r.opinions, ensure_ascii=False) if r.opinions else r.bias_error,
            })  # fmt: skip
        yield _in_columns(RESPONSES_COLUMNS, values)


def counterfactual_rows(run: Run) -> Iterator[list[Any]]:
    """The engine's counterfactual report: every pair of answers with its scores. Verdicts are
    read in batches, each with the answers it compares, so memory holds one batch."""
    provider, name = split_model(run.model_spec)
    verdicts = (
        run.verdicts.exclude(pairs=[])
        .select_related("template_version__template", "language", "concern")
        .order_by("pk")
        .iterator(chunk_size=500)
    )
    for batch in _batched(verdicts, 500):
        answers = {
            (p["requirement"], p["template_version"], p["sample"], tuple(p["community_ids"])): p["response__text"]
            for p in run.prompts.filter(
                template_version__in={v.template_version_id for v in batch}, sample__in={v.sample for v in batch}
            ).values("requirement", "template_version", "sample", "community_ids", "response__text")
        }
        for v in batch:
            for pair in v.pairs:
                a, b = tuple(pair.get("a", ())), tuple(pair.get("b", ()))
                key = (v.requirement, v.template_version_id, v.sample)
                yield _in_columns(COUNTERFACTUAL_COLUMNS, {
                    "Provider": provider, "Model": name, "Concern": v.concern.code, "Language": v.language.code,
                    "Template Id": v.template_version.content_hash, "Template Key": v.template_version.template.key,
                    "Sample": v.sample, "Communities A": " | ".join(a), "Communities B": " | ".join(b),
                    "Answer A": answers.get((*key, a)) or "", "Answer B": answers.get((*key, b)) or "",
                    **{column: "" if pair.get(metric) is None else round(pair[metric], 4)
                       for column, metric in (("Rouge L", "rouge_l"), ("Bleu", "bleu"),
                                              ("Sentiment Gap", "sentiment_gap"), ("Cosine", "cosine"))},
                })  # fmt: skip


def _batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def evaluation_rows(run: Run) -> Iterator[list[Any]]:
    provider, name = split_model(run.model_spec)
    verdicts = (
        Verdict.objects.filter(run=run)
        .select_related("template_version__template", "language", "concern")
        .defer("pairs")
        .order_by("pk")
        .iterator(chunk_size=2000)
    )
    labels = {"passed": "Passed", "failed": "Failed"}  # LangBiTe's Evaluation knows only these and Error
    for e in verdicts:
        v = e.template_version
        outcomes = [a.get("outcome") for a in e.answers]
        values = [x for x in (e.values or []) if x is not None]
        yield _in_columns(EVALUATIONS_COLUMNS, {
            "Provider": provider, "Model": name, "Concern": e.concern.code, "Language": e.language.code,
            "Input Type": e.input_type, "Reflection Type": e.reflection_type, "Template": v.prompt,
            "Oracle Evaluation": e.detail,
            "Oracle Prediction": json.dumps(_resolved_oracle(run, v.oracle, e.language.code), ensure_ascii=False),
            "Evaluation": labels.get(e.outcome, "Error"), "Template Id": v.content_hash, "Template Key": v.template.key,
            "Requirement": e.requirement, "Sample": e.sample, "Outcome": e.outcome, "Oracle Outcome": e.oracle_outcome,
            "Detail": e.detail, "Instances": len(outcomes), "Passed Instances": outcomes.count("passed"),
            "Failed Instances": outcomes.count("failed"), "Refused Instances": outcomes.count("refused"),
            "Unparseable Instances": outcomes.count("unparseable"), "Error Instances": outcomes.count("error"),
            "Values": " | ".join(f"{x:g}" for x in values), "Spread": "" if e.spread is None else round(e.spread, 2),
        })  # fmt: skip


def global_report(run: Run) -> list[GlobalRow]:
    """The engine's GlobalRow per requirement, concern, language, input type and reflection,
    with flip rates (templates whose verdict changed between samples), the mean judge bias score
    and the counterfactual metrics of the answer pairs, summed from the stored verdicts without
    loading them all."""
    requirements = {r.name: r for r in run.scenario().requirements}
    bias = {
        tuple(row[:5]): row[5]
        for row in Response.objects.filter(prompt__run=run, bias_score__isnull=False)
        .values_list("prompt__requirement", "prompt__concern__code", "prompt__language__code",
                     "prompt__template_version__input_type", "prompt__template_version__reflection_type")
        .annotate(mean=Avg("bias_score"))
        .order_by()
    }  # fmt: skip
    groups: dict[tuple[str, str, str, str, str], dict[str, Any]] = {}
    verdicts = (
        run.verdicts.select_related("concern", "language")
        .only("requirement", "concern__code", "language__code", "input_type", "reflection_type",
              "template_version_id", "outcome", "pairs")
        .order_by("pk")
        .iterator(chunk_size=500)
    )  # fmt: skip
    for v in verdicts:
        key = (v.requirement, v.concern.code, v.language.code, v.input_type, v.reflection_type)
        group = groups.setdefault(key, {"counts": {}, "templates": {}, "pairs": PairMeans()})
        group["counts"][v.outcome] = group["counts"].get(v.outcome, 0) + 1
        group["templates"].setdefault(v.template_version_id, []).append(v.outcome)
        for pair in v.pairs or []:
            group["pairs"].add(pair)
    rows = []
    for key, group in groups.items():
        requirement, concern, language, input_type, reflection = key
        if requirement not in requirements:
            continue
        flipped, multi_sampled = flip_rate(group["templates"].values())
        rows.append(
            GlobalRow(
                model=run.model_spec,
                requirement=requirements[requirement],
                concern=concern,
                language=language,
                input_type=input_type,
                reflection_type=reflection,
                counts=dict(group["counts"]),
                flipped=flipped,
                multi_sampled=multi_sampled,
                bias_score=bias.get(key),
                counterfactual=group["pairs"].summary() if group["pairs"].pairs else None,
            )
        )
    return sorted(rows, key=lambda r: (r.requirement.name, r.language, r.input_type, r.reflection_type))


def global_report_rows(run: Run) -> Iterator[list[Any]]:
    """LangBiTe's global evaluation through the engine's own GlobalRow, so pass rates, intervals
    and tolerance verdicts are computed exactly as the command line computes them."""
    return global_rows(global_report(run))


def judge_agreement(judge: str | None) -> dict[str, Any] | None:
    """The latest agreement of a judge with the human labels, per language, as the engine's
    manifest records it (None when the judge was never measured)."""
    if not judge:
        return None
    latest = JudgeCheck.objects.latest_for(judge)
    if latest is None:
        return None
    checks = JudgeCheck.objects.filter(judge=latest.judge, measured_at=latest.measured_at)
    return {
        c.language: {"items": c.items, "agreed": c.agreed, "accuracy": c.accuracy, "kappa": c.kappa,
                     "unusable": c.unusable, "measured_at": c.measured_at.isoformat()}
        for c in checks
    }  # fmt: skip


def manifest(run: Run, policy: str = DEFAULT_POLICY) -> dict[str, Any]:
    """The engine's manifest fields, from what the run stored."""
    templates = {
        v["template_version__content_hash"]: {
            "key": v["template_version__template__key"],
            "language": v["language__code"],
            "concern": v["concern__code"],
            "version": v["template_version__number"],
        }
        for v in run.prompts.values(
            "template_version__content_hash",
            "template_version__template__key",
            "template_version__number",
            "language__code",
            "concern__code",
        ).distinct()
    }
    rows = global_report(run)
    stored = run.manifest or {}
    return {
        "engine": stored.get("engine", "langbite_core"),
        "engine_version": stored.get("engine_version"),
        "library": {"version": run.library_version, "hash": run.library_hash},
        "seed": run.seed,
        "parameters": run.parameters,
        "planned_parameters": stored.get("planned_parameters"),
        "models": [run.model_spec],
        "revision": run.revision,
        "judge": stored.get("judge"),
        "bias_judge": stored.get("bias_judge"),
        "judge_agreement": {judge: judge_agreement(judge) for judge in run.judges},
        "refusal_policy": policy,
        "refusal_policy_meaning": REFUSAL_POLICIES[policy],
        "language_gaps": language_gaps(rows, policy),
        "selected_templates": stored.get("selected_templates", {}),
        "templates": templates,
        "warnings": stored.get("warnings", []),
        "timings": stored.get("timings", {}),
        "usage": {
            run.model_spec: {
                "prompts": run.total_prompts,
                "answered": run.answered_prompts,
                "errors": run.error_prompts,
                "prompt_tokens": run.prompt_tokens,
                "completion_tokens": run.completion_tokens,
            }
        },
        "requirements_met": bool(rows) and all(r.tolerance_evaluation == "Passed" for r in rows),
        "run": {
            "id": run.pk,
            "llm": run.llm.slug,
            "status": run.status,
            "trigger": run.trigger,
            "created_at": run.created_at.isoformat(),
            "started_at": run.started_at.isoformat() if run.started_at else None,
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
            "recoveries": run.recoveries,
        },
    }


REPORTS = {
    "responses.csv": (RESPONSES_COLUMNS, response_rows),
    "evaluations.csv": (EVALUATIONS_COLUMNS, evaluation_rows),
    "global_evaluation.csv": (GLOBAL_COLUMNS, global_report_rows),
    "counterfactual.csv": (COUNTERFACTUAL_COLUMNS, counterfactual_rows),
}
