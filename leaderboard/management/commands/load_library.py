"""Imports a template library (the bundled one by default) into the database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from langbite_core.library import BUNDLED_LIBRARY, LibraryError, load_library
from leaderboard.models import LibraryImport


class Command(BaseCommand):
    help = "Imports the bundled template library (or --library-dir) into the database; safe to repeat."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--library-dir", type=Path, default=BUNDLED_LIBRARY, help="a canonical library folder")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            library = load_library(options["library_dir"])
        except LibraryError as exc:
            raise CommandError(f"the library has problems, nothing was imported:\n{exc}") from None
        record = LibraryImport.import_library(library)
        counts = record.summary.get("counts", {})
        changes = ", ".join(f"{n} {what}" for what, n in sorted(counts.items())) or "no changes"
        self.stdout.write(
            f"{library.name} {library.version} (hash {library.hash}): {len(library.templates)} templates in "
            f"{len(library.languages)} language(s); {changes}"
        )
