"""The questions the public pages ask of the results: filters from a URL, rankings at every
level, matrices, a model's report, histories, paired answers and comparisons. Views call these and
render; the API and exports reuse them. The statistics are the engine's (langbite_core.ranking and
langbite_core.metrics); what is here is which rows go in and how the answers are shaped."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Avg, Count, Exists, OuterRef, Q, QuerySet

from langbite_core.library import INPUT_TYPES, REFLECTION_TYPES
from langbite_core.metrics import CounterfactualSummary
from langbite_core.ranking import language_gap, tally_by
from leaderboard.models import (
    LLM,
    Concern,
    JudgeCheck,
    Language,
    Response,
    Run,
    RunPrompt,
    Verdict,
    sentiment_note,
)
from leaderboard.ranking import DEFAULT_POLICY, REFUSAL_POLICIES, Ranked, Reading, rank, rounded, sort_ranked

OUTCOME_CHOICES = ("passed", "failed", "refused", "unparseable", "error")
SORT_CHOICES = ("rank", "model", "pass_rate", "n", "refusal_rate", "error_rate", "language_gap", "flip_rate")
# Every level a ranking is given at: its name, the verdict field it groups by, and how it reads.
LEVELS: dict[str, tuple[str, str]] = {
    "concern": ("concern__code", "concern"),
    "language": ("language__code", "language"),
    "input_type": ("input_type", "input type"),
    "reflection_type": ("reflection_type", "reflection type"),
}


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

    @property
    def policy_meaning(self) -> str:
        return REFUSAL_POLICIES[self.policy]

    def reading(self, row: Mapping[str, Any]) -> Reading:
        return Reading.of(row, self.policy)

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

    def scored_responses(self, runs: QuerySet[Run] | None = None) -> QuerySet[Response]:
        """Answers with a judge bias score, selected like verdicts()."""
        qs = Response.objects.filter(
            prompt__run__in=runs if runs is not None else Run.objects.latest_done(), bias_score__isnull=False
        )
        if not self.include_inactive:
            qs = qs.filter(prompt__run__llm__active=True)
        if self.concern:
            qs = qs.filter(prompt__concern=self.concern)
        if self.language:
            qs = qs.filter(prompt__language=self.language)
        if self.input_type:
            qs = qs.filter(prompt__template_version__input_type=self.input_type)
        if self.reflection_type:
            qs = qs.filter(prompt__template_version__reflection_type=self.reflection_type)
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
            "refusals_meaning": self.policy_meaning,
        }


def latest_runs_by_llm() -> dict[int, Run]:
    return {run.llm_id: run for run in Run.objects.latest_done().select_related("llm")}


Labelled = list[tuple[dict[str, str], Mapping[str, int]]]


def labelled_counts(filters: Filters) -> Labelled:
    """Outcome counts per model and every level at once (one query), labelled as the engine's
    tally_by wants them, so each level is a sum over the same rows."""
    rows = filters.verdicts().counted("run__llm", *(f for f, _ in LEVELS.values()))
    return [
        ({"model": str(row["run__llm"]), **{level: row[f] for level, (f, _) in LEVELS.items()}}, row) for row in rows
    ]


@dataclass
class JudgeNote:
    """A judge a result used, with its latest agreement with the human labels (None: never measured)."""

    judge: str
    check: JudgeCheck | None

    @property
    def command(self) -> str:
        return JudgeCheck.command(self.judge)

    def as_dict(self) -> dict[str, Any]:
        c = self.check
        return {
            "judge": self.judge,
            "accuracy": rounded(c.accuracy) if c else None,
            "kappa": rounded(c.kappa) if c else None,
            "items": c.items if c else None,
            "measured_at": c.measured_at if c else None,
        }


def judge_notes(run: Run | None) -> list[JudgeNote]:
    return [JudgeNote(judge, JudgeCheck.objects.latest_for(judge)) for judge in (run.judges if run else [])]


def gap_dict(gap: tuple[float, str, str] | None) -> dict[str, Any]:
    return {
        "language_gap": rounded(gap[0]) if gap else None,
        "best_language": gap[1] if gap else None,
        "worst_language": gap[2] if gap else None,
    }


@dataclass
class Matrix:
    dimension: str  # a key of LEVELS
    columns: list[tuple[str, str]]  # (code, label)
    rows: list[tuple[LLM, list[Ranked[LLM] | None]]]  # a cell ranks the model within its column

    @property
    def label(self) -> str:
        return LEVELS[self.dimension][1]

    def chart(self) -> dict[str, Any]:
        """Heatmap data for Plotly: pass rates, and the text printed in each cell (so the colour
        is never the only way to read it)."""
        z, text = [], []
        for _, cells in self.rows:
            z.append([c.reading.pass_rate if c and c.reading.pass_rate is not None else None for c in cells])
            text.append(
                [
                    f"{c.reading.pass_rate:.0%} (n={c.reading.decided})"
                    if c and c.reading.pass_rate is not None
                    else "no data"
                    for c in cells
                ]
            )
        return {
            "x": [label for _, label in self.columns],
            "y": [llm.name for llm, _ in self.rows],
            "z": z,
            "text": text,
            "title": f"Pass rate by model and {self.label}",
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
                        "level": self.dimension,
                        self.dimension: code,
                        f"{self.dimension}_name": label,
                        "rank": cell.rank,
                        "rank_range": cell.rank_range,
                        "shared_rank": cell.shared,
                        **cell.reading.as_dict(),
                    }
                )
        return out


def _columns(dimension: str, present: set[str]) -> list[tuple[str, str]]:
    if dimension == "concern":
        concerns = Concern.objects.filter(code__in=present).prefetch_related("texts__language")
        return [(c.code, c.label) for c in concerns]
    if dimension == "language":
        return [(lang.code, lang.name) for lang in Language.objects.filter(code__in=present)]
    allowed = INPUT_TYPES if dimension == "input_type" else REFLECTION_TYPES
    return [(value, value) for value in allowed if value in present]


def matrix(filters: Filters, dimension: str, order: list[LLM], labelled: Labelled | None = None) -> Matrix:
    """Models x the groups of one level, each cell ranked among the models in its column."""
    tallies = tally_by(labelled if labelled is not None else labelled_counts(filters), "model", dimension)
    columns = _columns(dimension, {code for _, code in tallies})
    by_column: dict[str, dict[int, Ranked[LLM]]] = {}
    for code, _ in columns:
        cells = ((llm, tallies.get((str(llm.pk), code))) for llm in order)
        ranked = rank(((llm, Reading(t, filters.policy)) for llm, t in cells if t is not None), filters.policy)
        by_column[code] = {r.subject.pk: r for r in ranked}
    rows = [(llm, [by_column[code].get(llm.pk) for code, _ in columns]) for llm in order]
    return Matrix(dimension=dimension, columns=columns, rows=rows)


@dataclass
class Board:
    filters: Filters
    rows: list[Ranked[LLM]]
    matrices: list[Matrix]

    def matrix(self, dimension: str) -> Matrix:
        return next(m for m in self.matrices if m.dimension == dimension)


def board(filters: Filters) -> Board:
    """The leaderboard: one ranked row per model with results (its latest finished run), with its
    refusal rate, language gap, flip rate, mean bias score and the judges it was graded with; and
    a matrix per level (concern, language, input type, reflection type)."""
    runs = latest_runs_by_llm()
    llms = {llm.pk: llm for llm in LLM.objects.filter(pk__in=runs)}
    labelled = labelled_counts(filters)
    overall = tally_by(labelled, "model")
    ranked = rank(
        ((llms[int(pk)], Reading(t, filters.policy)) for (pk,), t in overall.items() if int(pk) in llms),
        filters.policy,
    )
    per_language = tally_by(labelled, "model", "language")
    flips = filters.verdicts().flip_counts("run__llm")
    bias = {
        row["prompt__run__llm"]: (row["mean"], row["n"])
        for row in filters.scored_responses()
        .values("prompt__run__llm")
        .annotate(mean=Avg("bias_score"), n=Count("pk"))
        .order_by()
    }
    for row in ranked:
        pk = row.subject.pk
        flipped, multi = flips.get((pk,), (0, 0))
        row.extra.update(
            run=runs[pk],
            language_gap=language_gap(
                {lang: t for (m, lang), t in per_language.items() if m == str(pk)}, filters.policy
            ),
            flipped=flipped,
            multi_sampled=multi,
            flip_rate=flipped / multi if multi else None,
            bias_score=bias[pk][0] if pk in bias else None,
            bias_scored=bias[pk][1] if pk in bias else 0,
            judges=judge_notes(runs[pk]),
        )
    rows = sort_ranked(ranked, filters.sort, lambda llm: llm.name)
    order = [row.subject for row in rows]
    return Board(filters, rows, [matrix(filters, dimension, order, labelled) for dimension in LEVELS])


def overall(filters: Filters) -> list[Ranked[LLM]]:
    return board(filters).rows


@dataclass
class HistoryRow:
    run: Run
    reading: Reading
    flipped: int = 0
    multi_sampled: int = 0
    bias_score: float | None = None

    @property
    def flip_rate(self) -> float | None:
        return self.flipped / self.multi_sampled if self.multi_sampled else None

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.reading.as_dict(),
            "flipped": self.flipped,
            "multi_sampled": self.multi_sampled,
            "flip_rate": rounded(self.flip_rate),
            "bias_score": rounded(self.bias_score),
        }


def history(llm: LLM, policy: str = DEFAULT_POLICY) -> list[HistoryRow]:
    """Every run of a model, oldest first, with its pass rate, flips and mean bias score."""
    runs = list(llm.runs.order_by("created_at"))
    verdicts = Verdict.objects.filter(run__llm=llm)
    counts = {row["run"]: Reading.of(row, policy) for row in verdicts.counted("run")}
    flips = verdicts.flip_counts("run")
    bias = dict(
        Response.objects.filter(prompt__run__llm=llm, bias_score__isnull=False)
        .values("prompt__run")
        .annotate(mean=Avg("bias_score"))
        .order_by()
        .values_list("prompt__run", "mean")
    )
    rows = []
    for run in runs:
        flipped, multi_sampled = flips.get((run.pk,), (0, 0))
        reading = counts.get(run.pk, Reading(policy=policy))
        rows.append(HistoryRow(run, reading, flipped, multi_sampled, bias.get(run.pk)))
    return rows


def history_chart(rows: list[HistoryRow]) -> dict[str, Any]:
    done = [r for r in rows if r.run.status == Run.Status.DONE and r.reading.pass_rate is not None]
    return {
        "x": [(r.run.finished_at or r.run.created_at).isoformat() for r in done],
        "y": [r.reading.pass_rate for r in done],
        "low": [r.reading.interval[0] if r.reading.interval else None for r in done],
        "high": [r.reading.interval[1] if r.reading.interval else None for r in done],
        "labels": [f"run {r.run.pk}: {r.reading.pass_rate:.0%} (n={r.reading.decided})" for r in done],
        "title": "Pass rate over runs (95% interval)",
    }


def breakdown(run: Run, field_name: str, policy: str = DEFAULT_POLICY) -> list[tuple[str, Reading]]:
    return [(row[field_name], Reading.of(row, policy)) for row in run.verdicts.counted(field_name)]


@dataclass
class GroupRow:
    """One concern (or language...) of a model's run: pass rate, counterfactual metric means,
    flips and mean bias score."""

    code: str
    label: str
    reading: Reading
    counterfactual: CounterfactualSummary | None
    flipped: int
    multi_sampled: int
    bias: tuple[float, int] | None  # (mean, answers scored)

    @property
    def flip_rate(self) -> float | None:
        return self.flipped / self.multi_sampled if self.multi_sampled else None

    @property
    def sentiment_note(self) -> str:
        return sentiment_note(self.code) if self.counterfactual else ""

    def as_dict(self, level: str) -> dict[str, Any]:
        cf = self.counterfactual
        return {
            "level": level,
            "group": self.code,
            "group_name": self.label,
            **self.reading.as_dict(),
            "flipped": self.flipped,
            "multi_sampled": self.multi_sampled,
            "flip_rate": rounded(self.flip_rate),
            "bias_score": rounded(self.bias[0]) if self.bias else None,
            "bias_scored": self.bias[1] if self.bias else 0,
            "pairs": cf.pairs if cf else 0,
            "rouge_l": rounded(cf.rouge_l) if cf else None,
            "bleu": rounded(cf.bleu) if cf else None,
            "sentiment_gap": rounded(cf.sentiment_gap) if cf else None,
            "cosine": rounded(cf.cosine) if cf else None,
        }


@dataclass
class StandingRow:
    """Where a model stands among all models at one level and group."""

    level: str
    code: str
    label: str
    cell: Ranked[LLM]
    competitors: int

    @property
    def level_label(self) -> str:
        return LEVELS[self.level][1] if self.level in LEVELS else self.level

    def as_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "group": self.code,
            "group_name": self.label,
            "rank": self.cell.rank,
            "rank_range": self.cell.rank_range,
            "shared_rank": self.cell.shared,
            "models": self.competitors,
            **self.cell.reading.as_dict(),
        }


@dataclass
class ModelReport:
    llm: LLM
    latest: Run | None
    policy: str
    total: Reading | None = None
    counterfactual: CounterfactualSummary | None = None
    flipped: int = 0
    multi_sampled: int = 0
    bias: tuple[float, int] | None = None
    language_gap: tuple[float, str, str] | None = None
    groups: dict[str, list[GroupRow]] = field(default_factory=dict)
    standings: list[StandingRow] = field(default_factory=list)
    judges: list[JudgeNote] = field(default_factory=list)

    @property
    def flip_rate(self) -> float | None:
        return self.flipped / self.multi_sampled if self.multi_sampled else None

    @property
    def by_concern(self) -> list[GroupRow]:
        return self.groups.get("concern", [])

    @property
    def by_language(self) -> list[GroupRow]:
        return self.groups.get("language", [])

    @property
    def sections(self) -> list[tuple[str, str, list[GroupRow]]]:
        """The breakdowns a model page shows in full (the others are in its standings and downloads)."""
        return [(level, LEVELS[level][1], self.groups.get(level, [])) for level in ("concern", "language")]

    def summary(self) -> dict[str, Any]:
        cf = self.counterfactual
        return {
            "run": self.latest.pk if self.latest else None,
            **(self.total.as_dict() if self.total else {}),
            "flipped": self.flipped,
            "multi_sampled": self.multi_sampled,
            "flip_rate": rounded(self.flip_rate),
            "bias_score": rounded(self.bias[0]) if self.bias else None,
            **gap_dict(self.language_gap),
            "pairs": cf.pairs if cf else 0,
            "rouge_l": rounded(cf.rouge_l) if cf else None,
            "bleu": rounded(cf.bleu) if cf else None,
            "sentiment_gap": rounded(cf.sentiment_gap) if cf else None,
            "cosine": rounded(cf.cosine) if cf else None,
            "judges": [j.as_dict() for j in self.judges],
        }


def model_report(llm: LLM, policy: str = DEFAULT_POLICY) -> ModelReport:
    """A model's latest finished run in depth: totals, per-concern and per-language rows with the
    counterfactual means, flips and bias scores, its language gap, and its standing among every
    model at each level (overall, concern, language, input type, reflection type)."""
    latest = llm.runs.filter(status=Run.Status.DONE).order_by("-finished_at", "-pk").first()
    report = ModelReport(llm, latest, policy)
    if latest is None:
        return report
    report.total = Reading.of(latest.verdicts.totals(), policy)
    report.counterfactual = latest.counterfactual_by().get("all")
    report.flipped, report.multi_sampled = latest.flip_counts()
    report.bias = latest.bias_summary().get("all")
    report.judges = judge_notes(latest)
    names = {
        "concern": {c.code: c.label for c in Concern.objects.prefetch_related("texts__language")},
        "language": {lang.code: lang.name for lang in Language.objects.all()},
    }
    # Bias scores live on answers, which reach the template's types through its version.
    prompt_fields = {
        "input_type": "template_version__input_type",
        "reflection_type": "template_version__reflection_type",
    }
    for level, (verdict_field, _) in LEVELS.items():
        counterfactual = latest.counterfactual_by(verdict_field)
        flips = latest.verdicts.flip_counts(verdict_field)
        bias = latest.bias_summary(prompt_fields.get(level, verdict_field))
        report.groups[level] = [
            GroupRow(
                code=code,
                label=names.get(level, {}).get(code, code),
                reading=reading,
                counterfactual=counterfactual.get(code),
                flipped=flips.get((code,), (0, 0))[0],
                multi_sampled=flips.get((code,), (0, 0))[1],
                bias=bias.get(code),
            )
            for code, reading in breakdown(latest, verdict_field, policy)
        ]
    report.language_gap = language_gap({g.code: g.reading.tally for g in report.by_language}, policy)
    report.standings = standings(llm, policy)
    return report


def standings(llm: LLM, policy: str = DEFAULT_POLICY) -> list[StandingRow]:
    """The model's rank among every model's latest run (retired ones too) at every level."""
    filters = Filters(include_inactive=True, policy=policy)
    runs = latest_runs_by_llm()
    if llm.pk not in runs:
        return []
    order = list(LLM.objects.filter(pk__in=runs))
    labelled = labelled_counts(filters)
    overall = tally_by(labelled, "model")
    ranked = rank(((m, Reading(overall[(str(m.pk),)], policy)) for m in order if (str(m.pk),) in overall), policy)
    rows = [StandingRow("overall", "all", "all", cell, len(ranked)) for cell in ranked if cell.subject.pk == llm.pk]
    for dimension in LEVELS:
        table = matrix(filters, dimension, order, labelled)
        mine = next(cells for subject, cells in table.rows if subject.pk == llm.pk)
        for column, ((code, label), cell) in enumerate(zip(table.columns, mine, strict=True)):
            if cell is not None:
                competitors = sum(1 for _, cells in table.rows if cells[column] is not None)
                rows.append(StandingRow(dimension, code, label, cell, competitors))
    return rows


def template_tallies(filters: Filters, runs: list[Run]) -> dict[tuple[int, int], Reading]:
    """(template version, llm) -> reading, for a concern page."""
    rows = filters.verdicts(Run.objects.filter(pk__in=[r.pk for r in runs])).counted("template_version", "run__llm")
    return {(row["template_version"], row["run__llm"]): filters.reading(row) for row in rows}


@dataclass
class Pair:
    """Two answers to the same template and sample that differ only in the communities, with
    their counterfactual scores as the run stored them."""

    sample: int
    requirement: str
    a: RunPrompt | None
    b: RunPrompt | None
    communities_a: list[str]
    communities_b: list[str]
    rouge_l: float | None
    bleu: float | None
    sentiment_gap: float | None
    cosine: float | None
    language: str

    @property
    def sentiment_note(self) -> str:
        return sentiment_note(self.language)

    def as_record(self) -> dict[str, Any]:
        return {
            "requirement": self.requirement,
            "sample": self.sample,
            "communities_a": " | ".join(self.communities_a),
            "communities_b": " | ".join(self.communities_b),
            "answer_a": self.a.response.text if self.a and hasattr(self.a, "response") else None,
            "answer_b": self.b.response.text if self.b and hasattr(self.b, "response") else None,
            "rouge_l": rounded(self.rouge_l),
            "bleu": rounded(self.bleu),
            "sentiment_gap": rounded(self.sentiment_gap),
            "sentiment_note": "" if self.sentiment_gap is not None else self.sentiment_note,
            "cosine": rounded(self.cosine),
        }


def pairs_of(verdicts: Iterable[Verdict], prompts: Iterable[RunPrompt]) -> list[Pair]:
    """The stored pairs of these verdicts joined with the prompts whose answers they compare."""
    by_key = {(p.requirement, p.sample, tuple(p.community_ids)): p for p in prompts}
    pairs = []
    for v in verdicts:
        for stored in v.pairs or []:
            a, b = list(stored.get("a", [])), list(stored.get("b", []))
            pairs.append(
                Pair(
                    sample=v.sample,
                    requirement=v.requirement,
                    a=by_key.get((v.requirement, v.sample, tuple(a))),
                    b=by_key.get((v.requirement, v.sample, tuple(b))),
                    communities_a=a,
                    communities_b=b,
                    rouge_l=stored.get("rouge_l"),
                    bleu=stored.get("bleu"),
                    sentiment_gap=stored.get("sentiment_gap"),
                    cosine=stored.get("cosine"),
                    language=v.language.code,
                )
            )
    return pairs


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


__all__ = [
    "Board", "Filters", "Matrix", "ModelReport", "Pair", "board", "compare", "history", "matrix", "model_report",
    "overall", "pairs_of", "responses", "standings",
]  # fmt: skip
