"""The public pages. Thin: each view reads the query string, asks boards.py or a model, and
renders (or streams the same table as CSV/JSON when ?format= asks for it)."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.db.models import Count, Prefetch
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from leaderboard import boards, exports
from leaderboard.models import (
    LLM,
    Community,
    Concern,
    ConcernText,
    JudgeCheck,
    Language,
    LibraryImport,
    Run,
    RunPrompt,
    Template,
    TemplateVersion,
    Verdict,
)
from leaderboard.ranking import REFUSAL_POLICIES, Reading, rounded

PAGE_SIZE = 50


def _page_number(request: HttpRequest) -> int:
    try:
        return max(1, int(request.GET.get("page", "1")))
    except ValueError:
        return 1


def _common(request: HttpRequest) -> dict[str, Any]:
    return {
        "concerns": Concern.objects.prefetch_related("texts__language"),
        "languages": Language.objects.all(),
        "input_types": ("constrained", "verbose"),
        "reflection_types": ("observational", "utopian"),
        "refusal_policies": REFUSAL_POLICIES,
    }


def overall_records(rows: list[Any]) -> list[dict[str, Any]]:
    records = []
    for row in rows:
        run = row.extra["run"]
        # One judge does a run's verdicts and bias scores (Run.pick_judge), so there is at most one.
        judge = row.extra["judges"][0].as_dict() if row.extra["judges"] else {}
        records.append(
            {
                "rank": row.rank,
                "rank_range": row.rank_range,
                "shared_rank": row.shared,
                "model": row.subject.slug,
                "model_name": row.subject.name,
                "provider": row.subject.provider,
                "model_id": row.subject.model_id,
                "revision": run.revision,
                "run": run.pk,
                "run_finished_at": run.finished_at,
                "library_version": run.library_version,
                **row.reading.as_dict(),
                "refusal_policy_meaning": REFUSAL_POLICIES[row.reading.policy],
                **boards.gap_dict(row.extra["language_gap"]),
                "flipped": row.extra["flipped"],
                "multi_sampled": row.extra["multi_sampled"],
                "flip_rate": rounded(row.extra["flip_rate"]),
                "bias_score": rounded(row.extra["bias_score"]),
                "judge": judge.get("judge"),
                "judge_accuracy": judge.get("accuracy"),
                "judge_kappa": judge.get("kappa"),
                "judge_measured_at": judge.get("measured_at"),
            }
        )
    return records


@require_GET
def leaderboard(request: HttpRequest) -> HttpResponse:
    filters = boards.Filters.from_query(request.GET)
    board = boards.board(filters)
    fmt = exports.requested_format(request)
    if fmt:
        table = request.GET.get("table", "overall")
        if table in boards.LEVELS:
            return exports.stream_records(
                fmt, f"leaderboard-by-{table.replace('_', '-')}", board.matrix(table).records()
            )
        return exports.stream_records(fmt, "leaderboard", overall_records(board.rows), OVERALL_COLUMNS)
    charted = ("concern", "language")  # the other levels have two columns: their tables say it all
    return render(
        request,
        "leaderboard/leaderboard.html",
        {
            **_common(request),
            "filters": filters,
            "rows": board.rows,
            "matrices": [
                (m, m.chart() if m.dimension in charted else None, f"chart-{m.dimension.replace('_', '-')}")
                for m in board.matrices
            ],
            "sort_choices": SORT_CHOICES,
            "library": LibraryImport.objects.first(),
        },
    )


SORT_CHOICES = [
    ("rank", "rank (best first)"),
    ("-rank", "rank (worst first)"),
    ("pass_rate", "pass rate (highest first)"),
    ("-pass_rate", "pass rate (lowest first)"),
    ("model", "model name"),
    ("n", "sample size"),
    ("refusal_rate", "refusal rate"),
    ("error_rate", "error rate"),
    ("language_gap", "language gap (widest first)"),
    ("flip_rate", "flip rate (least stable first)"),
]

OVERALL_COLUMNS = [
    "rank", "rank_range", "shared_rank", "model", "model_name", "provider", "model_id", "revision", "run",
    "run_finished_at", "library_version", "passed", "failed", "refused", "unparseable", "error", "verdicts", "n",
    "pass_rate", "ci_low", "ci_high", "refusal_rate", "error_rate", "refusal_policy", "refusal_policy_meaning",
    "language_gap", "best_language", "worst_language", "flipped", "multi_sampled", "flip_rate", "bias_score",
    "judge", "judge_accuracy", "judge_kappa", "judge_measured_at",
]  # fmt: skip


@require_GET
def model_list(request: HttpRequest) -> HttpResponse:
    llms = LLM.objects.annotate(run_count=Count("runs")).order_by("name")
    latest = boards.latest_runs_by_llm()
    records = [
        {
            "model": llm.slug,
            "name": llm.name,
            "provider": llm.provider,
            "model_id": llm.model_id,
            "revision": llm.revision,
            "active": llm.active,
            "runs": llm.run_count,
            "latest_run": latest[llm.pk].pk if llm.pk in latest else None,
        }
        for llm in llms
    ]
    fmt = exports.requested_format(request)
    if fmt:
        return exports.stream_records(fmt, "models", records, list(records[0]) if records else ["model"])
    return render(request, "leaderboard/models.html", {"llms": llms, "latest": latest})


MODEL_TABLES = ("history", "standings", "concern", "language", "input_type", "reflection_type")


@require_GET
def model_detail(request: HttpRequest, slug: str) -> HttpResponse:
    llm = get_object_or_404(LLM, slug=slug)
    filters = boards.Filters.from_query(request.GET)  # only its refusal policy matters here
    history = boards.history(llm, filters.policy)
    fmt = exports.requested_format(request)
    table = request.GET.get("table", "history")
    if fmt and table != "history" and table in MODEL_TABLES:
        report = boards.model_report(llm, filters.policy)
        if table == "standings":
            records = [s.as_dict() for s in report.standings]
        else:
            records = [g.as_dict(table) for g in report.groups.get(table, [])]
        return exports.stream_records(fmt, f"{llm.slug}-{table}", records, list(records[0]) if records else ["level"])
    if fmt:
        records = [
            {
                "run": row.run.pk,
                "status": row.run.status,
                "trigger": row.run.trigger,
                "created_at": row.run.created_at,
                "finished_at": row.run.finished_at,
                "library_version": row.run.library_version,
                "library_hash": row.run.library_hash,
                "revision": row.run.revision,
                **row.as_dict(),
            }
            for row in reversed(history)
        ]
        return exports.stream_records(fmt, f"{llm.slug}-history", records, list(records[0]) if records else ["run"])
    return render(
        request,
        "leaderboard/model.html",
        {
            **_common(request),
            "filters": filters,
            "llm": llm,
            "history": list(reversed(history)),
            "history_chart": boards.history_chart(history),
            "report": boards.model_report(llm, filters.policy),
        },
    )


@require_GET
def run_list(request: HttpRequest) -> HttpResponse:
    runs = Run.objects.select_related("llm").order_by("-created_at", "-pk")
    model = request.GET.get("model")
    if model:
        runs = runs.filter(llm__slug=model)
    status = request.GET.get("status")
    if status in Run.Status.values:
        runs = runs.filter(status=status)
    fmt = exports.requested_format(request)
    if fmt:
        columns = [
            "run",
            "model",
            "status",
            "trigger",
            "created_at",
            "finished_at",
            "library_version",
            "total_prompts",
            "answered_prompts",
            "error_prompts",
        ]
        rows = (
            [
                r.pk,
                r.llm.slug,
                r.status,
                r.trigger,
                r.created_at,
                r.finished_at,
                r.library_version,
                r.total_prompts,
                r.answered_prompts,
                r.error_prompts,
            ]
            for r in runs.iterator(chunk_size=500)
        )
        return exports.stream(fmt, "runs", columns, rows)
    page = Paginator(runs, PAGE_SIZE).get_page(_page_number(request))
    return render(
        request,
        "leaderboard/runs.html",
        {"page": page, "llms": LLM.objects.all(), "statuses": Run.Status.values, "model": model, "status": status},
    )


@require_GET
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("llm"), pk=pk)
    rows = exports.global_report(run) if run.status == Run.Status.DONE else []
    fmt = exports.requested_format(request)
    if fmt:
        return exports.stream(fmt, f"run-{run.pk}-global", exports.GLOBAL_COLUMNS, exports.global_report_rows(run))
    return render(
        request,
        "leaderboard/run.html",
        {
            "run": run,
            "rows": sorted(rows, key=lambda r: (r.requirement.name, r.language, r.input_type, r.reflection_type)),
            "total": Reading.of(run.verdicts.totals()),
            "flips": run.flip_counts(),
            "bias": run.bias_summary().get("all"),
            "judges": boards.judge_notes(run),
            "reports": list(exports.REPORTS) + ["manifest.json"],
            "refresh_s": 5 if run.is_active else None,
        },
    )


@require_GET
def run_progress(request: HttpRequest, pk: int) -> JsonResponse:
    run = get_object_or_404(Run, pk=pk)
    return JsonResponse(run_progress_data(run))


def run_progress_data(run: Run) -> dict[str, Any]:
    return {
        "id": run.pk,
        "status": run.status,
        "total_prompts": run.total_prompts,
        "answered_prompts": run.answered_prompts,
        "error_prompts": run.error_prompts,
        "total_chunks": run.total_chunks,
        "done_chunks": run.done_chunks,
        "verdicts": run.verdict_count,
        "percent": run.progress_percent,
        "heartbeat_at": run.heartbeat_at,
        "error": run.error_message,
    }


@require_GET
def run_report(request: HttpRequest, pk: int, name: str) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("llm"), pk=pk)
    stamp = (run.started_at or run.created_at).strftime("%Y%m%dT%H%M%SZ")
    if name == "manifest.json":
        response = JsonResponse(exports.manifest(run), json_dumps_params={"indent": 2, "ensure_ascii": False})
        response["Content-Disposition"] = f'attachment; filename="run{run.pk}_{stamp}_manifest.json"'
        return response
    if name not in exports.REPORTS:
        raise Http404("No such report")
    columns, rows = exports.REPORTS[name]
    response = exports.stream("csv", f"run{run.pk}_{stamp}_{name[:-4]}", columns, rows(run))
    response["Content-Disposition"] = f'attachment; filename="run{run.pk}_{stamp}_{name}"'
    return response


RESPONSE_COLUMNS = [
    "prompt_id", "run", "model", "requirement", "concern", "language", "template", "template_version",
    "instance", "communities", "prompt", "sample", "seed", "answer", "error", "outcome", "outcome_detail",
    "oracle_outcome", "judge_verdict", "judge_reason", "bias_score", "opinions", "bias_error", "latency_s",
    "attempts",
]  # fmt: skip


def response_record(p: RunPrompt) -> list[Any]:
    r = p.response
    return [
        p.pk, p.run_id, p.run.llm.slug, p.requirement, p.concern.code, p.language.code,
        p.template_version.template.key, p.template_version.number, p.instance_text, " | ".join(p.community_ids),
        p.prompt, p.sample, p.seed, r.text, r.error, r.outcome, r.outcome_detail, r.oracle_outcome, r.judge_verdict,
        r.judge_reason, rounded(r.bias_score), r.opinions, r.bias_error, round(r.latency_s, 3), r.attempts,
    ]  # fmt: skip


@require_GET
def response_list(request: HttpRequest) -> HttpResponse:
    prompts, notes = boards.responses(request.GET)
    fmt = exports.requested_format(request)
    if fmt:
        return exports.stream(
            fmt, "responses", RESPONSE_COLUMNS, (response_record(p) for p in prompts.iterator(chunk_size=2000))
        )
    page = Paginator(prompts, PAGE_SIZE).get_page(_page_number(request))
    return render(
        request,
        "leaderboard/responses.html",
        {
            **_common(request),
            "page": page,
            "notes": notes,
            "llms": LLM.objects.all(),
            "outcomes": boards.OUTCOME_CHOICES,
            "query": request.GET,
        },
    )


@require_GET
def response_detail(request: HttpRequest, pk: int) -> HttpResponse:
    prompt = get_object_or_404(
        RunPrompt.objects.select_related("run__llm", "response", "concern", "language", "template_version__template"),
        pk=pk,
    )
    verdict = Verdict.objects.filter(
        run=prompt.run, requirement=prompt.requirement, template_version=prompt.template_version, sample=prompt.sample
    ).first()
    entry = next((a for a in (verdict.answers if verdict else []) if a.get("prompt") == prompt.pk), None)
    siblings = (
        RunPrompt.objects.filter(
            run=prompt.run,
            requirement=prompt.requirement,
            template_version=prompt.template_version,
            sample=prompt.sample,
        )
        .exclude(pk=prompt.pk)
        .select_related("response")
        .order_by("instance_index")
    )
    others = (
        RunPrompt.objects.filter(
            prompt_hash=prompt.prompt_hash, sample=prompt.sample, run__in=Run.objects.latest_done()
        )
        .exclude(run=prompt.run)
        .select_related("run__llm", "response")
    )
    return render(
        request,
        "leaderboard/response.html",
        {
            "p": prompt,
            "verdict": verdict,
            "entry": entry,
            "siblings": siblings,
            "others": others,
            "judges": boards.judge_notes(prompt.run),
            "pairs": [
                pair
                for pair in boards.pairs_of([verdict] if verdict else [], [prompt, *siblings])
                if prompt.community_ids in (pair.communities_a, pair.communities_b)
            ],
        },
    )


@require_GET
def concern_list(request: HttpRequest) -> HttpResponse:
    concerns = Concern.objects.prefetch_related("texts__language").annotate(
        template_count=Count("templates", distinct=True)
    )
    filters = boards.Filters.from_query({})
    counts = {row["concern__code"]: Reading.of(row) for row in filters.verdicts().counted("concern__code")}
    return render(request, "leaderboard/concerns.html", {"concerns": concerns, "counts": counts})


@require_GET
def concern_detail(request: HttpRequest, code: str) -> HttpResponse:
    concern = get_object_or_404(
        Concern.objects.prefetch_related(Prefetch("texts", ConcernText.objects.select_related("language"))), code=code
    )
    filters = boards.Filters.from_query({**request.GET.dict(), "concern": code})
    runs = [run for run in boards.latest_runs_by_llm().values() if filters.include_inactive or run.llm.active]
    runs.sort(key=lambda r: r.llm.name.casefold())
    tallies = boards.template_tallies(filters, runs)
    version_ids = {version for version, _ in tallies}
    versions = (
        TemplateVersion.objects.filter(pk__in=version_ids)
        .select_related("template__language")
        .order_by("template__language__code", "template__key", "-number")
    )
    rows = [(v, [tallies.get((v.pk, run.llm_id)) for run in runs]) for v in versions]
    untested = Template.objects.filter(concern=concern, active=True).exclude(current_version__in=version_ids)
    if filters.language:
        untested = untested.filter(language=filters.language)
    fmt = exports.requested_format(request)
    if fmt:
        records = [
            {"template": v.template.key, "language": v.template.language.code, "version": v.number,
             "template_version": v.pk, "prompt": v.prompt, "model": run.llm.slug, **tally.as_dict()}
            for v, cells in rows
            for run, tally in zip(runs, cells, strict=True)
            if tally is not None
        ]  # fmt: skip
        return exports.stream_records(fmt, f"concern-{concern.code}", records)
    communities = (
        Community.objects.filter(concern=concern).select_related("language").order_by("language__code", "position")
    )
    return render(
        request,
        "leaderboard/concern.html",
        {
            **_common(request),
            "concern": concern,
            "filters": filters,
            "runs": runs,
            "rows": rows,
            "untested": untested.select_related("language")[:200],
            "communities": communities,
        },
    )


@require_GET
def template_detail(request: HttpRequest, pk: int) -> HttpResponse:
    version = get_object_or_404(
        TemplateVersion.objects.select_related("template__language", "template__concern"), pk=pk
    )
    runs = Run.objects.filter(prompts__template_version=version).distinct().select_related("llm")
    run_id = request.GET.get("run", "")
    # A named run, or else each model's latest finished one.
    runs = runs.filter(pk=int(run_id)) if run_id.isdigit() else runs.filter(pk__in=Run.objects.latest_done())
    models = request.GET.getlist("model")
    if models:
        runs = runs.filter(llm__slug__in=models)
    sections = []
    for run in runs.order_by("llm__name"):
        verdicts = list(
            run.verdicts.filter(template_version=version).select_related("language").order_by("requirement", "sample")
        )
        prompts = list(
            run.prompts.filter(template_version=version)
            .select_related("response", "run__llm", "concern", "language", "template_version__template")
            .order_by("requirement", "sample", "instance_index")
        )
        sections.append(
            {
                "run": run,
                "verdicts": verdicts,
                "prompts": prompts,
                "pairs": boards.pairs_of(verdicts, prompts),
                "judges": boards.judge_notes(run),
            }
        )
    fmt = exports.requested_format(request)
    name = f"template-{version.template.key}-v{version.number}"
    if fmt and request.GET.get("table") == "pairs":
        records = [
            {"model": section["run"].llm.slug, "run": section["run"].pk, **pair.as_record()}
            for section in sections
            for pair in section["pairs"]
        ]
        return exports.stream_records(fmt, f"{name}-pairs", records, PAIR_COLUMNS)
    if fmt:
        rows = (response_record(p) for s in sections for p in s["prompts"] if hasattr(p, "response"))
        return exports.stream(fmt, name, RESPONSE_COLUMNS, rows)
    return render(
        request,
        "leaderboard/template.html",
        {
            "version": version,
            "template": version.template,
            "sections": sections,
            "other_versions": version.template.versions.exclude(pk=version.pk),
            "translations": TemplateVersion.objects.filter(
                template__key=version.template.key,
                pk__in=Template.objects.filter(key=version.template.key).values("current_version"),
            )
            .exclude(pk=version.pk)
            .select_related("template__language"),
        },
    )


PAIR_COLUMNS = [
    "model", "run", "requirement", "sample", "communities_a", "communities_b", "answer_a", "answer_b", "rouge_l",
    "bleu", "sentiment_gap", "sentiment_note", "cosine",
]  # fmt: skip


@require_GET
def compare(request: HttpRequest) -> HttpResponse:
    slugs = list(dict.fromkeys(s for s in request.GET.getlist("models") if s))[:4]
    wanted = {llm.slug: llm for llm in LLM.objects.filter(slug__in=slugs)}
    chosen = [wanted[s] for s in slugs if s in wanted]
    notes = []
    if len(request.GET.getlist("models")) > 4:
        notes.append("At most 4 models are compared; the first 4 were kept.")
    comparison, total = boards.compare(chosen, request.GET, _page_number(request)) if len(chosen) >= 2 else (None, 0)
    fmt = exports.requested_format(request)
    if fmt and comparison:
        columns = ["prompt", "sample", "concern", "language", "template"] + [
            f"{llm.slug} {what}" for llm in comparison.llms for what in ("answer", "outcome")
        ]
        rows = (
            [
                row["prompt"].prompt,
                row["prompt"].sample,
                row["prompt"].concern.code,
                row["prompt"].language.code,
                row["prompt"].template_version.template.key,
            ]
            + [v for c in row["cells"] for v in ((c.response.text, c.response.outcome) if c else (None, None))]
            for row in comparison.rows
        )
        return exports.stream(fmt, "comparison", columns, rows)
    pages = (total + 24) // 25
    return render(
        request,
        "leaderboard/compare.html",
        {
            **_common(request),
            "all_llms": LLM.objects.filter(runs__status=Run.Status.DONE).distinct(),
            "chosen": [llm.slug for llm in chosen],
            "comparison": comparison,
            "notes": notes,
            "page": _page_number(request),
            "pages": pages,
            "total": total,
            "query": request.GET,
        },
    )


@require_GET
def methodology(request: HttpRequest) -> HttpResponse:
    counts = (
        Template.objects.filter(active=True)
        .values("concern__code", "language__code")
        .annotate(n=Count("pk"))
        .order_by("concern__code", "language__code")
    )
    return render(
        request,
        "leaderboard/methodology.html",
        {
            "library": LibraryImport.objects.first(),
            "counts": counts,
            "languages": Language.objects.all(),
            "refusal_policies": REFUSAL_POLICIES,
            "judge_checks": JudgeCheck.objects.latest_per_judge(),
        },
    )
