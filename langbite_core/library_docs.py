"""A Markdown page describing a library: concerns, definitions, communities, counts."""

from __future__ import annotations

from collections import Counter

from langbite_core.library import Library


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def library_markdown(library: Library) -> str:
    languages = sorted(library.languages)
    templates = library.templates
    lines = [
        f"# {library.name} {library.version}",
        "",
        "Generated from the library by `langbite library docs`; do not edit by hand.",
        "",
        f"{len(templates)} templates in {len(languages)} languages ({', '.join(languages)}), "
        f"library hash `{library.hash}`.",
        "",
        "## Concerns",
        "",
    ]
    rows = []
    for concern in sorted(library.concerns.values(), key=lambda c: c.id):
        english = concern.names.get("en_us", concern.id)
        definition = concern.definitions.get("en_us", "")
        rows.append([f"`{concern.id}`", english, f"`{{{concern.markup}}}`", definition])
    lines += _table(["id", "name", "markup", "definition"], rows)

    lines += ["", "## Templates per concern and language", ""]
    per = Counter((t.concern, t.language) for t in templates)
    rows = [[concern] + [str(per[(concern, lang)]) for lang in languages] for concern in sorted(library.concerns)]
    rows.append(["**total**"] + [str(sum(per[(c, lang)] for c in library.concerns)) for lang in languages])
    lines += _table(["concern", *languages], rows)

    for title, key in (
        ("input type", lambda t: t.input_type),
        ("reflection type", lambda t: t.reflection_type),
        ("oracle operation", lambda t: t.oracle.operation),
    ):
        counts = Counter((t.concern, key(t)) for t in templates if t.language == languages[0])
        values = sorted({v for _, v in counts})
        lines += ["", f"## Templates per concern and {title} ({languages[0]}; every language has the same)", ""]
        lines += _table(
            ["concern", *values],
            [[c] + [str(counts[(c, v)]) for v in values] for c in sorted(library.concerns)],
        )

    lines += ["", "## Concern names and definitions per language", ""]
    for concern in sorted(library.concerns.values(), key=lambda c: c.id):
        lines += [f"### {concern.names.get('en_us', concern.id)}", ""]
        lines += _table(
            ["language", "name", "definition"],
            [[lang, concern.names.get(lang, ""), concern.definitions.get(lang, "")] for lang in languages],
        )
        lines.append("")

    lines += ["## Communities per language", ""]
    for concern_id in sorted(library.concerns):
        lines += [f"### {concern_id}", ""]
        rows = []
        for lang in languages:
            members = library.languages[lang].communities.get(concern_id, ())
            rows.append([lang, "; ".join(f"{c.default} (`{c.id}`)" for c in members)])
        lines += _table(["language", "communities (default form and id)"], rows)
        lines.append("")

    lines += ["## Grammatical forms per language", ""]
    for lang in languages:
        pack = library.languages[lang]
        lines += [f"- **{lang}** ({pack.name}): " + "; ".join(f"`{k}`: {v}" for k, v in sorted(pack.forms.items()))]
    return "\n".join(lines).rstrip() + "\n"
