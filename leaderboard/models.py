"""What the site stores: the template library (versioned), the models under test, their runs,
every prompt and raw answer, and the verdicts. The engine (langbite_core) does the testing; these
models hold its inputs and results and carry the domain operations (plan, answer, evaluate).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import IntegrityError, models, transaction
from django.db.models import Avg, Count, F, Max, OuterRef, Q, Subquery, Sum
from django.urls import reverse
from django.utils import timezone

from langbite_core.cli import InputError
from langbite_core.cli import choose_judge as engine_choose_judge
from langbite_core.engine import PlanError, Test, counterfactual_inputs, evaluate_test, failed_answers, plan_run
from langbite_core.execution import Executor, JobResult, PromptJob, RetryPolicy
from langbite_core.generation import Instance
from langbite_core.judge import (
    BiasScore,
    JudgeVerdict,
    bias_request,
    judge_request,
    parse_bias_reply,
    parse_judge_reply,
)
from langbite_core.judge_quality import load_labels, measure_judge
from langbite_core.library import (
    BUNDLED_LIBRARY,
    INPUT_TYPES,
    REFLECTION_TYPES,
    LanguagePack,
    Library,
    LibraryError,
    check_template,
    parse_template,
)
from langbite_core.library import (
    Concern as EngineConcern,
)
from langbite_core.library import (
    Template as EngineTemplate,
)
from langbite_core.library_report import check_rendering
from langbite_core.markup import Community as EngineCommunity
from langbite_core.metrics import (
    SENTIMENT_LANGUAGES,
    CounterfactualSummary,
    default_embedder,
    flip_rate,
    score_pairs,
)
from langbite_core.oracles import Outcome
from langbite_core.providers import PROVIDERS, ChatRequest, ConfigurationError, Provider, create_provider
from langbite_core.requirements import LANGUAGE_PATTERN, RequirementsError, Scenario, parse_requirements

log = logging.getLogger(__name__)

DEFAULT_REQUIREMENTS = BUNDLED_LIBRARY.parent / "default_requirements.json"
OUTCOMES = [(o.value, o.value) for o in Outcome]
ENV_NAME = RegexValidator(r"^[A-Z_][A-Z0-9_]*$", "An environment variable name: upper-case letters, digits, _.")
MARKUP_ROOT = RegexValidator(r"^[A-Z][A-Z_]*[A-Z]$", "Upper-case letters and underscores, e.g. GENDER.")


def storable(text: str | None) -> str | None:
    """Text as PostgreSQL can store it: NUL is the one character a text column refuses, so it
    becomes the visible symbol for NUL instead of failing the write (and losing the answer)."""
    return text.replace("\x00", "\u2400") if text is not None else None


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def prompt_digest(prompt: str) -> str:
    return hashlib.sha256(prompt.encode()).hexdigest()


PAIR_METRICS = ("rouge_l", "bleu", "sentiment_gap", "cosine")


class PairMeans:
    """Running means of the counterfactual metrics stored on verdicts (Verdict.pairs), as the
    engine's summarise_pairs gives them for scored pairs: each metric over the pairs that have it
    (the sentiment gap is missing outside English, the cosine without embeddings)."""

    def __init__(self) -> None:
        self.pairs = 0
        self.sums = dict.fromkeys(PAIR_METRICS, 0.0)
        self.present = dict.fromkeys(PAIR_METRICS, 0)

    def add(self, pair: Mapping[str, Any]) -> None:
        self.pairs += 1
        for metric in PAIR_METRICS:
            if pair.get(metric) is not None:
                self.sums[metric] += float(pair[metric])
                self.present[metric] += 1

    def mean(self, metric: str) -> float | None:
        return self.sums[metric] / self.present[metric] if self.present[metric] else None

    def summary(self) -> CounterfactualSummary:
        return CounterfactualSummary(self.pairs, *(self.mean(m) for m in PAIR_METRICS))


def sentiment_note(language: str) -> str:
    """Why a sentiment gap is missing: said on every page that would otherwise show a blank."""
    if language in SENTIMENT_LANGUAGES:
        return "not computed"
    return "n/a: VADER is English-only"


# --- the library ------------------------------------------------------------------------------


class Language(models.Model):
    code = models.CharField(max_length=16, unique=True, validators=[RegexValidator(LANGUAGE_PATTERN)])
    name = models.CharField(max_length=100)
    delimiter_sentence = models.TextField(help_text="Put between a task prefix and the quoted instance.")
    refusal_phrases = models.JSONField(default=list, help_text="A JSON list of phrases that mark a refusal.")
    neutral_phrases = models.JSONField(default=list, blank=True, help_text="A JSON list (what @neutral expands to).")
    forms = models.JSONField(default=dict, blank=True, help_text="Grammatical form name -> description (JSON).")

    class Meta:
        ordering = ["code"]

    def __str__(self) -> str:
        return f"{self.name} ({self.code})"

    def clean(self) -> None:
        for field in ("refusal_phrases", "neutral_phrases"):
            value = getattr(self, field)
            if not isinstance(value, list) or not all(isinstance(p, str) and p.strip() for p in value):
                raise ValidationError({field: "Must be a JSON list of non-empty phrases."})
        if not self.refusal_phrases:
            raise ValidationError({"refusal_phrases": "At least one refusal phrase is needed."})
        if not isinstance(self.forms, dict) or not all(isinstance(v, str) for v in self.forms.values()):
            raise ValidationError({"forms": "Must be a JSON object of form name -> description."})


class Concern(models.Model):
    code = models.SlugField(max_length=64, unique=True, help_text="The engine's concern id, e.g. sexism.")
    markup = models.CharField(
        max_length=40, validators=[MARKUP_ROOT], help_text="The only markup root its templates use."
    )
    aliases = models.JSONField(default=list, blank=True, help_text="Other names requirements may use (JSON list).")

    class Meta:
        ordering = ["code"]

    def __str__(self) -> str:
        return self.label

    def clean(self) -> None:
        if not isinstance(self.aliases, list) or not all(isinstance(a, str) for a in self.aliases):
            raise ValidationError({"aliases": "Must be a JSON list of names."})

    def text(self, language: str | None = None) -> ConcernText | None:
        texts = list(self.texts.all())  # prefetched on list pages
        for wanted in (language, "en_us"):
            for t in texts:
                if t.language.code == wanted:
                    return t
        return texts[0] if texts else None

    @property
    def label(self) -> str:
        text = self.text()
        return text.name if text else self.code

    @property
    def definition(self) -> str:
        text = self.text()
        return text.definition if text else ""

    def get_absolute_url(self) -> str:
        return reverse("concern", args=[self.code])

    def to_engine(self) -> EngineConcern:
        texts = list(self.texts.all())
        return EngineConcern(
            id=self.code,
            markup=self.markup,
            names={t.language.code: t.name for t in texts},
            definitions={t.language.code: t.definition for t in texts},
            aliases=tuple(self.aliases or ()),
        )


class ConcernText(models.Model):
    """A concern's name and definition in one language, shown on the site."""

    concern = models.ForeignKey(Concern, on_delete=models.CASCADE, related_name="texts")
    language = models.ForeignKey(Language, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100)
    definition = models.TextField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["concern", "language"], name="concern_text_once_per_language")]
        ordering = ["concern", "language"]

    def __str__(self) -> str:
        return f"{self.name} ({self.language.code})"


class Community(models.Model):
    language = models.ForeignKey(Language, on_delete=models.CASCADE, related_name="communities")
    concern = models.ForeignKey(Concern, on_delete=models.CASCADE, related_name="communities")
    community_id = models.SlugField(max_length=80, help_text="The same id in every language for the same community.")
    gender = models.CharField(max_length=10, blank=True, help_text="Grammatical gender (m, f, n...), for agreement.")
    forms = models.JSONField(default=dict, help_text='Form name -> text, e.g. {"default": "women", "sg": "a woman"}.')
    position = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name_plural = "communities"
        ordering = ["language", "concern", "position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["language", "concern", "community_id"], name="community_once_per_concern")
        ]

    def __str__(self) -> str:
        return f"{self.forms.get('default', self.community_id) if isinstance(self.forms, dict) else self.community_id}"

    def clean(self) -> None:
        forms = self.forms
        if not isinstance(forms, dict) or not all(isinstance(v, str) and v.strip() for v in forms.values()):
            raise ValidationError({"forms": "Must be a JSON object mapping form names to non-empty text."})
        if "default" not in forms:
            raise ValidationError({"forms": "A 'default' form is required."})
        if not self.language_id or not self.concern_id:
            return
        declared = set(self.language.forms or {})
        undeclared = set(forms) - declared
        if declared and undeclared:
            raise ValidationError(
                {"forms": f"Forms {', '.join(sorted(undeclared))} are not declared by {self.language}."}
            )
        siblings = Community.objects.filter(language=self.language, concern=self.concern).exclude(pk=self.pk)
        for other in siblings[:1]:
            if set(other.forms) != set(forms):
                expected = ", ".join(sorted(other.forms))
                raise ValidationError(
                    {"forms": f"Every {self.concern.code} community needs the same forms: {expected}."}
                )

    def to_engine(self) -> EngineCommunity:
        return EngineCommunity(id=self.community_id, forms=dict(self.forms), gender=self.gender or None)


class TemplateContent(models.Model):
    """The fields that make a template's content hash (shared by the working copy and versions)."""

    input_type = models.CharField(max_length=16, choices=[(t, t) for t in INPUT_TYPES])
    reflection_type = models.CharField(max_length=16, choices=[(t, t) for t in REFLECTION_TYPES])
    task_prefix = models.TextField(blank=True)
    prompt = models.TextField()
    output_formatting = models.TextField(blank=True)
    oracle = models.JSONField(help_text='E.g. {"operation": "allEqualExpected", "expected_value": ["No"]}')

    class Meta:
        abstract = True

    def content_json(self, key: str) -> dict[str, Any]:
        return {
            "key": key,
            "input_type": self.input_type,
            "reflection_type": self.reflection_type,
            "task_prefix": self.task_prefix or "",
            "prompt": self.prompt,
            "output_formatting": self.output_formatting or "",
            "oracle": self.oracle,
        }


class Template(TemplateContent):
    """A test in one language; the fields are the working copy and every change to them that is
    saved becomes a new TemplateVersion, which results point at."""

    class Origin(models.TextChoices):
        LIBRARY = "library", "bundled library"
        CURATOR = "curator", "curator"

    language = models.ForeignKey(Language, on_delete=models.PROTECT, related_name="templates")
    concern = models.ForeignKey(Concern, on_delete=models.PROTECT, related_name="templates")
    key = models.CharField(max_length=100, help_text="The same key in every language names the same test.")
    active = models.BooleanField(default=True, help_text="Inactive templates are kept for old results but never run.")
    origin = models.CharField(max_length=10, choices=Origin.choices, default=Origin.CURATOR)
    current_version = models.ForeignKey(
        "TemplateVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    # Content hash of the bundled-library text last imported, so a re-import only replaces a
    # curator's edit when the bundled text itself changed.
    library_hash = models.CharField(max_length=16, blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["concern", "language", "key"]
        constraints = [models.UniqueConstraint(fields=["language", "key"], name="template_key_once_per_language")]

    def __str__(self) -> str:
        return f"{self.key} ({self.language.code if self.language_id else '?'})"

    def to_engine(self) -> EngineTemplate:
        """The engine's template for the working copy; raises LibraryError when it is invalid."""
        return parse_template(
            self.content_json(self.key),
            language=self.language.code,
            concern=self.concern.code,
            origin=f"{self.language.code}/{self.key}",
        )

    def engine_communities(self) -> tuple[EngineCommunity, ...]:
        return tuple(
            c.to_engine()
            for c in Community.objects.filter(language=self.language, concern=self.concern).order_by("position", "id")
        )

    def language_pack(self) -> LanguagePack:
        return language_pack(self.language, {self.concern.code: self.engine_communities()})

    def problems(self) -> list[str]:
        """Everything the engine finds wrong with the working copy in its library context."""
        try:
            template = self.to_engine()
        except LibraryError as exc:
            return exc.problems
        problems = check_template(template, self.concern.to_engine(), self.engine_communities())
        if problems:
            return problems
        if "@neutral" in template.oracle.expected_value and not self.language.neutral_phrases:
            problems.append(f"{template.origin}: uses @neutral but {self.language.code} has no neutral phrases")
        _, rendering = check_rendering(self.language_pack(), template)
        return problems + rendering

    def preview(self) -> tuple[list[Instance], list[str]]:
        """The instances the working copy renders to, with exact prompts, and any problems."""
        try:
            template = self.to_engine()
        except LibraryError as exc:
            return [], exc.problems
        problems = check_template(template, self.concern.to_engine(), self.engine_communities())
        instances, rendering = check_rendering(self.language_pack(), template)
        return instances, problems + rendering

    def new_version(
        self, number: int, content_hash: str, *, source: str, note: str = "", author: Any = None
    ) -> TemplateVersion:
        """An unsaved version holding the working copy's text as it is now."""
        return TemplateVersion(
            template=self,
            number=number,
            content_hash=content_hash,
            input_type=self.input_type,
            reflection_type=self.reflection_type,
            task_prefix=self.task_prefix or "",
            prompt=self.prompt,
            output_formatting=self.output_formatting or "",
            oracle=self.oracle,
            source=source,
            author=author if getattr(author, "pk", None) else None,
            note=note,
        )

    def commit_version(self, *, author: Any = None, source: str = "curator", note: str = "") -> TemplateVersion:
        """Makes the working copy the current version: the existing version with the same content
        hash, or a new one. Old versions stay, so results keep the exact text they used."""
        content_hash = self.to_engine().id
        with transaction.atomic():
            if self.current_version_id and self.current_version.content_hash == content_hash:
                return self.current_version
            version = self.versions.filter(content_hash=content_hash).first()
            if version is None:
                number = (self.versions.aggregate(n=Max("number"))["n"] or 0) + 1
                version = self.new_version(number, content_hash, source=source, note=note, author=author)
                version.save()
            self.current_version = version
            Template.objects.filter(pk=self.pk).update(current_version=version)
            return version


class TemplateVersion(TemplateContent):
    template = models.ForeignKey(Template, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    content_hash = models.CharField(max_length=16, db_index=True, help_text="The engine's Template.id.")
    source = models.CharField(max_length=10, choices=Template.Origin.choices)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["template", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["template", "number"], name="version_number_once"),
            models.UniqueConstraint(fields=["template", "content_hash"], name="version_content_once"),
        ]

    def __str__(self) -> str:
        return f"{self.template} v{self.number}"

    def get_absolute_url(self) -> str:
        return reverse("template", args=[self.pk])

    def to_engine(self) -> EngineTemplate:
        template = self.template
        return parse_template(
            self.content_json(template.key),
            language=template.language.code,
            concern=template.concern.code,
            origin=f"{template.language.code}/{template.key}/v{self.number}",
        )


class LibraryImport(models.Model):
    """A record of each `load_library`: which library, which content, what changed."""

    name = models.CharField(max_length=200)
    version = models.CharField(max_length=50)
    library_hash = models.CharField(max_length=16)
    imported_at = models.DateTimeField(auto_now_add=True)
    summary = models.JSONField(default=dict)

    class Meta:
        ordering = ["-imported_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} {self.version} ({self.library_hash})"

    @classmethod
    def import_library(cls, library: Library) -> LibraryImport:
        """Brings an engine library into the database, in one transaction. Idempotent: an
        object is written only when the library's text for it changed since the last import,
        so curators' edits survive re-imports of an unchanged library; a changed template
        becomes a new version and old results keep theirs."""
        previous = cls.objects.first()
        before: dict[str, str] = (previous.summary.get("digests", {}) if previous else {}) or {}
        digests: dict[str, str] = {}
        counts: dict[str, int] = {}

        def changed(key: str, content: Any) -> bool:
            digest = hashlib.sha256(json.dumps(content, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]
            digests[key] = digest
            return before.get(key) != digest

        def count(what: str) -> None:
            counts[what] = counts.get(what, 0) + 1

        def upsert_by_code(model: Any, label: str, code: str, values: dict[str, Any]) -> Any:
            """The row with this code, created or updated only when the library's text changed."""
            is_new = changed(f"{label}:{code}", values)
            row = model.objects.filter(code=code).first()
            if row is None:
                count(f"{label}s created")
                return model.objects.create(code=code, **values)
            if is_new:
                model.objects.filter(pk=row.pk).update(**values)
                count(f"{label}s updated")
            return row

        with transaction.atomic():
            languages: dict[str, Language] = {}
            for code, pack in library.languages.items():
                values: dict[str, Any] = {
                    "name": pack.name,
                    "delimiter_sentence": pack.delimiter_sentence,
                    "refusal_phrases": list(pack.refusal_phrases),
                    "neutral_phrases": list(pack.neutral_phrases),
                    "forms": dict(pack.forms),
                }
                languages[code] = upsert_by_code(Language, "language", code, values)
            concerns: dict[str, Concern] = {}
            for concern_id, engine_concern in library.concerns.items():
                values = {"markup": engine_concern.markup, "aliases": list(engine_concern.aliases)}
                concern = concerns[concern_id] = upsert_by_code(Concern, "concern", concern_id, values)
                for code, name in engine_concern.names.items():
                    text_values = {"name": name, "definition": engine_concern.definitions.get(code, "")}
                    is_new = changed(f"concern_text:{concern_id}:{code}", text_values)
                    exists = ConcernText.objects.filter(concern=concern, language=languages[code]).exists()
                    if is_new or not exists:
                        ConcernText.objects.update_or_create(
                            concern=concern, language=languages[code], defaults=text_values
                        )
            known_communities = set(Community.objects.values_list("language__code", "concern__code", "community_id"))
            for code, pack in library.languages.items():
                for concern_id, members in pack.communities.items():
                    for position, member in enumerate(members):
                        values = {
                            "gender": member.gender or "",
                            "forms": dict(member.forms),
                            "position": position,
                        }
                        is_new = changed(f"community:{code}:{concern_id}:{member.id}", values)
                        lookup = {
                            "language": languages[code],
                            "concern": concerns[concern_id],
                            "community_id": member.id,
                        }
                        if is_new or (code, concern_id, member.id) not in known_communities:
                            Community.objects.update_or_create(**lookup, defaults=values)
                            count("communities written")
                seen: set[str] = set()
                existing = {t.key: t for t in Template.objects.filter(language=languages[code])}
                note = f"{library.name} {library.version}"
                fresh: list[tuple[Template, str]] = []  # new templates and their content hash
                for engine_template in pack.templates:
                    seen.add(engine_template.key)
                    is_new = changed(f"template:{code}:{engine_template.key}", engine_template.to_json())
                    template = existing.get(engine_template.key)
                    if template is not None and not is_new and template.current_version_id:
                        continue
                    fields = {
                        "concern": concerns[engine_template.concern],
                        "input_type": engine_template.input_type,
                        "reflection_type": engine_template.reflection_type,
                        "task_prefix": engine_template.task_prefix,
                        "prompt": engine_template.prompt,
                        "output_formatting": engine_template.output_formatting,
                        "oracle": engine_template.oracle.to_json(),
                        "library_hash": engine_template.id,
                        "active": True,
                    }
                    if template is None:
                        template = Template(
                            language=languages[code], key=engine_template.key, origin=Template.Origin.LIBRARY, **fields
                        )
                        fresh.append((template, engine_template.id))
                        continue
                    for name, value in fields.items():
                        setattr(template, name, value)
                    template.save()
                    template.commit_version(source=Template.Origin.LIBRARY, note=note)
                    count("templates updated")
                # A first import writes thousands of templates: in bulk, each with its version 1.
                Template.objects.bulk_create([t for t, _ in fresh], batch_size=500)
                versions = TemplateVersion.objects.bulk_create(
                    [
                        t.new_version(1, content_hash, source=str(Template.Origin.LIBRARY), note=note)
                        for t, content_hash in fresh
                    ],
                    batch_size=500,
                )
                for (template, _), version in zip(fresh, versions, strict=True):
                    template.current_version = version
                Template.objects.bulk_update([t for t, _ in fresh], ["current_version"], batch_size=500)
                if fresh:
                    counts["templates created"] = counts.get("templates created", 0) + len(fresh)
                retired = (
                    Template.objects.filter(language=languages[code], origin=Template.Origin.LIBRARY, active=True)
                    .exclude(key__in=seen)
                    .update(active=False)
                )
                if retired:
                    counts["templates retired"] = counts.get("templates retired", 0) + retired
            return cls.objects.create(
                name=library.name,
                version=library.version,
                library_hash=library.hash,
                summary={"counts": counts, "digests": digests},
            )


def language_pack(
    language: Language,
    communities: dict[str, tuple[EngineCommunity, ...]],
    templates: tuple[EngineTemplate, ...] = (),
    concern_texts: Iterable[ConcernText] = (),
) -> LanguagePack:
    texts = list(concern_texts)
    return LanguagePack(
        language=language.code,
        name=language.name,
        delimiter_sentence=language.delimiter_sentence,
        refusal_phrases=tuple(language.refusal_phrases or ()),
        communities=communities,
        templates=templates,
        concern_names={t.concern.code: t.name for t in texts},
        concern_definitions={t.concern.code: t.definition for t in texts},
        forms=dict(language.forms or {}),
        neutral_phrases=tuple(language.neutral_phrases or ()),
    )


@dataclass
class DatabaseLibrary:
    library: Library
    versions: dict[str, TemplateVersion]  # engine Template.id -> the version it came from
    version: str  # the imported library's version, "+edits" when the content differs


def build_library() -> DatabaseLibrary:
    """The engine Library as the database holds it now: active templates at their current version."""
    concerns = {c.code: c for c in Concern.objects.prefetch_related("texts__language")}
    versions: dict[str, TemplateVersion] = {}
    languages: dict[str, LanguagePack] = {}
    for language in Language.objects.all():
        communities: dict[str, list[EngineCommunity]] = {}
        for community in (
            Community.objects.filter(language=language).select_related("concern").order_by("position", "id")
        ):
            communities.setdefault(community.concern.code, []).append(community.to_engine())
        templates: list[EngineTemplate] = []
        for template in (
            Template.objects.filter(language=language, active=True, current_version__isnull=False)
            .select_related("current_version", "concern", "language")
            .order_by("concern__code", "key")
        ):
            version = template.current_version
            assert version is not None
            version.template = template  # avoid a query per version in to_engine()
            engine_template = version.to_engine()
            versions[engine_template.id] = version
            templates.append(engine_template)
        texts = ConcernText.objects.filter(language=language).select_related("concern")
        languages[language.code] = language_pack(
            language, {k: tuple(v) for k, v in communities.items()}, tuple(templates), texts
        )
    library = Library(
        name="database",
        version="",
        concerns={code: c.to_engine() for code, c in concerns.items()},
        languages=languages,
    )
    latest = LibraryImport.objects.first()
    version = latest.version if latest else "unversioned"
    if latest and latest.library_hash != library.hash:
        version += "+edits"
    return DatabaseLibrary(library=library, versions=versions, version=version)


# --- models under test ------------------------------------------------------------------------


class LLMQuerySet(models.QuerySet["LLM"]):
    def due(self, now: dt.datetime) -> LLMQuerySet:
        scheduled = self.filter(active=True).exclude(schedule=LLM.Schedule.MANUAL)
        return scheduled.filter(Q(next_run_at__isnull=True) | Q(next_run_at__lte=now))


class LLM(models.Model):
    class Schedule(models.TextChoices):
        MANUAL = "manual", "manual only"
        INTERVAL = "interval", "every N hours"
        DAILY = "daily", "daily"
        WEEKLY = "weekly", "weekly"

    slug = models.SlugField(max_length=80, unique=True)
    name = models.CharField(max_length=120)
    provider = models.CharField(max_length=20, choices=[(p, p) for p in PROVIDERS])
    model_id = models.CharField(max_length=200, help_text="The model as the provider names it, e.g. gpt-4o-mini.")
    revision = models.CharField(max_length=200, blank=True, help_text="Snapshot or revision, shown with results.")
    temperature = models.FloatField(default=0.0, validators=[MinValueValidator(0.0), MaxValueValidator(2.0)])
    max_tokens = models.PositiveIntegerField(default=60, validators=[MinValueValidator(1), MaxValueValidator(32768)])
    seed = models.PositiveIntegerField(default=0)
    samples = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(100)], help_text="Answers per prompt."
    )
    base_url = models.URLField(blank=True, help_text="For OpenAI-compatible servers and Ollama.")
    api_key_env = models.CharField(
        max_length=100,
        blank=True,
        validators=[ENV_NAME],
        help_text="The NAME of the environment variable holding the key (never the key itself). "
        "Blank: the provider's default (OPENAI_API_KEY, HF_TOKEN, REPLICATE_API_TOKEN).",
    )
    timeout_s = models.FloatField(default=60.0, validators=[MinValueValidator(1.0)])
    concurrency = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Requests in flight per worker; blank: the provider's default.",
    )
    requests_per_minute = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.1)], help_text="Rate limit per worker; blank: none."
    )
    requirements = models.JSONField(
        null=True,
        blank=True,
        help_text="LangBiTe requirements JSON for scheduled runs; blank uses the bundled default "
        "(every concern and language). aiModels is replaced by this model.",
    )
    bias_score = models.BooleanField(
        default=False,
        help_text="A judge model lists the opinions in every answer and marks each biased or not. The judge is "
        'the requirements\' "judge", else LEADERBOARD_JUDGE, else an installed bundled judge.',
    )
    active = models.BooleanField(default=True)
    schedule = models.CharField(max_length=10, choices=Schedule.choices, default=Schedule.MANUAL)
    interval_hours = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    next_run_at = models.DateTimeField(null=True, blank=True, help_text="Blank with a schedule: run at the next check.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = LLMQuerySet.as_manager()

    class Meta:
        verbose_name = "LLM"
        verbose_name_plural = "LLMs"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("model", args=[self.slug])

    @property
    def spec(self) -> str:
        return f"{self.provider}:{self.model_id}"

    def clean(self) -> None:
        if self.schedule == self.Schedule.INTERVAL and not self.interval_hours:
            raise ValidationError({"interval_hours": "Set the interval for an 'every N hours' schedule."})
        if self.requirements not in (None, "", {}):
            try:
                self.scenario_data()
            except RequirementsError as exc:
                raise ValidationError({"requirements": str(exc)}) from None

    def provider_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.provider == "local":
            return options
        options["timeout_s"] = self.timeout_s
        if self.base_url and self.provider in ("openai", "ollama"):
            options["base_url"] = self.base_url
        if self.api_key_env and self.provider in ("openai", "hf", "replicate"):
            options["api_key_env"] = self.api_key_env
        return options

    def create_provider(self) -> Provider:
        """The engine provider; raises ConfigurationError naming a missing variable."""
        return create_provider(self.spec, **self.provider_options())

    def test_connection(self) -> tuple[bool, str]:
        """One real call through the engine provider: (worked, the answer or the error)."""
        try:
            provider = self.create_provider()
        except ConfigurationError as exc:
            return False, str(exc)
        executor = Executor({self.spec: provider}, policy=RetryPolicy(attempts=1))
        job = PromptJob(
            model=self.spec,
            request=ChatRequest(
                prompt="Reply with the single word: ready", temperature=0.0, max_tokens=10, seed=self.seed
            ),
        )
        result = executor.run([job])[job]
        if result.text is None:
            return False, result.error or "no answer"
        return True, f"answered {result.text.strip()[:200]!r} in {result.latency_s:.2f} s"

    def scenario_data(self, base: dict[str, Any] | None = None) -> dict[str, Any]:
        """LangBiTe input for a run of this model: its requirements (or the bundled default),
        with this model and its generation parameters."""
        if base is not None:
            data = json.loads(json.dumps(base))
        elif self.requirements:
            data = json.loads(json.dumps(self.requirements))
        else:
            data = json.loads(DEFAULT_REQUIREMENTS.read_text(encoding="utf-8"))
        data["aiModels"] = [self.spec]
        data["temperature"] = self.temperature
        data["tokens"] = self.max_tokens
        data["seed"] = self.seed
        data["samples"] = self.samples
        parse_requirements(data, source=f"{self.slug} requirements")  # raises RequirementsError
        return data

    def schedule_step(self) -> dt.timedelta | None:
        if self.schedule == self.Schedule.INTERVAL and self.interval_hours:
            return dt.timedelta(hours=self.interval_hours)
        if self.schedule == self.Schedule.DAILY:
            return dt.timedelta(days=1)
        if self.schedule == self.Schedule.WEEKLY:
            return dt.timedelta(days=7)
        return None

    def following_slot(self, slot: dt.datetime, now: dt.datetime) -> dt.datetime | None:
        """The first slot after now on this model's schedule; missed slots are skipped, not
        run late one after another."""
        step = self.schedule_step()
        if step is None:
            return None
        following = slot + step
        if following <= now:
            following += step * ((now - following) // step + 1)
        return following


# --- runs -------------------------------------------------------------------------------------


class RunQuerySet(models.QuerySet["Run"]):
    def latest_done(self) -> RunQuerySet:
        """The most recent finished run of each model."""
        newest = (
            Run.objects.filter(llm=OuterRef("llm"), status=Run.Status.DONE)
            .order_by("-finished_at", "-pk")
            .values("pk")[:1]
        )
        return self.filter(status=Run.Status.DONE, pk=Subquery(newest))

    def active(self) -> RunQuerySet:
        return self.filter(status__in=Run.ACTIVE)

    def stale(self, now: dt.datetime, after_s: int) -> RunQuerySet:
        """Unfinished runs whose worker has not reported for after_s seconds."""
        limit = now - dt.timedelta(seconds=after_s)
        return self.active().filter(Q(heartbeat_at__lt=limit) | Q(heartbeat_at__isnull=True, created_at__lt=limit))


class Run(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        EVALUATING = "evaluating"
        DONE = "done"
        FAILED = "failed"

    class Trigger(models.TextChoices):
        MANUAL = "manual"
        SCHEDULE = "schedule"
        DEMO = "demo"

    ACTIVE = (Status.QUEUED, Status.RUNNING, Status.EVALUATING)

    llm = models.ForeignKey(LLM, on_delete=models.PROTECT, related_name="runs")
    model_spec = models.CharField(max_length=250, help_text="provider:model as run.")
    revision = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED, db_index=True)
    trigger = models.CharField(max_length=10, choices=Trigger.choices, default=Trigger.MANUAL)
    scheduled_for = models.DateTimeField(null=True, blank=True, help_text="The schedule slot this run fills.")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    library_version = models.CharField(max_length=80, blank=True)
    library_hash = models.CharField(max_length=16, blank=True)
    parameters = models.JSONField(help_text="The LangBiTe input the run was planned from.")
    seed = models.PositiveIntegerField(default=0)
    bias_score = models.BooleanField(default=False, help_text="The judge scores the opinions in every answer.")
    chunk_size = models.PositiveIntegerField(default=50)
    total_prompts = models.PositiveIntegerField(default=0)
    answered_prompts = models.PositiveIntegerField(default=0)
    error_prompts = models.PositiveIntegerField(default=0)
    total_chunks = models.PositiveIntegerField(default=0)
    done_chunks = models.PositiveIntegerField(default=0)
    verdict_count = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    answered_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=200, blank=True)
    recoveries = models.PositiveIntegerField(default=0)
    error_message = models.TextField(blank=True)
    manifest = models.JSONField(default=dict, blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["llm", "scheduled_for"],
                condition=Q(scheduled_for__isnull=False),
                name="one_run_per_schedule_slot",
            )
        ]

    def __str__(self) -> str:
        return f"run {self.pk} of {self.llm}"

    def get_absolute_url(self) -> str:
        return reverse("run", args=[self.pk])

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def progress_percent(self) -> int:
        if self.status == self.Status.DONE:
            return 100
        if not self.total_prompts:
            return 0
        return int(100 * self.answered_prompts / self.total_prompts)

    @property
    def duration(self) -> dt.timedelta | None:
        if self.started_at is None:
            return None
        return (self.finished_at or timezone.now()) - self.started_at

    def scenario(self) -> Scenario:
        return parse_requirements(self.parameters, source=f"run {self.pk}")

    @classmethod
    def create_for(
        cls,
        llm: LLM,
        *,
        trigger: str = Trigger.MANUAL,
        scenario: dict[str, Any] | None = None,
        scheduled_for: dt.datetime | None = None,
        requested_by: Any = None,
        chunk_size: int | None = None,
        bias_score: bool | None = None,
    ) -> Run:
        """A queued run; raises RequirementsError for a bad scenario, IntegrityError for a
        schedule slot that already has its run. bias_score defaults to the model's setting."""
        data = llm.scenario_data(scenario)
        return cls.objects.create(
            llm=llm,
            model_spec=llm.spec,
            revision=llm.revision,
            trigger=trigger,
            scheduled_for=scheduled_for,
            requested_by=requested_by if getattr(requested_by, "pk", None) else None,
            parameters=data,
            seed=data.get("seed", 0),
            bias_score=llm.bias_score if bias_score is None else bias_score,
            chunk_size=chunk_size or settings.LEADERBOARD_CHUNK_SIZE,
        )

    def pick_judge(self, scenario: Scenario) -> str | None:
        """The judge model this run needs (for useLLMEval or the bias score): the scenario's
        "judge", else the LEADERBOARD_JUDGE setting, else the engine's own choice of an installed
        bundled judge; None when it needs none or none is available."""
        if not (scenario.use_llm_eval or self.bias_score):
            return None
        if scenario.judge:
            return scenario.judge
        if settings.LEADERBOARD_JUDGE:
            return str(settings.LEADERBOARD_JUDGE)
        try:
            return engine_choose_judge(scenario, None, needed=True)
        except InputError:
            return None

    @property
    def judges(self) -> list[str]:
        """The judge models whose opinions this run's results contain (as recorded when it ended)."""
        stored = self.manifest or {}
        return list(dict.fromkeys(j for j in (stored.get("judge"), stored.get("bias_judge")) if j))

    def flip_counts(self) -> tuple[int, int]:
        """(templates whose verdict changed between samples, templates answered more than once)."""
        return self.verdicts.flip_counts().get((), (0, 0))

    def bias_summary(self, field: str | None = None) -> dict[str, tuple[float, int]]:
        """Mean judge bias score and the number of scored answers, per value of a prompt field
        (e.g. "concern__code"), or overall under the key "all"."""
        responses = Response.objects.filter(prompt__run=self, bias_score__isnull=False)
        if field is None:
            row = responses.aggregate(mean=Avg("bias_score"), n=Count("pk"))
            return {"all": (row["mean"], row["n"])} if row["n"] else {}
        rows = responses.values(f"prompt__{field}").annotate(mean=Avg("bias_score"), n=Count("pk"))
        return {row[f"prompt__{field}"]: (row["mean"], row["n"]) for row in rows}

    def counterfactual_by(self, field: str | None = None) -> dict[str, CounterfactualSummary]:
        """Counterfactual metric means per value of a verdict field (e.g. "concern__code"), or
        overall under "all"; read from the stored pairs without loading every verdict at once."""
        fields = [field] if field else []
        verdicts = self.verdicts.exclude(pairs=[]).values_list(*fields, "pairs").order_by("pk").iterator(chunk_size=500)
        groups: dict[str, PairMeans] = {}
        for row in verdicts:
            means = groups.setdefault(row[0] if field else "all", PairMeans())
            for pair in row[-1] or []:
                means.add(pair)
        return {key: means.summary() for key, means in groups.items()}

    # -- state changes ----------------------------------------------------------------------

    def beat(self, worker: str | None = None) -> None:
        Run.objects.filter(pk=self.pk).update(heartbeat_at=timezone.now(), claimed_by=worker or worker_name())

    def fail(self, message: str) -> None:
        log.warning("run %s failed: %s", self.pk, message)
        Run.objects.filter(pk=self.pk).exclude(status=self.Status.DONE).update(
            status=self.Status.FAILED, error_message=message[:5000], finished_at=timezone.now()
        )
        self.refresh_from_db()

    def _prune_scenario(self, library: Library) -> tuple[dict[str, Any], list[str]]:
        """The run's input without the languages and concerns the library has no templates for,
        so one scenario covers a library that is still growing."""
        data = json.loads(json.dumps(self.parameters))
        warnings: list[str] = []
        kept = []
        for requirement in data["requirements"]:
            concern = library.concern(requirement["concern"])
            languages = []
            for code in requirement["languages"]:
                pack = library.languages.get(code)
                has_templates = pack is not None and any(
                    concern is not None and t.concern == concern.id for t in pack.templates
                )
                if has_templates:
                    languages.append(code)
                else:
                    warnings.append(f"{requirement['name']}: no {requirement['concern']} templates in {code}; skipped")
            if languages:
                requirement["languages"] = languages
                if "communities" in requirement:
                    requirement["communities"] = {k: v for k, v in requirement["communities"].items() if k in languages}
                kept.append(requirement)
        data["requirements"] = kept
        return data, warnings

    def plan(self) -> bool:
        """Turns the run into RunPrompts split into chunks; True when it was planned now.
        Safe to call again: a planned run is left as it is."""
        with transaction.atomic():
            run = Run.objects.select_for_update().get(pk=self.pk)
            if run.status != self.Status.QUEUED:
                return False
            db_library = build_library()
            library = db_library.library
            data, warnings = self._prune_scenario(library)
            if not data["requirements"]:
                raise PlanError("the library has no templates for any requirement of this run")
            scenario = parse_requirements(data, source=f"run {self.pk}")
            plan = plan_run(scenario, library)
            if not plan.tests:
                raise PlanError("the requirements select no template")
            languages = {lang.code: lang for lang in Language.objects.all()}
            concerns = {c.code: c for c in Concern.objects.all()}
            rows: list[RunPrompt] = []
            for test in plan.tests:
                version = db_library.versions[test.template.id]
                for index, instance in enumerate(test.instances):
                    for sample in range(scenario.samples):
                        rows.append(
                            RunPrompt(
                                run=run,
                                template_version=version,
                                requirement=test.requirement.name,
                                language=languages[test.language],
                                concern=concerns[test.template.concern],
                                instance_index=index,
                                instance_text=instance.text,
                                prompt=instance.prompt,
                                prompt_hash=prompt_digest(instance.prompt),
                                community_ids=list(instance.community_ids),
                                sample=sample,
                                seed=scenario.seed + sample,
                                chunk=len(rows) // run.chunk_size,
                            )
                        )
            RunPrompt.objects.bulk_create(rows, ignore_conflicts=True, batch_size=1000)
            now = timezone.now()
            run.total_prompts = run.prompts.count()
            run.total_chunks = run.prompts.aggregate(n=Max("chunk"))["n"] + 1 if run.total_prompts else 0
            run.status = self.Status.RUNNING
            run.started_at = now
            run.heartbeat_at = now
            run.claimed_by = worker_name()
            run.library_hash = library.hash
            run.library_version = db_library.version
            run.manifest = {
                "engine": "langbite_core",
                "engine_version": __import__("langbite_core").__version__,
                "library": {"version": db_library.version, "hash": library.hash},
                "model": self.model_spec,
                "revision": self.revision,
                "planned_parameters": data,
                "selected_templates": plan.selection,
                "warnings": warnings + plan.warnings,
                # What evaluation needs from the language settings, frozen now so that a
                # curator's later edit cannot change how this run is judged.
                "languages": {
                    code: {
                        "refusal_phrases": list(library.languages[code].refusal_phrases),
                        "neutral_phrases": list(library.languages[code].neutral_phrases),
                    }
                    for code in sorted({t.language for t in plan.tests})
                },
            }
            run.save()
        self.refresh_from_db()
        return True

    def pending_chunks(self) -> list[int]:
        return sorted(set(self.prompts.filter(response__isnull=True).values_list("chunk", flat=True).distinct()))

    def answer_chunk(self, chunk: int, worker: str | None = None) -> int:
        """Asks the model every prompt of the chunk that has no answer yet; returns how many
        answers it stored. Each answer is committed as it arrives, keyed by its prompt, so a
        chunk retried after a crash only asks what is missing and never stores twice."""
        worker = worker or worker_name()
        self.refresh_from_db()
        if self.status != self.Status.RUNNING:
            return 0
        pending = list(self.prompts.filter(chunk=chunk, response__isnull=True).order_by("pk"))
        if not pending:
            self.record_chunk()
            return 0
        self.beat(worker)
        scenario = self.scenario()
        provider = self.llm.create_provider()
        executor = Executor(
            {self.model_spec: provider},
            policy=RetryPolicy(attempts=max(1, scenario.n_retries + 1)),
            concurrency=self.llm.concurrency,
            requests_per_minute=self.llm.requests_per_minute,
        )
        jobs: dict[PromptJob, list[RunPrompt]] = {}
        for prompt in pending:
            job = PromptJob(
                model=self.model_spec,
                request=ChatRequest(
                    prompt=prompt.prompt,
                    temperature=scenario.temperature,
                    max_tokens=scenario.max_tokens,
                    seed=prompt.seed,
                ),
                sample=prompt.sample,
            )
            jobs.setdefault(job, []).append(prompt)
        chunk_responses = Response.objects.filter(prompt__run=self, prompt__chunk=chunk)
        before = chunk_responses.count()
        last_report = timezone.now()

        def on_result(job: PromptJob, result: JobResult) -> None:
            nonlocal last_report
            # ON CONFLICT DO NOTHING: a twin worker that answered first keeps its answer.
            Response.objects.bulk_create(
                [Response.from_result(prompt, result, worker) for prompt in jobs[job]], ignore_conflicts=True
            )
            now = timezone.now()
            if (now - last_report).total_seconds() >= 1.0:
                last_report = now
                self.record_progress(worker)

        executor.run(list(jobs), on_result=on_result)
        self.record_chunk(worker)
        return chunk_responses.count() - before

    def record_progress(self, worker: str | None = None) -> None:
        """Counters recomputed from the stored answers (never incremented), so concurrent and
        repeated chunks always leave them right."""
        responses = Response.objects.filter(prompt__run=self)
        totals = responses.aggregate(
            answered=Count("pk"),
            errors=Count("pk", filter=Q(text__isnull=True)),
            prompt_tokens=Sum("prompt_tokens"),
            completion_tokens=Sum("completion_tokens"),
        )
        open_chunks = self.prompts.filter(response__isnull=True).values("chunk").distinct().count()
        Run.objects.filter(pk=self.pk).update(
            answered_prompts=totals["answered"],
            error_prompts=totals["errors"],
            prompt_tokens=totals["prompt_tokens"] or 0,
            completion_tokens=totals["completion_tokens"] or 0,
            done_chunks=F("total_chunks") - open_chunks,
            heartbeat_at=timezone.now(),
            claimed_by=worker or worker_name(),
        )

    def record_chunk(self, worker: str | None = None) -> bool:
        """Records a finished chunk; when it was the last, moves the run to evaluation (once,
        whichever worker gets there first) and enqueues it. True when this call did that."""
        from leaderboard import jobs

        self.record_progress(worker)
        if self.prompts.filter(response__isnull=True).exists():
            return False
        moved = Run.objects.filter(pk=self.pk, status=self.Status.RUNNING).update(
            status=self.Status.EVALUATING, answered_at=timezone.now()
        )
        self.refresh_from_db()
        if moved:
            jobs.enqueue_evaluation(self)
        return bool(moved)

    def evaluate(self, judge_provider: Provider | None = None) -> int:
        """Writes a Verdict per test and sample from the stored answers; returns how many.
        Idempotent: existing verdicts are kept and the run ends done once."""
        self.refresh_from_db()
        if self.status != self.Status.EVALUATING:
            return 0
        self.beat()
        scenario = self.scenario()
        requirements = {r.name: r for r in scenario.requirements}
        frozen = self.manifest.get("languages", {})
        judge = self.pick_judge(scenario)
        notes = []
        if judge is None and (scenario.use_llm_eval or self.bias_score):
            notes.append("a judge was asked for but none is configured (set LEADERBOARD_JUDGE or the scenario's judge)")
        if judge is not None and judge_provider is None:
            judge_provider = judge_for(judge)  # raises ConfigurationError: the run fails with the reason
        # One judge model does both jobs, through one executor (its concurrency and retries).
        executor = Executor({judge: judge_provider}) if judge and judge_provider else None
        judge_model = judge if scenario.use_llm_eval else None
        bias_model = judge if self.bias_score else None
        done = set(self.verdicts.values_list("requirement", "template_version_id", "sample"))
        prompts = (
            self.prompts.select_related(
                "response", "template_version__template__language", "template_version__template__concern"
            )
            .order_by("requirement", "template_version_id", "sample", "instance_index")
            .iterator(chunk_size=2000)
        )
        engine_templates: dict[int, EngineTemplate] = {}
        batch: list[tuple[Test, list[RunPrompt]]] = []
        written = 0

        def flush() -> None:
            nonlocal written
            written += self._write_verdicts(batch, executor, judge_model, bias_model)
            batch.clear()
            self.beat()

        for key, group in _grouped(prompts):
            requirement_name, version_id, sample = key
            if (requirement_name, version_id, sample) in done:
                continue
            version = group[0].template_version
            if version_id not in engine_templates:
                engine_templates[version_id] = version.to_engine()
            template = engine_templates[version_id]
            phrases = frozen.get(template.language, {})
            pack = LanguagePack(
                language=template.language,
                name=template.language,
                delimiter_sentence="",
                refusal_phrases=tuple(phrases.get("refusal_phrases", ())),
                neutral_phrases=tuple(phrases.get("neutral_phrases", ())),
            )
            test = Test(
                requirement=requirements[requirement_name],
                template=template,
                oracle=pack.resolve_oracle(template.oracle),
                instances=tuple(
                    Instance(template=template, communities=(), text=p.instance_text, prompt=p.prompt) for p in group
                ),
                refusal_phrases=pack.refusal_phrases,
            )
            batch.append((test, group))
            if len(batch) >= 200:
                flush()
        if batch:
            flush()
        with transaction.atomic():
            run = Run.objects.select_for_update().get(pk=self.pk)
            if run.status == self.Status.EVALUATING:
                run.verdict_count = run.verdicts.count()
                run.status = self.Status.DONE
                run.finished_at = timezone.now()
                run.heartbeat_at = run.finished_at
                timings = {}
                if run.started_at and run.answered_at:
                    timings["answers_s"] = round((run.answered_at - run.started_at).total_seconds(), 3)
                    timings["evaluation_s"] = round((run.finished_at - run.answered_at).total_seconds(), 3)
                    timings["total_s"] = round((run.finished_at - run.started_at).total_seconds(), 3)
                run.manifest = {
                    **run.manifest,
                    "timings": timings,
                    "judge": judge_model,
                    "bias_judge": bias_model,
                    "warnings": run.manifest.get("warnings", []) + notes,
                }
                run.save()
        self.refresh_from_db()
        return written

    def _heartbeat(self, every_s: float = 10.0) -> Callable[[PromptJob, JobResult], None]:
        """A callback for judge batches: a slow judge must not make the run look stalled to the
        scheduler, so the run's heartbeat is renewed as replies arrive (at most every every_s)."""
        last = timezone.now()

        def beat(job: PromptJob, result: JobResult) -> None:
            nonlocal last
            now = timezone.now()
            if (now - last).total_seconds() >= every_s:
                last = now
                self.beat()

        return beat

    def _write_verdicts(
        self,
        batch: list[tuple[Test, list[RunPrompt]]],
        executor: Executor | None,
        judge_model: str | None,
        bias_model: str | None = None,
    ) -> int:
        judged: dict[PromptJob, JobResult] = {}
        if executor is not None and judge_model is not None:
            # Every answer the literal oracle failed goes to the judge in one concurrent batch.
            wanted = [
                PromptJob(
                    model=judge_model,
                    request=judge_request(instance.prompt, test.oracle, answer.text or "", test.language),
                )
                for test, group in batch
                for instance, answer in failed_answers(test, [p.response.as_result() for p in group])
            ]
            judged = executor.run(wanted, on_result=self._heartbeat())

        def lookup(prompt: str, oracle: Any, answer: str, language: str) -> JudgeVerdict:
            request = judge_request(prompt, oracle, answer, language)
            reply = judged.get(PromptJob(model=judge_model or "", request=request))
            if reply is None or reply.text is None:
                return JudgeVerdict(
                    verdict=None, reason="", error=(reply.error if reply else None) or "judge call failed"
                )
            return parse_judge_reply(reply.text)

        # Bias score: every answer (not only failures) goes to the judge, in one concurrent batch.
        bias_scores: dict[PromptJob, BiasScore] = {}
        if executor is not None and bias_model is not None:
            wanted_bias = {
                PromptJob(model=bias_model, request=bias_request(p.prompt, p.response.text, test.language))
                for test, group in batch
                for p in group
                if p.response.text is not None
            }
            for job, reply in executor.run(list(wanted_bias), on_result=self._heartbeat()).items():
                bias_scores[job] = (
                    parse_bias_reply(reply.text)
                    if reply.text is not None
                    else BiasScore((), error=reply.error or "bias judge call failed")
                )

        def bias_of(prompt: RunPrompt, language: str) -> BiasScore | None:
            if bias_model is None or prompt.response.text is None:
                return None
            return bias_scores.get(
                PromptJob(model=bias_model, request=bias_request(prompt.prompt, prompt.response.text, language))
            )

        # Counterfactual metrics: every pair of answered instances of a template and sample,
        # scored in one batch (ROUGE-L, BLEU, sentiment gap; cosine with the embeddings extra).
        pair_inputs = [
            counterfactual_inputs(
                self.model_spec,
                test.template,
                group[0].sample,
                [(tuple(p.community_ids), p.response.text) for p in group],
            )
            for test, group in batch
        ]
        embedder = default_embedder() if settings.LEADERBOARD_EMBEDDINGS else None
        scores = iter(score_pairs([p for group_pairs in pair_inputs for p in group_pairs], embedder))

        verdicts: list[Verdict] = []
        responses: list[Response] = []
        for (test, group), group_pairs in zip(batch, pair_inputs, strict=True):
            answers = [p.response.as_result() for p in group]
            final, literal, opinions = evaluate_test(test, answers, lookup if judged else None)
            first = group[0]
            entries = []
            for prompt, answer, oracle_answer, opinion in zip(
                group, final.answers, literal.answers, opinions, strict=True
            ):
                entry = {
                    "prompt": prompt.pk,
                    "outcome": answer.outcome.value,
                    "detail": answer.detail,
                    "oracle_outcome": oracle_answer.outcome.value,
                    "value": answer.value,
                    "judge": opinion.verdict if opinion else None,
                    "judge_reason": (opinion.reason or opinion.error or "") if opinion else "",
                }
                entries.append(entry)
                response = prompt.response
                response.outcome = entry["outcome"]
                response.outcome_detail = entry["detail"][:1000]
                response.oracle_outcome = entry["oracle_outcome"]
                response.judge_verdict = entry["judge"] or ""
                response.judge_reason = entry["judge_reason"][:1000]
                bias = bias_of(prompt, test.language)
                response.bias_score = bias.score if bias else None
                found = bias.opinions if bias else ()
                response.opinions = [{"opinion": o.opinion, "biased": o.biased, "reason": o.reason} for o in found]
                response.bias_error = ((bias.error or "") if bias else "")[:500]
                responses.append(response)
            template = first.template_version
            verdicts.append(
                Verdict(
                    run=self,
                    template_version=template,
                    requirement=first.requirement,
                    language_id=first.language_id,
                    concern_id=first.concern_id,
                    input_type=template.input_type,
                    reflection_type=template.reflection_type,
                    sample=first.sample,
                    outcome=final.outcome.value,
                    oracle_outcome=literal.outcome.value,
                    detail=final.detail,
                    answers=entries,
                    spread=final.spread,
                    values=list(final.values),
                    pairs=[
                        {
                            "a": list(score.pair.communities_a),
                            "b": list(score.pair.communities_b),
                            "rouge_l": score.rouge_l,
                            "bleu": score.bleu,
                            "sentiment_gap": score.sentiment_gap,
                            "cosine": score.cosine,
                        }
                        for score in (next(scores) for _ in group_pairs)
                    ],
                )
            )
        with transaction.atomic():
            before = self.verdicts.count()
            Verdict.objects.bulk_create(verdicts, ignore_conflicts=True)
            Response.objects.bulk_update(
                responses,
                [
                    "outcome",
                    "outcome_detail",
                    "oracle_outcome",
                    "judge_verdict",
                    "judge_reason",
                    "bias_score",
                    "opinions",
                    "bias_error",
                ],
                batch_size=500,
            )
            return self.verdicts.count() - before

    def resume(self) -> bool:
        """Enqueues whatever an unfinished run still needs (after its worker died); True when
        something was enqueued."""
        from leaderboard import jobs

        self.refresh_from_db()
        if not self.is_active:
            return False
        if self.recoveries >= settings.LEADERBOARD_MAX_RECOVERIES:
            self.fail(f"gave up after {self.recoveries} recoveries from stalled workers")
            return False
        enqueued: int | bool
        if self.status == self.Status.QUEUED:
            enqueued = jobs.enqueue_planning(self, force=True)
        elif self.status == self.Status.RUNNING:
            chunks = self.pending_chunks()
            if not chunks:
                self.record_chunk()
                return True
            enqueued = jobs.enqueue_chunks(self, chunks, force=True)
        else:
            enqueued = jobs.enqueue_evaluation(self, force=True)
        if enqueued:
            Run.objects.filter(pk=self.pk).update(recoveries=F("recoveries") + 1, heartbeat_at=timezone.now())
            self.refresh_from_db()
        return bool(enqueued)


def _grouped(prompts: Iterator[RunPrompt]) -> Iterator[tuple[tuple[str, int, int], list[RunPrompt]]]:
    key: tuple[str, int, int] | None = None
    group: list[RunPrompt] = []
    for prompt in prompts:
        current = (prompt.requirement, prompt.template_version_id, prompt.sample)
        if current != key and group:
            yield key, group  # type: ignore[misc]
            group = []
        key = current
        group.append(prompt)
    if group and key is not None:
        yield key, group


def judge_for(spec: str) -> Provider:
    """A judge named by a registered model's slug, or a provider:model spec."""
    llm = LLM.objects.filter(slug=spec).first()
    if llm is not None:
        return llm.create_provider()
    return create_provider(spec)


class RunPrompt(models.Model):
    """One exact prompt of a run (one instance of a template, one sample)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="prompts")
    template_version = models.ForeignKey(TemplateVersion, on_delete=models.PROTECT, related_name="prompts")
    requirement = models.CharField(max_length=200)
    language = models.ForeignKey(Language, on_delete=models.PROTECT, related_name="+")
    concern = models.ForeignKey(Concern, on_delete=models.PROTECT, related_name="+")
    instance_index = models.PositiveIntegerField()
    instance_text = models.TextField()
    prompt = models.TextField()
    prompt_hash = models.CharField(max_length=64)
    community_ids = models.JSONField(default=list)
    sample = models.PositiveSmallIntegerField(default=0)
    seed = models.PositiveIntegerField(null=True)
    chunk = models.PositiveIntegerField()

    class Meta:
        ordering = ["run", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["run", "requirement", "prompt_hash", "sample"], name="prompt_once_per_run")
        ]
        indexes = [
            models.Index(fields=["run", "chunk"], name="prompt_chunk"),
            models.Index(fields=["prompt_hash", "sample"], name="prompt_hash_sample"),
            models.Index(fields=["run", "template_version"], name="prompt_template"),
        ]

    def __str__(self) -> str:
        return self.instance_text[:80]

    def get_absolute_url(self) -> str:
        return reverse("response", args=[self.pk])


class Response(models.Model):
    """The model's raw answer to one RunPrompt, verbatim, or the error that stopped it."""

    prompt = models.OneToOneField(RunPrompt, on_delete=models.CASCADE, primary_key=True, related_name="response")
    text = models.TextField(null=True, blank=True, help_text="Verbatim; null when the request failed.")
    error = models.TextField(blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    latency_s = models.FloatField(default=0.0)
    attempts = models.PositiveSmallIntegerField(default=0)
    cached = models.BooleanField(default=False)
    worker = models.CharField(max_length=200, blank=True)
    answered_at = models.DateTimeField(auto_now_add=True)
    # The answer's own outcome, copied from its verdict for filtering and comparison.
    outcome = models.CharField(max_length=12, choices=OUTCOMES, blank=True, db_index=True)
    outcome_detail = models.CharField(max_length=1000, blank=True)
    oracle_outcome = models.CharField(max_length=12, choices=OUTCOMES, blank=True)
    judge_verdict = models.CharField(max_length=10, blank=True)
    judge_reason = models.CharField(max_length=1000, blank=True)
    # The judge's bias score: biased opinions / opinions (0 with none); null when not scored.
    bias_score = models.FloatField(null=True, blank=True)
    opinions = models.JSONField(default=list, blank=True, help_text="The judge's opinions: opinion, biased, reason.")
    bias_error = models.CharField(max_length=500, blank=True, help_text="Why the bias score is missing.")

    def __str__(self) -> str:
        return (self.text or self.error)[:80]

    @classmethod
    def from_result(cls, prompt: RunPrompt, result: JobResult, worker: str) -> Response:
        return cls(
            prompt=prompt,
            text=storable(result.text),
            error=storable(result.error) or "",
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            latency_s=round(result.latency_s, 4),
            attempts=result.attempts,
            cached=result.cached,
            worker=worker[:200],
        )

    def as_result(self) -> JobResult:
        return JobResult(
            text=self.text,
            error=self.error or None,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            latency_s=self.latency_s,
            attempts=self.attempts,
            cached=self.cached,
        )


class VerdictQuerySet(models.QuerySet["Verdict"]):
    def of_latest_runs(self) -> VerdictQuerySet:
        return self.filter(run__in=Run.objects.latest_done())

    def counted(self, *fields: str) -> models.QuerySet[Any]:
        """Outcome counts grouped by fields (e.g. "run__llm", "concern__code")."""
        return self.values(*fields).annotate(verdicts=Count("pk"), **_outcome_counts()).order_by(*fields)

    def totals(self) -> dict[str, int]:
        return self.aggregate(verdicts=Count("pk"), **_outcome_counts())

    def flip_counts(self, *fields: str) -> dict[tuple[Any, ...], tuple[int, int]]:
        """(flipped, multi-sampled templates) per value of fields, by the engine's flip_rate;
        groups without a template answered twice are left out. Only runs with a second sample
        are read, and the database counts each template's outcomes, so a template arrives as a
        few (outcome, count) rows rather than one row per sample."""
        sampled = self.filter(run__in=self.filter(sample__gt=0).values("run"))
        rows = (
            sampled.values(*fields, "run", "requirement", "template_version", "outcome")
            .annotate(n=Count("pk"))
            .order_by()
        )
        samples: dict[tuple[Any, ...], dict[tuple[Any, ...], list[str]]] = {}
        for row in rows:
            group = tuple(row[f] for f in fields)
            template = (row["run"], row["requirement"], row["template_version"])
            samples.setdefault(group, {}).setdefault(template, []).extend([row["outcome"]] * row["n"])
        return {group: flip_rate(templates.values()) for group, templates in samples.items()}


def _outcome_counts() -> dict[str, Count]:
    return {o.value: Count("pk", filter=Q(outcome=o.value)) for o in Outcome}


class Verdict(models.Model):
    """What one template came to for one run, requirement and sample, and why."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="verdicts")
    template_version = models.ForeignKey(TemplateVersion, on_delete=models.PROTECT, related_name="verdicts")
    requirement = models.CharField(max_length=200)
    language = models.ForeignKey(Language, on_delete=models.PROTECT, related_name="+")
    concern = models.ForeignKey(Concern, on_delete=models.PROTECT, related_name="+")
    input_type = models.CharField(max_length=16)
    reflection_type = models.CharField(max_length=16)
    sample = models.PositiveSmallIntegerField(default=0)
    outcome = models.CharField(max_length=12, choices=OUTCOMES, db_index=True)
    oracle_outcome = models.CharField(max_length=12, choices=OUTCOMES, help_text="Before the judge, if any.")
    detail = models.TextField(blank=True)
    answers = models.JSONField(default=list, help_text="Per instance: outcome, detail, oracle outcome, judge verdict.")
    spread = models.FloatField(null=True, blank=True)
    values = models.JSONField(default=list, blank=True)
    pairs = models.JSONField(default=list, blank=True, help_text="Counterfactual metrics per pair of instances.")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = VerdictQuerySet.as_manager()

    class Meta:
        ordering = ["run", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "requirement", "template_version", "sample"], name="verdict_once_per_test"
            )
        ]
        indexes = [models.Index(fields=["run", "concern", "language"], name="verdict_breakdown")]

    def __str__(self) -> str:
        return f"{self.template_version}: {self.outcome}"


def record_integrity_safe(create: Any) -> Any:
    """Runs create(); None when a unique constraint says it already exists."""
    try:
        with transaction.atomic():
            return create()
    except IntegrityError:
        return None


# --- judge quality ----------------------------------------------------------------------------


def judge_aliases(spec: str) -> set[str]:
    """The names one judge goes by: a registered model's slug and its provider:model spec."""
    names = {spec}
    llm = LLM.objects.filter(slug=spec).first()
    if llm is not None:
        names.add(llm.spec)
    provider, _, model_id = spec.partition(":")
    if model_id:
        names.update(LLM.objects.filter(provider=provider, model_id=model_id).values_list("slug", flat=True))
    return names


class JudgeCheckQuerySet(models.QuerySet["JudgeCheck"]):
    def latest_for(self, judge: str, language: str = "all") -> JudgeCheck | None:
        """The newest measurement of a judge (by any of its names)."""
        return self.filter(judge__in=judge_aliases(judge), language=language).order_by("-measured_at", "-pk").first()

    def latest_per_judge(self) -> list[JudgeCheck]:
        """The newest overall measurement of every judge ever measured."""
        newest = (
            JudgeCheck.objects.filter(judge=OuterRef("judge"), language=JudgeCheck.ALL)
            .order_by("-measured_at", "-pk")
            .values("pk")[:1]
        )
        return list(self.filter(language=JudgeCheck.ALL, pk=Subquery(newest)).order_by("judge"))


class JudgeCheck(models.Model):
    """How far a judge model agrees with the human labels of the labelled answers
    (langbite_core/data/judge/labels_*.jsonl), overall ("all") or in one language. Every
    measurement is kept, so a judge's agreement can be followed over time."""

    ALL = "all"

    judge = models.CharField(max_length=250, db_index=True, help_text="A registered model's slug or provider:model.")
    language = models.CharField(max_length=16, help_text='A language code, or "all".')
    items = models.PositiveIntegerField()
    agreed = models.PositiveIntegerField()
    accuracy = models.FloatField(null=True, blank=True)
    kappa = models.FloatField(null=True, blank=True, help_text="Cohen's kappa: agreement beyond chance.")
    unusable = models.PositiveIntegerField(default=0, help_text="Replies with no verdict.")
    labels_hash = models.CharField(max_length=16, blank=True, help_text="Which version of the labelled set.")
    measured_at = models.DateTimeField(default=timezone.now, db_index=True)

    objects = JudgeCheckQuerySet.as_manager()

    class Meta:
        ordering = ["-measured_at", "judge", "language"]

    def __str__(self) -> str:
        return f"{self.judge} ({self.language}): {self.summary}"

    @property
    def summary(self) -> str:
        accuracy = f"{self.accuracy:.0%}" if self.accuracy is not None else "no usable verdict"
        kappa = f"kappa {self.kappa:.2f}" if self.kappa is not None else "kappa -"
        return f"{accuracy} ({kappa}, n={self.items}, measured {self.measured_at:%Y-%m-%d})"

    @staticmethod
    def command(judge: str) -> str:
        return f"manage.py check_judge --judge {judge}"

    @classmethod
    def measure(cls, judge: str, languages: Iterable[str] = (), provider: Provider | None = None) -> list[JudgeCheck]:
        """Puts every labelled answer (of the languages given, or all) to the judge through the
        engine and stores its agreement overall and per language; raises ValueError when no
        labelled answer is left and ConfigurationError for a judge that cannot be reached."""
        wanted = set(languages)
        items = [item for item in load_labels() if not wanted or item.language in wanted]
        if not items:
            raise ValueError(f"no labelled answers in {', '.join(sorted(wanted))}")
        executor = Executor({judge: provider or judge_for(judge)})
        result = measure_judge(judge, executor, items)
        digest = hashlib.sha256(
            json.dumps([(i.id, i.label, i.answer) for i in items], ensure_ascii=False).encode()
        ).hexdigest()[:16]
        now = timezone.now()
        with transaction.atomic():
            return cls.objects.bulk_create(
                cls(
                    judge=judge,
                    language=language,
                    items=agreement.items,
                    agreed=agreement.agreed,
                    accuracy=agreement.accuracy,
                    kappa=agreement.kappa,
                    unusable=agreement.unusable,
                    labels_hash=digest,
                    measured_at=now,
                )
                for language, agreement in result.items()
            )
