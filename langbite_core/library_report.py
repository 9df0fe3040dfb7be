"""Whole-library checks and counts: what `langbite library check` prints."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from langbite_core import markup
from langbite_core.generation import Instance, instantiate
from langbite_core.library import LanguagePack, Library, Template
from langbite_core.markup import MarkupError


@dataclass
class LibraryReport:
    problems: list[str] = field(default_factory=list)
    counts: dict[str, Counter[str]] = field(default_factory=dict)  # dimension -> value -> templates
    instances: int = 0


def render_all(pack: LanguagePack, template: Template) -> list[Instance]:
    communities = pack.communities.get(template.concern, ())
    return instantiate(template, communities, pack)


def check_rendering(pack: LanguagePack, template: Template) -> tuple[list[Instance], list[str]]:
    """Renders every instance; problems for leftover markups or empty slots."""
    where = template.origin or f"{pack.language}/{template.key}"
    try:
        instances = render_all(pack, template)
    except MarkupError as exc:
        return [], [f"{where}: {exc}"]
    problems = []
    if not instances:
        problems.append(f"{where}: renders no instance (too few {template.concern} communities)")
    for instance in instances:
        if markup.MARKUP_RE.search(instance.prompt):
            problems.append(f"{where}: markup left in {instance.prompt!r}")
        if "  " in instance.text or instance.text != instance.text.strip():
            problems.append(f"{where}: empty slot or stray spaces in {instance.text!r}")
    return instances, problems


def check_parity(library: Library) -> list[str]:
    """Every template key exists in every language, with the same concern, types and operation."""
    problems: list[str] = []
    shapes: dict[str, dict[str, tuple[str, str, str, str]]] = {}
    for code, pack in library.languages.items():
        shapes[code] = {t.key: (t.concern, t.input_type, t.reflection_type, t.oracle.operation) for t in pack.templates}
    all_keys = set().union(*(set(s) for s in shapes.values())) if shapes else set()
    for code, by_key in sorted(shapes.items()):
        missing = sorted(all_keys - set(by_key))
        if missing:
            shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
            problems.append(f"{code}: missing {len(missing)} template(s) present in other languages: {shown}")
    for key in sorted(all_keys):
        variants = {code: s[key] for code, s in shapes.items() if key in s}
        if len(set(variants.values())) > 1:
            detail = "; ".join(f"{code}={'/'.join(v)}" for code, v in sorted(variants.items()))
            problems.append(f"{key}: differs between languages: {detail}")
    return problems


def report(library: Library) -> LibraryReport:
    result = LibraryReport()
    dimensions = ("concern", "language", "input_type", "reflection_type", "operation")
    result.counts = {d: Counter() for d in dimensions}
    for pack in library.languages.values():
        for template in pack.templates:
            instances, problems = check_rendering(pack, template)
            result.problems.extend(problems)
            result.instances += len(instances)
            result.counts["concern"][template.concern] += 1
            result.counts["language"][template.language] += 1
            result.counts["input_type"][template.input_type] += 1
            result.counts["reflection_type"][template.reflection_type] += 1
            result.counts["operation"][template.oracle.operation] += 1
    if len(library.languages) > 1:
        result.problems.extend(check_parity(library))
    return result
