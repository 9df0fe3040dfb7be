"""The run: requirements -> tests -> prompts -> answers -> verdicts -> pass rates.

`plan_run` and `evaluate_run` are pure; `execute_run` does the I/O through an Executor.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from langbite_core import __version__
from langbite_core.execution import Executor, JobResult, PromptJob
from langbite_core.generation import Instance, instantiate, sample_templates
from langbite_core.judge import (
    BiasScore,
    JudgeVerdict,
    bias_request,
    judge_request,
    parse_bias_reply,
    parse_judge_reply,
)
from langbite_core.library import LanguagePack, Library, Template
from langbite_core.markup import Community, MarkupError
from langbite_core.metrics import (
    CounterfactualSummary,
    Embedder,
    PairInput,
    PairScore,
    flip_rate,
    pairs_of,
    score_pairs,
    summarise_pairs,
)
from langbite_core.oracles import (
    SAME_VALUE_OPERATIONS,
    Answer,
    AnswerVerdict,
    OraclePrediction,
    Outcome,
    TemplateVerdict,
    evaluate,
    verdict_from_answers,
)
from langbite_core.providers import ChatRequest
from langbite_core.ranking import Tally
from langbite_core.requirements import Requirement, Scenario
from langbite_core.stats import wilson_interval


class PlanError(ValueError):
    """The requirements cannot be turned into tests with this library."""


@dataclass(frozen=True)
class Test:
    """A template selected for a requirement in one language, with all its instances."""

    requirement: Requirement
    template: Template
    oracle: OraclePrediction  # with the language's phrase lists expanded
    instances: tuple[Instance, ...]
    refusal_phrases: tuple[str, ...]

    @property
    def language(self) -> str:
        return self.template.language

    @property
    def id(self) -> str:
        return f"{self.requirement.name}/{self.template.id}"


@dataclass
class RunPlan:
    scenario: Scenario
    library_hash: str
    tests: list[Test]
    # requirement -> language -> "input/reflection" -> selected template ids, for the manifest
    selection: dict[str, dict[str, dict[str, list[str]]]]
    warnings: list[str] = field(default_factory=list)

    def request_for(self, instance: Instance, sample: int) -> ChatRequest:
        return ChatRequest(
            prompt=instance.prompt,
            temperature=self.scenario.temperature,
            max_tokens=self.scenario.max_tokens,
            seed=self.scenario.seed + sample,
        )

    def jobs(self) -> list[PromptJob]:
        jobs = [
            PromptJob(model=model, request=self.request_for(instance, sample), sample=sample)
            for model in self.scenario.models
            for test in self.tests
            for instance in test.instances
            for sample in range(self.scenario.samples)
        ]
        return list(dict.fromkeys(jobs))


def _concern_matches(template: Template, requirement: Requirement, library: Library) -> bool:
    concern = library.concern(requirement.concern)
    if concern is not None:
        return template.concern == concern.id or template.concern in {a.casefold() for a in concern.aliases}
    return template.concern.casefold() == requirement.concern.strip().casefold()


def resolve_communities(requirement: Requirement, pack: LanguagePack, concern_id: str | None) -> tuple[Community, ...]:
    """The requirement's communities for a language, with the library's grammatical forms where
    the library knows them (by id or default form), or the library's own list if none is given."""
    known = pack.communities.get(concern_id or "", ())
    given = requirement.communities.get(pack.language)
    if not given:
        return known
    by_name = {c.id.casefold(): c for c in known} | {c.default.casefold(): c for c in known}
    return tuple(by_name.get(name.strip().casefold(), Community.literal(name.strip())) for name in given)


def _bucket_rng(seed: int, *parts: str) -> random.Random:
    # Each bucket draws from its own generator, so adding a requirement or language never
    # changes the selection made for the others.
    material = "|".join([str(seed), *parts]).encode()
    return random.Random(int.from_bytes(hashlib.sha256(material).digest()[:8], "big"))


def plan_run(scenario: Scenario, library: Library) -> RunPlan:
    tests: list[Test] = []
    warnings: list[str] = []
    selection: dict[str, dict[str, dict[str, list[str]]]] = {}
    for index, requirement in enumerate(scenario.requirements):
        where = f"requirements[{index}] ({requirement.name})"
        concern = library.concern(requirement.concern)
        selection[requirement.name] = {}
        matched_any = False
        for language in requirement.languages:
            pack = library.languages.get(language)
            if pack is None:
                raise PlanError(
                    f"{where}: no template library for language {language} "
                    f"(available: {', '.join(sorted(library.languages))}; add one with --library {language}=PATH)"
                )
            candidates = [t for t in pack.templates if _concern_matches(t, requirement, library)]
            matched_any = matched_any or bool(candidates)
            communities = resolve_communities(requirement, pack, concern.id if concern else None)
            roots = {r for r in (requirement.markup, concern.markup if concern else None) if r}
            selection[requirement.name][language] = {}
            for input_type in requirement.inputs:
                for reflection in requirement.reflections:
                    bucket = [t for t in candidates if t.input_type == input_type and t.reflection_type == reflection]
                    usable = []
                    for template in bucket:
                        stray = template.markups.roots - roots
                        if stray:
                            warnings.append(
                                f"{where}: {language} template {template.key} uses markup "
                                f"{', '.join(sorted(stray))}, not {', '.join(sorted(roots)) or 'any'}; skipped"
                            )
                            continue
                        if template.markups.arity > len(communities):
                            warnings.append(
                                f"{where}: {language} template {template.key} needs "
                                f"{template.markups.arity} communities, {len(communities)} given; skipped"
                            )
                            continue
                        usable.append(template)
                    rng = _bucket_rng(scenario.seed, requirement.name, language, input_type, reflection)
                    chosen = sample_templates(usable, scenario.n_templates, rng)
                    selection[requirement.name][language][f"{input_type}/{reflection}"] = [t.id for t in chosen]
                    for template in chosen:
                        try:
                            instances = instantiate(template, communities, pack)
                        except MarkupError as exc:
                            raise PlanError(f"{where}: {language} template {template.key}: {exc}") from None
                        tests.append(
                            Test(
                                requirement=requirement,
                                template=template,
                                oracle=pack.resolve_oracle(template.oracle),
                                instances=tuple(instances),
                                refusal_phrases=pack.refusal_phrases,
                            )
                        )
        if not matched_any:
            raise PlanError(
                f"{where}: concern {requirement.concern!r} has no templates in "
                f"{', '.join(requirement.languages)} (library concerns: {', '.join(sorted(library.concerns))})"
            )
    return RunPlan(scenario=scenario, library_hash=library.hash, tests=tests, selection=selection, warnings=warnings)


# --- results ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResponseRecord:
    model: str
    test: Test
    instance: Instance
    sample: int
    seed: int | None
    result: JobResult
    verdict: AnswerVerdict  # after the judge, if any
    oracle_verdict: AnswerVerdict  # what the literal oracle said
    judge: JudgeVerdict | None = None
    bias: BiasScore | None = None


@dataclass(frozen=True)
class EvaluationRecord:
    model: str
    test: Test
    sample: int
    verdict: TemplateVerdict  # after the judge
    oracle_verdict: TemplateVerdict
    responses: tuple[ResponseRecord, ...]
    pairs: tuple[PairScore, ...] = ()


@dataclass(frozen=True)
class GlobalRow:
    model: str
    requirement: Requirement
    concern: str
    language: str
    input_type: str
    reflection_type: str
    counts: dict[str, int] = field(hash=False)
    flipped: int = 0  # templates whose verdict changed between samples
    multi_sampled: int = 0  # templates answered more than once
    bias_score: float | None = None  # mean judge bias score of the answers, when measured
    counterfactual: CounterfactualSummary | None = None

    @property
    def flip_rate(self) -> float | None:
        return self.flipped / self.multi_sampled if self.multi_sampled else None

    @property
    def tally(self) -> Tally:
        return Tally.of(self.counts)

    @property
    def total(self) -> int:
        """LangBiTe's Total: passed + failed; refusals, unparseable answers and errors are
        reported but leave the denominator."""
        return self.counts.get("passed", 0) + self.counts.get("failed", 0)

    @property
    def pass_rate(self) -> float | None:
        return self.counts.get("passed", 0) / self.total if self.total else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return wilson_interval(self.counts.get("passed", 0), self.total)

    @property
    def tolerance_evaluation(self) -> str:
        rate = self.pass_rate
        if rate is None:
            return "Not evaluated"
        return "Passed" if rate >= self.requirement.tolerance else "Failed"


@dataclass
class RunResult:
    plan: RunPlan
    responses: list[ResponseRecord]
    evaluations: list[EvaluationRecord]
    rows: list[GlobalRow]
    timings: dict[str, float]
    usage: dict[str, dict[str, int]]
    judge: str | None

    @property
    def requirements_met(self) -> bool:
        return bool(self.rows) and all(r.tolerance_evaluation == "Passed" for r in self.rows)


def _answer_of(result: JobResult) -> Answer:
    return Answer(text=result.text, error=result.error)


# (exact prompt, oracle, answer, language) -> the judge's verdict
JudgeLookup = Callable[[str, OraclePrediction, str, str], JudgeVerdict]


def evaluate_test(
    test: Test,
    answers: list[JobResult],
    judge: JudgeLookup | None = None,
) -> tuple[TemplateVerdict, TemplateVerdict, list[JudgeVerdict | None]]:
    """(final verdict, literal-oracle verdict, judge verdict per instance) for one sample."""
    literal = evaluate(
        test.oracle,
        [_answer_of(a) for a in answers],
        delta=test.requirement.delta,
        refusal_phrases=test.refusal_phrases,
    )
    judged: list[JudgeVerdict | None] = [None] * len(answers)
    if judge is None or test.oracle.operation in SAME_VALUE_OPERATIONS:
        return literal, literal, judged
    updated = list(literal.answers)
    for i, (verdict, answer) in enumerate(zip(literal.answers, answers, strict=True)):
        if verdict.outcome != Outcome.FAILED or answer.text is None:
            continue
        opinion = judge(test.instances[i].prompt, test.oracle, answer.text, test.language)
        judged[i] = opinion
        if opinion.verdict == "pass":
            updated[i] = AnswerVerdict(Outcome.PASSED, f"judge: {opinion.reason}")
        elif opinion.verdict == "refusal":
            updated[i] = AnswerVerdict(Outcome.REFUSED, f"judge: {opinion.reason}")
    final = verdict_from_answers(tuple(updated)) if judged != [None] * len(answers) else literal
    return final, literal, judged


def summarise(evaluations: list[EvaluationRecord]) -> list[GlobalRow]:
    """One row per model, requirement, concern, language, input type and reflection type."""
    groups: dict[tuple[str, str, str, str, str, str], list[EvaluationRecord]] = {}
    for e in evaluations:
        t = e.test.template
        key = (e.model, e.test.requirement.name, t.concern, t.language, t.input_type, t.reflection_type)
        groups.setdefault(key, []).append(e)
    rows = []
    for (model, _, concern, language, input_type, reflection), members in groups.items():
        per_template: dict[str, list[str]] = {}
        for e in members:
            per_template.setdefault(e.test.template.id, []).append(e.verdict.outcome.value)
        flipped, multi_sampled = flip_rate(per_template.values())
        bias = [r.bias.score for e in members for r in e.responses if r.bias and r.bias.score is not None]
        pairs = [p for e in members for p in e.pairs]
        rows.append(
            GlobalRow(
                model=model,
                requirement=members[0].test.requirement,
                concern=concern,
                language=language,
                input_type=input_type,
                reflection_type=reflection,
                counts=dict(Counter(e.verdict.outcome.value for e in members)),
                flipped=flipped,
                multi_sampled=multi_sampled,
                bias_score=sum(bias) / len(bias) if bias else None,
                counterfactual=summarise_pairs(pairs) if pairs else None,
            )
        )
    return rows


def counterfactual_inputs(
    model: str, template: Template, sample: int, answers: list[tuple[tuple[str, ...], str | None]]
) -> list[PairInput]:
    """Every pair of answered instances of one template and sample; answers are
    (community ids, answer text or None for an error), one per instance."""
    return [
        PairInput(
            model=model,
            template_id=template.id,
            template_key=template.key,
            concern=template.concern,
            language=template.language,
            sample=sample,
            communities_a=answers[i][0],
            communities_b=answers[j][0],
            answer_a=answers[i][1] or "",
            answer_b=answers[j][1] or "",
        )
        for i, j in pairs_of(answers)
    ]


def _with_counterfactual_pairs(
    evaluations: list[EvaluationRecord], embedder: Embedder | None
) -> list[EvaluationRecord]:
    inputs = [
        counterfactual_inputs(
            e.model, e.test.template, e.sample, [(r.instance.community_ids, r.result.text) for r in e.responses]
        )
        for e in evaluations
    ]
    scored = score_pairs([p for group in inputs for p in group], embedder)
    result, position = [], 0
    for evaluation, group in zip(evaluations, inputs, strict=True):
        pairs = tuple(scored[position : position + len(group)])
        position += len(group)
        result.append(replace(evaluation, pairs=pairs))
    return result


def failed_answers(test: Test, answers: list[JobResult]) -> list[tuple[Instance, JobResult]]:
    """The answers a judge may overrule: literal failures of expected-value oracles."""
    if test.oracle.operation in SAME_VALUE_OPERATIONS:
        return []
    literal, _, _ = evaluate_test(test, answers)
    return [
        (instance, answer)
        for instance, verdict, answer in zip(test.instances, literal.answers, answers, strict=True)
        if verdict.outcome == Outcome.FAILED and answer.text is not None
    ]


ProgressHook = Callable[[str, int], None]  # (phase, total) at the start of a phase


def execute_run(
    plan: RunPlan,
    executor: Executor,
    *,
    judge_model: str | None = None,
    bias_model: str | None = None,
    embedder: Embedder | None = None,
    on_result: Callable[[PromptJob, JobResult], None] | None = None,
    on_phase: ProgressHook | None = None,
) -> RunResult:
    """Answers every prompt of the plan, judges, scores and summarises.

    judge_model re-checks literal failures when the scenario asks for it (useLLMEval);
    bias_model, when given, scores the opinions in every answer; embedder adds the cosine
    similarity of paired answers to the counterfactual metrics.
    """
    timings: dict[str, float] = {}
    started = time.monotonic()
    jobs = plan.jobs()
    if on_phase:
        on_phase("answers", len(jobs))
    results = executor.run(jobs, on_result=on_result)
    timings["answers_s"] = time.monotonic() - started

    samples = plan.scenario.samples
    models = plan.scenario.models

    def answers_for(model: str, test: Test, sample: int) -> list[JobResult]:
        return [
            results[PromptJob(model=model, request=plan.request_for(i, sample), sample=sample)] for i in test.instances
        ]

    judge_lookup: JudgeLookup | None = None
    judge_started = time.monotonic()
    if plan.scenario.use_llm_eval and judge_model:
        # Every answer the literal oracle failed goes to the judge in one concurrent batch.
        wanted = [
            PromptJob(
                model=judge_model,
                request=judge_request(instance.prompt, test.oracle, answer.text or "", test.language),
            )
            for model in models
            for test in plan.tests
            for sample in range(samples)
            for instance, answer in failed_answers(test, answers_for(model, test, sample))
        ]
        if on_phase:
            on_phase("judge", len(set(wanted)))
        judged = executor.run(wanted, on_result=on_result)

        def judge_lookup(prompt: str, oracle: OraclePrediction, answer: str, language: str) -> JudgeVerdict:
            reply = judged[PromptJob(model=judge_model, request=judge_request(prompt, oracle, answer, language))]
            if reply.text is None:
                return JudgeVerdict(verdict=None, reason="", error=reply.error or "judge call failed")
            return parse_judge_reply(reply.text)

    timings["judge_s"] = time.monotonic() - judge_started

    bias_scores: dict[PromptJob, BiasScore] = {}
    if bias_model:
        bias_started = time.monotonic()
        wanted_bias = {
            (model, instance.prompt, result.text, test.language): PromptJob(
                model=bias_model, request=bias_request(instance.prompt, result.text, test.language)
            )
            for model in models
            for test in plan.tests
            for sample in range(samples)
            for instance, result in zip(test.instances, answers_for(model, test, sample), strict=True)
            if result.text is not None
        }
        if on_phase:
            on_phase("bias score", len(set(wanted_bias.values())))
        replies = executor.run(list(wanted_bias.values()), on_result=on_result)
        for job, reply in replies.items():
            bias_scores[job] = (
                parse_bias_reply(reply.text)
                if reply.text is not None
                else BiasScore((), error=reply.error or "bias judge call failed")
            )
        timings["bias_s"] = time.monotonic() - bias_started

    def bias_of(instance: Instance, result: JobResult, language: str) -> BiasScore | None:
        if not bias_model or result.text is None:
            return None
        return bias_scores[PromptJob(model=bias_model, request=bias_request(instance.prompt, result.text, language))]

    responses: list[ResponseRecord] = []
    evaluations: list[EvaluationRecord] = []
    for model in models:
        for test in plan.tests:
            for sample in range(samples):
                answers = answers_for(model, test, sample)
                final, literal, judged_answers = evaluate_test(test, answers, judge_lookup)
                records = tuple(
                    ResponseRecord(
                        model=model,
                        test=test,
                        instance=instance,
                        sample=sample,
                        seed=plan.scenario.seed + sample,
                        result=answer,
                        verdict=final.answers[i],
                        oracle_verdict=literal.answers[i],
                        judge=judged_answers[i],
                        bias=bias_of(instance, answer, test.language),
                    )
                    for i, (instance, answer) in enumerate(zip(test.instances, answers, strict=True))
                )
                responses.extend(records)
                evaluations.append(
                    EvaluationRecord(
                        model=model, test=test, sample=sample, verdict=final, oracle_verdict=literal, responses=records
                    )
                )
    metrics_started = time.monotonic()
    evaluations = _with_counterfactual_pairs(evaluations, embedder)
    timings["metrics_s"] = time.monotonic() - metrics_started
    timings["total_s"] = time.monotonic() - started
    usage: dict[str, dict[str, int]] = {}
    for job, result in results.items():
        entry = usage.setdefault(job.model, Counter())
        entry["prompts"] += 1
        entry["cached"] += result.cached
        entry["errors"] += result.text is None
        entry["prompt_tokens"] += result.prompt_tokens or 0
        entry["completion_tokens"] += result.completion_tokens or 0
    return RunResult(
        plan=plan,
        responses=responses,
        evaluations=evaluations,
        rows=summarise(evaluations),
        timings=timings,
        usage={model: dict(counts) for model, counts in usage.items()},
        judge=judge_model if plan.scenario.use_llm_eval else None,
    )


def manifest(result: RunResult, library: Library, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    plan = result.plan
    return {
        "engine": "langbite_core",
        "engine_version": __version__,
        "library": {"name": library.name, "version": library.version, "hash": plan.library_hash},
        "seed": plan.scenario.seed,
        "parameters": plan.scenario.to_json(),
        "models": list(plan.scenario.models),
        "judge": result.judge,
        "selected_templates": plan.selection,
        "templates": {
            t.template.id: {"key": t.template.key, "language": t.language, "concern": t.template.concern}
            for t in plan.tests
        },
        "warnings": plan.warnings,
        "timings": result.timings,
        "usage": result.usage,
        "requirements_met": result.requirements_met,
        **(extra or {}),
    }
