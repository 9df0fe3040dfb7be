"""Checks one language of the bundled library against English while it is being written.

    python scripts/check_language.py es_es [--show CONCERN]

Loads English plus the given language (whether or not library.json lists it yet), then prints
every problem: format errors, rendering errors, parity with English template by template.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langbite_core.library import BUNDLED_LIBRARY, LibraryError, load_library  # noqa: E402
from langbite_core.library_report import render_all, report  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("language")
    parser.add_argument("--show", help="print the rendered prompts of this concern")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "library"
        shutil.copytree(BUNDLED_LIBRARY, root)
        manifest = json.loads((root / "library.json").read_text())
        manifest["languages"] = ["en_us", args.language]
        (root / "library.json").write_text(json.dumps(manifest))
        try:
            library = load_library(root)
        except LibraryError as exc:
            print("\n".join(p.replace(str(root), "library") for p in exc.problems))
            return 1
        result = report(library)
        print("\n".join(p.replace(str(root), "library") for p in result.problems) or "no problems")
        for dimension, counter in result.counts.items():
            print(f"{dimension}: {dict(sorted(counter.items()))}")
        if args.show:
            pack = library.languages[args.language]
            for template in pack.templates:
                if template.concern == args.show:
                    for instance in render_all(pack, template)[:2]:
                        print(f"{template.key}: {instance.prompt}")
        return 1 if result.problems else 0


if __name__ == "__main__":
    sys.exit(main())
