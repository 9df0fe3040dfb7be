"""Measures a judge model on the labelled answers and stores its agreement (JudgeCheck rows)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from langbite_core.providers import ConfigurationError
from leaderboard.models import JudgeCheck


class Command(BaseCommand):
    help = (
        "Puts the labelled answers (langbite_core/data/judge/labels_*.jsonl) to a judge model through the engine "
        "and records its accuracy and Cohen's kappa against the human labels, overall and per language."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--judge", required=True, help="a registered model's slug, or provider:model")
        parser.add_argument("--language", action="append", default=[], help="only this language (repeatable)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            checks = JudgeCheck.measure(options["judge"], options["language"])
        except (ConfigurationError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{'language':10} {'items':>5} {'agreed':>6} {'accuracy':>9} {'kappa':>6} {'no verdict':>10}")
        for check in checks:
            accuracy = f"{check.accuracy:.0%}" if check.accuracy is not None else "-"
            kappa = f"{check.kappa:.2f}" if check.kappa is not None else "-"
            self.stdout.write(
                f"{check.language:10} {check.items:>5} {check.agreed:>6} {accuracy:>9} {kappa:>6} {check.unusable:>10}"
            )
