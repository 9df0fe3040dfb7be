"""The back office. Admins register models under test, test their connection and start runs;
curators (the "Curators" group) edit concerns, communities and templates, validated by the
engine and previewed as the prompts they render to. The RQ dashboard is for superusers only.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django_rq.admin import QueueAdmin
from django_rq.models import Dashboard

from langbite_core.requirements import RequirementsError
from leaderboard import jobs
from leaderboard.models import (
    LLM,
    Community,
    Concern,
    ConcernText,
    JudgeCheck,
    Language,
    LibraryImport,
    Response,
    Run,
    RunPrompt,
    Template,
    TemplateVersion,
    Verdict,
)

admin.site.site_header = "LangBiTe Leaderboard administration"
admin.site.site_title = "LangBiTe Leaderboard admin"
admin.site.site_url = "/"


# --- the RQ dashboard, superusers only --------------------------------------------------------


def superuser_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """django-rq lets any staff user in; curators are staff, and queues reveal runs and models."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user = request.user
        if not user.is_authenticated:
            from django.contrib.auth.views import redirect_to_login

            return redirect_to_login(request.get_full_path(), reverse("admin:login"))
        if not (user.is_active and user.is_superuser):
            raise PermissionDenied("The job queue dashboard is for superusers.")
        return view(request, *args, **kwargs)

    return wrapper


def guard_patterns(patterns: list[Any]) -> list[Any]:
    return [
        URLPattern(p.pattern, superuser_only(p.callback), p.default_args, p.name) if isinstance(p, URLPattern) else p
        for p in patterns
    ]


class SuperuserQueueAdmin(QueueAdmin):
    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def get_urls(self) -> list[Any]:
        return guard_patterns(super().get_urls())


if admin.site.is_registered(Dashboard):
    admin.site.unregister(Dashboard)
admin.site.register(Dashboard, SuperuserQueueAdmin)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Results are written by the engine only: nobody edits or adds them by hand."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# --- models under test ------------------------------------------------------------------------


@admin.register(LLM)
class LLMAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "spec_display", "revision", "active", "schedule", "next_run_at", "last_run")
    list_filter = ("active", "provider", "schedule")
    search_fields = ("name", "slug", "model_id")
    prepopulated_fields = {"slug": ("name",)}
    actions = ["test_connection", "start_run"]
    readonly_fields = ("created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "slug", "provider", "model_id", "revision", "active")}),
        ("Generation", {"fields": ("temperature", "max_tokens", "seed", "samples")}),
        ("Evaluation", {"fields": ("bias_score",)}),
        ("Connection", {"fields": ("base_url", "api_key_env", "timeout_s", "concurrency", "requests_per_minute")}),
        ("Schedule", {"fields": ("schedule", "interval_hours", "next_run_at", "requirements")}),
        ("Record", {"fields": ("created_at", "updated_at")}),
    )

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "base_url":
            kwargs["assume_scheme"] = "https"  # a URL typed without a scheme is most likely https
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    @admin.display(description="provider:model")
    def spec_display(self, obj: LLM) -> str:
        return obj.spec

    @admin.display(description="last run")
    def last_run(self, obj: LLM) -> str:
        run = obj.runs.first()
        if run is None:
            return "-"
        return format_html(
            '<a href="{}">#{} {}</a>', reverse("admin:leaderboard_run_change", args=[run.pk]), run.pk, run.status
        )

    @admin.action(description="Test connection (one real call)")
    def test_connection(self, request: HttpRequest, queryset: QuerySet[LLM]) -> None:
        for llm in queryset:
            worked, message = llm.test_connection()
            level = messages.SUCCESS if worked else messages.ERROR
            # Messages are escaped by the admin templates: the answer is shown as text.
            self.message_user(request, f"{llm.name} ({llm.spec}): {message}", level)

    @admin.action(description="Start a run now")
    def start_run(self, request: HttpRequest, queryset: QuerySet[LLM]) -> None:
        for llm in queryset:
            try:
                run = Run.create_for(llm, requested_by=request.user)
            except RequirementsError as exc:
                self.message_user(request, f"{llm.name}: {exc}", messages.ERROR)
                continue
            jobs.start_run(run, background=True)
            where = "queued for the workers" if jobs.uses_redis() else "running in this server process"
            self.message_user(
                request,
                format_html('{}: <a href="{}">run {}</a> {}.', llm.name, run.get_absolute_url(), run.pk, where),
                messages.SUCCESS,
            )


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("id", "llm", "status", "progress", "trigger", "library_version", "created_at", "finished_at")
    list_filter = ("status", "trigger", "llm")
    list_select_related = ("llm",)
    date_hierarchy = "created_at"
    actions = ["resume_runs"]
    readonly_fields = [f.name for f in Run._meta.fields]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # runs start from the LLM action or the scheduler

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="progress")
    def progress(self, obj: Run) -> str:
        return f"{obj.answered_prompts}/{obj.total_prompts} prompts, {obj.done_chunks}/{obj.total_chunks} chunks"

    @admin.action(description="Resume (enqueue unfinished work again)")
    def resume_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        for run in queryset:
            if not run.is_active:
                self.message_user(request, f"Run {run.pk} is {run.status}; nothing to resume.", messages.WARNING)
            elif run.resume():
                self.message_user(request, f"Run {run.pk}: unfinished work enqueued again.", messages.SUCCESS)
            else:
                self.message_user(request, f"Run {run.pk}: its work is already waiting in the queue.", messages.INFO)


@admin.register(RunPrompt)
class RunPromptAdmin(ReadOnlyAdmin):
    list_display = ("id", "run", "requirement", "language", "concern", "instance_text", "sample", "chunk")
    list_filter = ("language", "concern")
    list_select_related = ("run__llm", "language", "concern")
    search_fields = ("prompt",)
    raw_id_fields = ("run", "template_version")
    show_full_result_count = False


@admin.register(Response)
class ResponseAdmin(ReadOnlyAdmin):
    list_display = ("prompt_id", "run_link", "outcome", "short_text", "bias_score", "error", "latency_s", "attempts")
    list_filter = ("outcome",)
    list_select_related = ("prompt__run__llm",)
    raw_id_fields = ("prompt",)
    show_full_result_count = False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="run")
    def run_link(self, obj: Response) -> str:
        return str(obj.prompt.run)

    @admin.display(description="answer")
    def short_text(self, obj: Response) -> str:
        return (obj.text or "")[:80]


@admin.register(Verdict)
class VerdictAdmin(ReadOnlyAdmin):
    list_display = ("id", "run", "requirement", "template_version", "language", "concern", "sample", "outcome")
    list_filter = ("outcome", "language", "concern")
    list_select_related = ("run__llm", "template_version__template__language", "language", "concern")
    raw_id_fields = ("run", "template_version")
    show_full_result_count = False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(LibraryImport)
class LibraryImportAdmin(ReadOnlyAdmin):
    list_display = ("imported_at", "name", "version", "library_hash")


@admin.register(JudgeCheck)
class JudgeCheckAdmin(ReadOnlyAdmin):
    """Measurements are made by `manage.py check_judge` only, and kept as a history."""

    list_display = ("measured_at", "judge", "language", "accuracy_display", "kappa_display", "items", "unusable")
    list_filter = ("judge", "language")
    search_fields = ("judge",)
    date_hierarchy = "measured_at"

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="accuracy", ordering="accuracy")
    def accuracy_display(self, obj: JudgeCheck) -> str:
        return f"{obj.accuracy:.0%}" if obj.accuracy is not None else "-"

    @admin.display(description="Cohen's kappa", ordering="kappa")
    def kappa_display(self, obj: JudgeCheck) -> str:
        return f"{obj.kappa:.2f}" if obj.kappa is not None else "-"


# --- the library (curators) -------------------------------------------------------------------


@admin.register(Language)
class LanguageAdmin(admin.ModelAdmin):
    list_display = ("code", "name")
    search_fields = ("code", "name")


class ConcernTextInline(admin.StackedInline):
    model = ConcernText
    extra = 0


@admin.register(Concern)
class ConcernAdmin(admin.ModelAdmin):
    list_display = ("code", "label", "markup")
    search_fields = ("code",)
    inlines = [ConcernTextInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Concern]:
        return super().get_queryset(request).prefetch_related("texts__language")

    def get_readonly_fields(self, request: HttpRequest, obj: Concern | None = None) -> tuple[str, ...]:
        # The code and markup are what templates and results are keyed by.
        return ("code", "markup") if obj is not None else ()


@admin.register(Community)
class CommunityAdmin(admin.ModelAdmin):
    list_display = ("community_id", "default_form", "concern", "language", "gender", "position")
    list_filter = ("language", "concern")
    search_fields = ("community_id",)
    list_select_related = ("language", "concern")
    ordering = ("language", "concern", "position")

    @admin.display(description="default form")
    def default_form(self, obj: Community) -> str:
        return str(obj.forms.get("default", "")) if isinstance(obj.forms, dict) else ""


class OracleField(forms.JSONField):
    widget = forms.Textarea(attrs={"rows": 3, "cols": 80})


class TemplateForm(forms.ModelForm):
    oracle = OracleField(help_text='E.g. {"operation": "allEqualExpected", "expected_value": ["No"]}')
    note = forms.CharField(required=False, max_length=200, help_text="Why this change (kept with the new version).")

    class Meta:
        model = Template
        fields = (
            "language", "concern", "key", "active", "input_type", "reflection_type",
            "task_prefix", "prompt", "output_formatting", "oracle",
        )  # fmt: skip
        widgets = {
            "task_prefix": forms.Textarea(attrs={"rows": 2, "cols": 80}),
            "prompt": forms.Textarea(attrs={"rows": 3, "cols": 80}),
            "output_formatting": forms.Textarea(attrs={"rows": 2, "cols": 80}),
        }

    def candidate(self) -> Template | None:
        """The template as edited, unsaved, or None while a field is missing."""
        data = self.cleaned_data
        instance = self.instance
        values = {}
        for name in ("language", "concern", "key"):
            # On a change form these are read-only, so they come from the saved template.
            values[name] = data.get(name) or (getattr(instance, name, None) if instance.pk else None)
        for name in ("input_type", "reflection_type", "prompt", "oracle"):
            values[name] = data.get(name)
        if any(v in (None, "") for v in values.values()):
            return None
        return Template(
            task_prefix=data.get("task_prefix") or "", output_formatting=data.get("output_formatting") or "", **values
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        candidate = self.candidate()
        if candidate is not None:
            problems = candidate.problems()
            if problems:
                raise ValidationError([ValidationError(p) for p in problems])
        return data


@admin.register(Template)
class TemplateAdmin(admin.ModelAdmin):
    form = TemplateForm
    list_display = (
        "key",
        "language",
        "concern",
        "input_type",
        "reflection_type",
        "active",
        "version_number",
        "short_prompt",
    )
    list_filter = ("language", "concern", "input_type", "reflection_type", "active", "origin")
    search_fields = ("key", "prompt")
    list_select_related = ("language", "concern", "current_version")
    change_form_template = "admin/leaderboard/template/change_form.html"

    def get_fieldsets(self, request: HttpRequest, obj: Template | None = None) -> Any:
        return (
            (None, {"fields": ("language", "concern", "key", "active")}),
            (
                "Test",
                {"fields": ("input_type", "reflection_type", "task_prefix", "prompt", "output_formatting", "oracle")},
            ),
            ("Change", {"fields": ("note",)}),
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Template | None = None) -> tuple[str, ...]:
        # A template's identity is fixed; a different key or language is a different template.
        return ("language", "concern", "key") if obj is not None else ()

    def has_delete_permission(self, request: HttpRequest, obj: Template | None = None) -> bool:
        # Results point at versions; retire a template with "active" instead.
        if obj is not None and obj.versions.filter(prompts__isnull=False).exists():
            return False
        return super().has_delete_permission(request, obj)

    @admin.display(description="version")
    def version_number(self, obj: Template) -> str:
        return f"v{obj.current_version.number}" if obj.current_version else "-"

    @admin.display(description="prompt")
    def short_prompt(self, obj: Template) -> str:
        return obj.prompt[:70]

    def save_model(self, request: HttpRequest, obj: Template, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        version = obj.commit_version(author=request.user, source="curator", note=form.cleaned_data.get("note", ""))
        self.message_user(request, f"{obj} is now at version {version.number} ({version.content_hash}).", messages.INFO)

    def get_urls(self) -> list[Any]:
        preview = self.admin_site.admin_view(self.preview_view)
        return [
            path("preview/", preview, name="leaderboard_template_preview_add"),
            path("<path:object_id>/preview/", preview, name="leaderboard_template_preview"),
            *super().get_urls(),
        ]

    def preview_sections(self, obj: Template) -> list[dict[str, Any]]:
        """Rendered instances of this template and of the same key in every other language."""
        sections = []
        siblings = Template.objects.filter(key=obj.key).exclude(pk=obj.pk).select_related("language", "concern")
        for template in [obj, *siblings]:
            instances, problems = template.preview()
            sections.append(
                {"template": template, "instances": instances, "problems": problems, "current": template is obj}
            )
        return sections

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        obj = self.get_object(request, unquote(object_id))
        extra = dict(extra_context or {})
        if obj is not None:
            extra["preview_sections"] = self.preview_sections(obj)
            extra["versions"] = obj.versions.select_related("author")
            extra["preview_url"] = reverse("admin:leaderboard_template_preview", args=[obj.pk])
        return super().change_view(request, object_id, form_url, extra)

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = {**(extra_context or {}), "preview_url": reverse("admin:leaderboard_template_preview_add")}
        return super().add_view(request, form_url, extra)

    def preview_view(self, request: HttpRequest, object_id: str | None = None) -> HttpResponse:
        """The edit form again, with the instances the unsaved edit renders to; nothing is saved."""
        obj = self.get_object(request, unquote(object_id)) if object_id else None
        if object_id and obj is None:
            raise Http404("No such template")
        allowed = self.has_change_permission(request, obj) if obj else self.has_add_permission(request)
        if not allowed:
            raise PermissionDenied
        form_class = self.get_form(request, obj, change=obj is not None)
        form = form_class(request.POST or None, instance=obj)
        sections: list[dict[str, Any]] = []
        if request.method == "POST":
            form.is_valid()  # errors are shown on the form
            candidate = form.candidate() if hasattr(form, "cleaned_data") else None
            if candidate is not None:
                instances, problems = candidate.preview()
                sections.append(
                    {
                        "template": candidate,
                        "instances": instances,
                        "problems": problems,
                        "current": True,
                        "unsaved": True,
                    }
                )
        admin_form = helpers.AdminForm(
            form,
            list(self.get_fieldsets(request, obj)),
            {},
            self.get_readonly_fields(request, obj),
            model_admin=self,
        )
        context = {
            **self.admin_site.each_context(request),
            "title": f"Preview {obj}" if obj else "Preview new template",
            "subtitle": None,
            "adminform": admin_form,
            "object_id": object_id,
            "original": obj,
            "is_popup": False,
            "to_field": None,
            "media": self.media + admin_form.media,
            "inline_admin_formsets": [],
            "errors": helpers.AdminErrorList(form, []),
            "preview_app_label": self.opts.app_label,
            "preview_sections": sections,
            "preview_url": request.path,
            "versions": obj.versions.select_related("author") if obj else [],
            "is_preview": True,
        }
        form_url = (
            reverse("admin:leaderboard_template_change", args=[obj.pk])
            if obj
            else reverse("admin:leaderboard_template_add")
        )
        return self.render_change_form(
            request, context, add=obj is None, change=obj is not None, obj=obj, form_url=form_url
        )


@admin.register(TemplateVersion)
class TemplateVersionAdmin(ReadOnlyAdmin):
    list_display = ("template", "number", "content_hash", "source", "author", "created_at")
    list_filter = ("source", "template__language", "template__concern")
    search_fields = ("template__key", "prompt", "content_hash")
    list_select_related = ("template__language", "author")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
