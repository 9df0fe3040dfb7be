"""Registers the local models that come in installed pip packages as LLMs to test."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.utils.text import slugify

from langbite_core.providers import BUNDLED_MODELS
from leaderboard.models import LLM


class Command(BaseCommand):
    help = "Registers every installed bundled local model (local:NAME) as an LLM; existing ones are left as they are."

    def handle(self, *args: Any, **options: Any) -> None:
        for model in BUNDLED_MODELS.values():
            if not model.is_installed:
                self.stdout.write(f"{model.name}: not installed ({model.install})")
                continue
            llm, created = LLM.objects.get_or_create(
                slug=slugify(model.name.replace(".", "-")),
                defaults={
                    "name": model.title,
                    "provider": "local",
                    "model_id": model.name,
                    # The weights are pinned by hash, which is the most exact revision there is.
                    "revision": f"sha256:{model.sha256[:12]}",
                    "temperature": 0.0,
                    "max_tokens": 40,
                },
            )
            self.stdout.write(f"{model.name}: {'registered' if created else 'already registered'} as {llm.slug}")
