"""Serves plotly.min.js from the installed plotly package as the static file vendor/plotly.min.js.

The charts must never load code from a CDN, and copying a 4.8 MB file into the repository would
let it drift from the installed plotly version; a finder makes `runserver` and `collectstatic`
both take the file straight from the package.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import CheckMessage, Error
from django.core.files.storage import FileSystemStorage

STATIC_NAME = "vendor/plotly.min.js"
PACKAGE_FILE = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


class PlotlyFinder(BaseFinder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(PACKAGE_FILE.parent))
        # collectstatic copies to STATIC_ROOT/<prefix>/<name>.
        self.storage.prefix = "vendor"  # type: ignore[attr-defined]

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        if not PACKAGE_FILE.is_file():
            return [Error(f"plotly.min.js is missing from the plotly package ({PACKAGE_FILE})", id="leaderboard.E001")]
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> str | list[str]:
        if path == STATIC_NAME and PACKAGE_FILE.is_file():
            return [str(PACKAGE_FILE)] if find_all else str(PACKAGE_FILE)
        return [] if find_all else ""

    def list(self, ignore_patterns: Any) -> Iterator[tuple[str, FileSystemStorage]]:
        if PACKAGE_FILE.is_file():
            yield PACKAGE_FILE.name, self.storage
