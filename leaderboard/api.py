"""The read-only JSON API under /api/v1/: the same questions as the pages, as data."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.http import require_GET

from leaderboard import boards, exports
from leaderboard.models import LLM, JudgeCheck, Run, RunPrompt
from leaderboard.ranking import Reading, rounded
from leaderboard.views import overall_records, run_progress_data

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


class BadRequest(ValueError):
    pass


def _json(data: Any, status: int = 200) -> JsonResponse:
    response = JsonResponse(data, status=status, json_dumps_params={"ensure_ascii": False})
    response["Access-Control-Allow-Origin"] = "*"  # public, read-only data
    return response


def _positive(request: HttpRequest, name: str, default: int, maximum: int | None = None) -> int:
    raw = request.GET.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, not {raw[:20]!r}") from None
    if value < 1:
        raise BadRequest(f"{name} must be at least 1")
    return min(value, maximum) if maximum else value


def paginated(request: HttpRequest, queryset: QuerySet[Any], serialise: Any) -> dict[str, Any]:
    size = _positive(request, "page_size", DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
    number = _positive(request, "page", 1)
    paginator = Paginator(queryset, size)
    page = paginator.get_page(number)

    def link(n: int) -> str:
        query = request.GET.copy()
        query["page"] = str(n)
        return request.build_absolute_uri(f"{request.path}?{query.urlencode()}")

    return {
        "count": paginator.count,
        "page": page.number,
        "pages": paginator.num_pages,
        "page_size": size,
        "next": link(page.next_page_number()) if page.has_next() else None,
        "previous": link(page.previous_page_number()) if page.has_previous() else None,
        "results": [serialise(item) for item in page.object_list],
    }


def api_view(func: Any) -> Any:
    """GET only; bad parameters answer 400 with the reason instead of an error page."""

    @require_GET
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
        try:
            return _json(func(request, *args, **kwargs))
        except BadRequest as exc:
            return _json({"error": str(exc)}, status=400)

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    return wrapper


@api_view
def index(request: HttpRequest) -> dict[str, Any]:
    return {
        "version": 1,
        "endpoints": {
            name: request.build_absolute_uri(reverse(f"api:{name}"))
            for name in ("leaderboard", "models", "runs", "responses", "judges")
        },
        "formats": "Every page table also downloads with ?format=csv or ?format=json.",
    }


@api_view
def leaderboard(request: HttpRequest) -> dict[str, Any]:
    filters = boards.Filters.from_query(request.GET)
    board = boards.board(filters)
    return {
        "filters": filters.as_dict(),
        "notes": filters.notes,
        "rows": overall_records(board.rows),
        **{f"by_{m.dimension}": m.records() for m in board.matrices},
    }


def model_json(llm: LLM, request: HttpRequest) -> dict[str, Any]:
    return {
        "slug": llm.slug,
        "name": llm.name,
        "provider": llm.provider,
        "model_id": llm.model_id,
        "revision": llm.revision,
        "active": llm.active,
        "temperature": llm.temperature,
        "max_tokens": llm.max_tokens,
        "seed": llm.seed,
        "samples": llm.samples,
        "schedule": llm.schedule,
        "next_run_at": llm.next_run_at,
        "url": request.build_absolute_uri(reverse("api:model", args=[llm.slug])),
        "page": request.build_absolute_uri(llm.get_absolute_url()),
    }


@api_view
def models(request: HttpRequest) -> dict[str, Any]:
    return paginated(request, LLM.objects.order_by("name"), lambda llm: model_json(llm, request))


@api_view
def model(request: HttpRequest, slug: str) -> dict[str, Any]:
    llm = get_object_or_404(LLM, slug=slug)
    policy = boards.Filters.from_query(request.GET).policy
    report = boards.model_report(llm, policy)
    return {
        **model_json(llm, request),
        "bias_score": llm.bias_score,
        "latest": report.summary() if report.latest else None,
        "standings": [s.as_dict() for s in report.standings],
        **{f"by_{level}": [g.as_dict(level) for g in groups] for level, groups in report.groups.items()},
        "history": [
            {
                "run": row.run.pk,
                "status": row.run.status,
                "finished_at": row.run.finished_at,
                "library_version": row.run.library_version,
                **row.as_dict(),
            }
            for row in boards.history(llm, policy)
        ],
    }


def run_json(run: Run, request: HttpRequest) -> dict[str, Any]:
    return {
        **run_progress_data(run),
        "model": run.llm.slug,
        "model_spec": run.model_spec,
        "revision": run.revision,
        "trigger": run.trigger,
        "library_version": run.library_version,
        "library_hash": run.library_hash,
        "seed": run.seed,
        "samples": run.parameters.get("samples", 1),
        "bias_score": run.bias_score,
        "judge": (run.manifest or {}).get("judge"),
        "bias_judge": (run.manifest or {}).get("bias_judge"),
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "prompt_tokens": run.prompt_tokens,
        "completion_tokens": run.completion_tokens,
        "url": request.build_absolute_uri(reverse("api:run", args=[run.pk])),
        "page": request.build_absolute_uri(run.get_absolute_url()),
    }


@api_view
def runs(request: HttpRequest) -> dict[str, Any]:
    queryset = Run.objects.select_related("llm").order_by("-created_at", "-pk")
    if request.GET.get("model"):
        queryset = queryset.filter(llm__slug=request.GET["model"])
    status = request.GET.get("status")
    if status:
        if status not in Run.Status.values:
            raise BadRequest(f"status must be one of {', '.join(Run.Status.values)}")
        queryset = queryset.filter(status=status)
    return paginated(request, queryset, lambda run: run_json(run, request))


@api_view
def run(request: HttpRequest, pk: int) -> dict[str, Any]:
    item = get_object_or_404(Run.objects.select_related("llm"), pk=pk)
    rows = exports.global_report(item) if item.status == Run.Status.DONE else []
    flipped, multi_sampled = item.flip_counts()
    bias = item.bias_summary().get("all")
    counterfactual = item.counterfactual_by().get("all")
    return {
        **run_json(item, request),
        "parameters": item.parameters,
        "totals": {
            **Reading.of(item.verdicts.totals()).as_dict(),
            "flipped": flipped,
            "multi_sampled": multi_sampled,
            "flip_rate": rounded(flipped / multi_sampled) if multi_sampled else None,
            "bias_score": rounded(bias[0]) if bias else None,
            "pairs": counterfactual.pairs if counterfactual else 0,
            "rouge_l": rounded(counterfactual.rouge_l) if counterfactual else None,
            "bleu": rounded(counterfactual.bleu) if counterfactual else None,
            "sentiment_gap": rounded(counterfactual.sentiment_gap) if counterfactual else None,
            "cosine": rounded(counterfactual.cosine) if counterfactual else None,
        },
        "judges": [note.as_dict() for note in boards.judge_notes(item)],
        "global_evaluation": [dict(zip(exports.GLOBAL_COLUMNS, row, strict=True)) for row in exports.global_rows(rows)],
        "reports": {
            name: request.build_absolute_uri(reverse("run_report", args=[item.pk, name]))
            for name in [*exports.REPORTS, "manifest.json"]
        },
    }


def response_json(p: RunPrompt) -> dict[str, Any]:
    from leaderboard.views import RESPONSE_COLUMNS, response_record

    return dict(zip(RESPONSE_COLUMNS, response_record(p), strict=True))


@api_view
def responses(request: HttpRequest) -> dict[str, Any]:
    if request.GET.get("run") and not request.GET["run"].isdigit():
        raise BadRequest("run must be a run id (a whole number)")
    queryset, notes = boards.responses(request.GET)
    return {**paginated(request, queryset, response_json), "notes": notes}


def judge_check_json(check: JudgeCheck) -> dict[str, Any]:
    return {
        "judge": check.judge,
        "language": check.language,
        "items": check.items,
        "agreed": check.agreed,
        "accuracy": rounded(check.accuracy),
        "kappa": rounded(check.kappa),
        "unusable": check.unusable,
        "labels_hash": check.labels_hash,
        "measured_at": check.measured_at,
    }


@api_view
def judges(request: HttpRequest) -> dict[str, Any]:
    """Every measurement of every judge against the human labels, newest first (?judge= narrows)."""
    queryset = JudgeCheck.objects.order_by("-measured_at", "judge", "language")
    if request.GET.get("judge"):
        queryset = queryset.filter(judge=request.GET["judge"])
    return paginated(request, queryset, judge_check_json)
