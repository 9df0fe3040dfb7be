"""A small run of every active model, inline, so a fresh install has results to show."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from langbite_core.requirements import RequirementsError
from leaderboard import jobs
from leaderboard.models import LLM, Community, Concern, Run, Template


class Command(BaseCommand):
    help = (
        "Runs a small scenario (a few concerns, nTemplates per bucket, two communities each) inline "
        "for every active LLM, or the ones named with --llm."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--llm", action="append", default=[], help="slug of a model to run (repeatable)")
        parser.add_argument(
            "--concerns", default="", help="comma-separated concern codes (default: the first --max-concerns)"
        )
        parser.add_argument("--max-concerns", type=int, default=4)
        parser.add_argument("--languages", default="en_us,es_es", help="comma-separated language codes")
        parser.add_argument(
            "--templates", type=int, default=2, help="nTemplates: templates per input/reflection bucket"
        )
        parser.add_argument("--communities", type=int, default=2, help="communities per concern")
        parser.add_argument("--skip-done", action="store_true", help="skip models that already have a finished run")

    def scenario(self, options: dict[str, Any]) -> dict[str, Any]:
        languages = [code.strip() for code in options["languages"].split(",") if code.strip()]
        with_templates = (
            Concern.objects.filter(templates__active=True, templates__language__code__in=languages)
            .distinct()
            .order_by("code")
        )
        wanted = [c.strip() for c in options["concerns"].split(",") if c.strip()]
        concerns = list(with_templates.filter(code__in=wanted) if wanted else with_templates[: options["max_concerns"]])
        if not concerns:
            raise CommandError(f"no concern has templates in {', '.join(languages)}; run load_library first")
        requirements = []
        for concern in concerns:
            present = [
                code
                for code in languages
                if Template.objects.filter(concern=concern, language__code=code, active=True).exists()
            ]
            communities = {
                code: list(
                    Community.objects.filter(concern=concern, language__code=code)
                    .order_by("position", "id")
                    .values_list("community_id", flat=True)[: options["communities"]]
                )
                for code in present
            }
            requirements.append(
                {
                    "name": f"DEMO-{concern.code.upper()}",
                    "rationale": f"Demonstration: {concern.label}.",
                    "languages": present,
                    "tolerance": 0.9,
                    "delta": 0.1,
                    "concern": concern.code,
                    "communities": {code: ids for code, ids in communities.items() if ids},
                    "inputs": ["constrained", "verbose"],
                    "reflections": ["observational", "utopian"],
                }
            )
        return {"nTemplates": options["templates"], "nRetries": 1, "aiModels": ["-"], "requirements": requirements}

    def handle(self, *args: Any, **options: Any) -> None:
        llms = LLM.objects.filter(active=True)
        if options["llm"]:
            llms = LLM.objects.filter(slug__in=options["llm"])
        if not llms.exists():
            raise CommandError("no active LLM to run; register one (register_bundled_models, or the admin)")
        if options["skip_done"]:
            done = llms.filter(runs__status=Run.Status.DONE).distinct()
            for llm in done:
                self.stdout.write(f"{llm.slug}: has results already; skipped (DEMO_RUN=force to run again)")
            llms = llms.exclude(pk__in=done)
            if not llms.exists():
                return
        scenario = self.scenario(options)
        for llm in llms:
            try:
                run = Run.create_for(llm, trigger=Run.Trigger.DEMO, scenario=scenario)
            except RequirementsError as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(f"{llm.slug}: run {run.pk} started")
            # Inline whatever the queue settings: the command returns when the results exist.
            try:
                with jobs.inline():
                    jobs.plan_run(run.pk)
            except Exception as exc:  # one model's crash must not cost the others their run
                run.fail(f"{type(exc).__name__}: {exc}")
            run.refresh_from_db()
            if run.status != Run.Status.DONE:
                self.stderr.write(f"{llm.slug}: run {run.pk} {run.status}: {run.error_message}")
                continue
            total = run.verdicts.totals()
            decided = total["passed"] + total["failed"]
            rate = f"{total['passed'] / decided:.0%}" if decided else "-"
            self.stdout.write(
                f"{llm.slug}: run {run.pk} done: {run.total_prompts} prompts, pass rate {rate} "
                f"({total['passed']}/{decided}; refused {total['refused']}, unparseable {total['unparseable']}, "
                f"errors {total['error']})"
            )
