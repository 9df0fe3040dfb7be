"""The questions the public pages ask of the results: filters from a URL, rankings, matrices,
histories and comparisons. Views call these and render; the API and exports reuse them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet

from langbite_core.library import INPUT_TYPES, REFLECTION_TYPES
from leaderboard.models import LLM, Concern, Language, Response, Run, RunPrompt, Verdict
from leaderboard.ranking import DEFAULT_POLICY, REFUSAL_POLICIES, SORTS, Ranked, Tally, rank, sort_ranked

OUTCOME_CHOICES = ("passed", "failed", "refused", "unparseable", "error")
SORT_CHOICES = ("rank", "model", "pass_rate", "n", "refusal_rate", "error_rate")


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


@dataclass
class Filters:
    """What a URL's query string selects. Unknown values are dropped with a note, never an error,
    so a hand-edited or outdated link still shows a page."""

    concern: Concern | None = None
    language: Language | None = None
    input_type: str = ""
    reflection_type: str = ""
    sort: str = "rank"
    include_inactive: bool = False
    policy: str = DEFAULT_POLICY  # how refusals count in a pass rate
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_query(cls, query: Mapping[str, Any]) -> Filters:
        f = cls()
        code = (query.get("concern") or "").strip()
        if code:
            f.concern = Concern.objects.prefetch_related("texts__language").filter(code=code).first()
            if f.concern is None:
                f.notes.append(f"Unknown concern {code!r} ignored.")
        code = (query.get("language") or "").strip()
        if code:
            f.language = Language.objects.filter(code=code).first()
            if f.language is None:
                f.notes.append(f"Unknown language {code!r} ignored.")
        for name, allowed in (("input_type", INPUT_TYPES), ("reflection_type", REFLECTION_TYPES)):
            value = (query.get(name) or "").strip()
            if value in allowed:
                setattr(f, name, value)
            elif value:
                f.notes.append(f"Unknown {name.replace('_', ' ')} {value!r} ignored.")
        sort = (query.get("sort") or "rank").strip()
        if sort.lstrip("-") in SORT_CHOICES:
            f.sort = sort
        else:
            f.notes.append(f"Unknown sort {sort!r} ignored.")
        f.include_inactive = query.get("inactive") in ("1", "on", "true")
        policy = (query.get("refusals") or DEFAULT_POLICY).strip()
        if policy in REFUSAL_POLICIES:
            f.policy = policy
        else:
            f.notes.append(f"Unknown refusal policy {policy!r} ignored.")
        return f

    def tally(self, row: Mapping[str, Any]) -> Tally:
        return Tally.from_row(row, self.policy)

    def verdicts(self, runs: QuerySet[Run] | None = None) -> QuerySet[Verdict]:
        qs = Verdict.objects.filter(run__in=runs if runs is not None else Run.objects.latest_done())
        if not self.include_inactive:
            qs = qs.filter(run__llm__active=True)
        if self.concern:
            qs = qs.filter(concern=self.concern)
        if self.language:
            qs = qs.filter(language=self.language)
        if self.input_type:
            qs = qs.filter(input_type=self.input_type)
        if self.reflection_type:
            qs = qs.filter(reflection_type=self.reflection_type)
        return qs

    def as_dict(self) -> dict[str, Any]:
        return {
            "concern": self.concern.code if self.concern else None,
            "language": self.language.code if self.language else None,
            "input_type": self.input_type or None,
            "reflection_type": self.reflection_type or None,
            "sort": self.sort,
            "include_inactive": self.include_inactive,
            "refusals": self.policy,
        }


def latest_runs_by_llm() -> dict[int, Run]:
    return {run.llm_id: run for run in Run.objects.latest_done().select_related("llm")}


def overall(filters: Filters) -> list[Ranked[LLM]]:
    """One ranked row per model with results, from its latest finished run."""
    runs = latest_runs_by_llm()
    llms = {llm.pk: llm for llm in LLM.objects.filter(pk__in=runs)}
    counts = {row["run__llm"]: filters.tally(row) for row in filters.verdicts().counted("run__llm")}
    ranked = rank(((llms[pk], tally) for pk, tally in counts.items() if pk in llms), filters.policy)
    for row in ranked:
        row.extra["run"] = runs[row.subject.pk]
    return sort_ranked(ranked, filters.sort, lambda llm: llm.name)


@dataclass
class Matrix:
    dimension: str  # "concern" or "language"
    columns: list[tuple[str, str]]  # (code, label)
    rows: list[tuple[LLM, list[Ranked[LLM] | None]]]  # a cell ranks the model within its column

    def chart(self) -> dict[str, Any]:
        """Heatmap data for Plotly: pass rates, and the text printed in each cell (so the colour
        is never the only way to read it)."""
        z, text = [], []
        for _, cells in self.rows:
            z.append([c.tally.pass_rate if c and c.tally.pass_rate is not None else None for c in cells])
            text.append(
                [
                    f"{c.tally.pass_rate:.0%} (n={c.tally.decided})"
                    if c and c.tally.pass_rate is not None
                    else "no data"
                    for c in cells
                ]
            )
        return {
            "x": [label for _, label in self.columns],
            "y": [llm.name for llm, _ in self.rows],
            "z": z,
            "text": text,
            "title": f"Pass rate by model and {self.dimension}",
        }

    def records(self) -> list[dict[str, Any]]:
        out = []
        for llm, cells in self.rows:
            for (code, label), cell in zip(self.columns, cells, strict=True):
                if cell is None:
                    continue
                out.append(
                    {
                        "model": llm.slug,
                        "model_name": llm.name,
                        self.dimension: code,
                        f"{self.dimension}_name": label,
                        "rank": cell.rank,
                        "rank_range": cell.rank_range,
                        "shared_rank": cell.shared,
                        **cell.tally.as_dict(),
                    }
                )
        return out


def matrix(filters: Filters, dimension: str, order: list[LLM]) -> Matrix:
    """Models x concerns (or languages), each cell ranked among the models in its column."""
    field_name = "concern__code" if dimension == "concern" else "language__code"
    counts: dict[tuple[int, str], Tally] = {
        (row["run__llm"], row[field_name]): filters.tally(row)
        for row in filters.verdicts().counted("run__llm", field_name)
    }
    if dimension == "concern":
        present = {code for _, code in counts}
        concerns = Concern.objects.filter(code__in=present).prefetch_related("texts__language")
        columns = [(c.code, c.label) for c in concerns]
    else:
        present = {code for _, code in counts}
        columns = [(lang.code, lang.name) for lang in Language.objects.filter(code__in=present)]
    by_column: dict[str, dict[int, Ranked[LLM]]] = {}
    for code, _ in columns:
        ranked = rank(((llm, counts[(llm.pk, code)]) for llm in order if (llm.pk, code) in counts), filters.policy)
        by_column[code] = {r.subject.pk: r for r in ranked}
    rows = [(llm, [by_column[code].get(llm.pk) for code, _ in columns]) for llm in order]
    return Matrix(dimension=dimension, columns=columns, rows=rows)


def history(llm: LLM, policy: str = DEFAULT_POLICY) -> list[tuple[Run, Tally]]:
    runs = list(llm.runs.order_by("created_at"))
    counts = {row["run"]: Tally.from_row(row, policy) for row in Verdict.objects.filter(run__llm=llm).counted("run")}
    return [(run, counts.get(run.pk, Tally(policy=policy))) for run in runs]


def history_chart(rows: list[tuple[Run, Tally]]) -> dict[str, Any]:
    done = [(run, tally) for run, tally in rows if run.status == Run.Status.DONE and tally.pass_rate is not None]
    return {
        "x": [(run.finished_at or run.created_at).isoformat() for run, _ in done],
        "y": [tally.pass_rate for _, tally in done],
        "low": [tally.interval[0] if tally.interval else None for _, tally in done],
        "high": [tally.interval[1] if tally.interval else None for _, tally in done],
        "labels": [f"run {run.pk}: {tally.pass_rate:.0%} (n={tally.decided})" for run, tally in done],
        "title": "Pass rate over runs (95% interval)",
    }


def breakdown(run: Run, field_name: str, policy: str = DEFAULT_POLICY) -> list[tuple[str, Tally]]:
    return [(row[field_name], Tally.from_row(row, policy)) for row in run.verdicts.counted(field_name)]


def template_tallies(filters: Filters, runs: list[Run]) -> dict[tuple[int, int], Tally]:
    """(template version, llm) -> tally, for a concern page."""
    rows = filters.verdicts(Run.objects.filter(pk__in=[r.pk for r in runs])).counted("template_version", "run__llm")
    return {(row["template_version"], row["run__llm"]): filters.tally(row) for row in rows}


def responses(query: Mapping[str, Any], runs: QuerySet[Run] | None = None) -> tuple[QuerySet[RunPrompt], list[str]]:
    """Prompts with their answers, filtered by a query string (run, model, concern, language,
    outcome, template, q); latest finished runs unless a run is named."""
    notes: list[str] = []
    qs = RunPrompt.objects.select_related(
        "response", "run__llm", "language", "concern", "template_version__template"
    ).filter(response__isnull=False)
    run_id = _int(query.get("run"))
    if run_id is not None:
        qs = qs.filter(run_id=run_id)
    elif query.get("run"):
        notes.append("The run must be a number; showing the latest runs.")
        qs = qs.filter(run__in=runs if runs is not None else Run.objects.latest_done())
    else:
        qs = qs.filter(run__in=runs if runs is not None else Run.objects.latest_done())
    models = [m for m in (query.getlist("model") if hasattr(query, "getlist") else [query.get("model")]) if m]
    if models:
        qs = qs.filter(run__llm__slug__in=models)
    for name, lookup in (("concern", "concern__code"), ("language", "language__code")):
        if query.get(name):
            qs = qs.filter(**{lookup: query.get(name)})
    outcome = query.get("outcome") or ""
    if outcome in OUTCOME_CHOICES:
        qs = qs.filter(response__outcome=outcome)
    elif outcome:
        notes.append(f"Unknown outcome {outcome!r} ignored.")
    template = _int(query.get("template"))
    if template is not None:
        qs = qs.filter(template_version_id=template)
    text = (query.get("q") or "").strip()[:200]
    if text:
        qs = qs.filter(Q(prompt__icontains=text) | Q(response__text__icontains=text))
    return qs.order_by("run_id", "pk"), notes


@dataclass
class Comparison:
    llms: list[LLM]
    runs: list[Run]
    shared: int  # prompts every run asked
    rows: list[dict[str, Any]]  # one per prompt on this page
    agreement: int  # of the shared prompts, how many got the same outcome from every model


def compare(llms: list[LLM], query: Mapping[str, Any], page: int, per_page: int = 25) -> tuple[Comparison, int]:
    """The same prompts (same text, same sample) put to 2-4 models, from each one's latest run."""
    latest = latest_runs_by_llm()
    llms = [llm for llm in llms if llm.pk in latest]
    runs = [latest[llm.pk] for llm in llms]
    if len(runs) < 2:
        return Comparison(llms, runs, 0, [], 0), 0
    first, others = runs[0], runs[1:]
    base = RunPrompt.objects.filter(run=first, response__isnull=False)
    for other in others:
        base = base.filter(
            Exists(
                RunPrompt.objects.filter(
                    run=other, prompt_hash=OuterRef("prompt_hash"), sample=OuterRef("sample"), response__isnull=False
                )
            )
        )
    for name, lookup in (("concern", "concern__code"), ("language", "language__code")):
        if query.get(name):
            base = base.filter(**{lookup: query.get(name)})
    disagree = Q()
    for other in others:
        disagree |= Q(
            Exists(
                Response.objects.filter(
                    prompt__run=other, prompt__prompt_hash=OuterRef("prompt_hash"), prompt__sample=OuterRef("sample")
                ).exclude(outcome=OuterRef("response__outcome"))
            )
        )
    shared = base.count()
    differing = base.filter(disagree)
    agreement = shared - differing.count()
    selected = differing if query.get("show") == "differ" else base
    total = selected.count()
    page_prompts = list(
        selected.select_related("response", "concern", "language", "template_version__template").order_by("pk")[
            (page - 1) * per_page : page * per_page
        ]
    )
    keys = {(p.prompt_hash, p.sample) for p in page_prompts}
    answers: dict[tuple[int, str, int], RunPrompt] = {}
    for other in others:
        for prompt in RunPrompt.objects.filter(
            run=other, prompt_hash__in={k[0] for k in keys}, response__isnull=False
        ).select_related("response"):
            answers[(other.pk, prompt.prompt_hash, prompt.sample)] = prompt
    rows = []
    for prompt in page_prompts:
        cells = [prompt] + [answers.get((other.pk, prompt.prompt_hash, prompt.sample)) for other in others]
        outcomes = {c.response.outcome for c in cells if c is not None}
        rows.append({"prompt": prompt, "cells": cells, "agree": len(outcomes) == 1})
    return Comparison(llms, runs, shared, rows, agreement), total


__all__ = ["SORTS", "Filters", "Matrix", "compare", "history", "matrix", "overall", "responses"]
