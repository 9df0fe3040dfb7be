"""The shipped library: complete, consistent and renderable in every language."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from langbite_core.engine import plan_run
from langbite_core.library import BUNDLED_LIBRARY, Library, load_library
from langbite_core.library_docs import library_markdown
from langbite_core.library_report import report
from langbite_core.requirements import load_requirements

LANGUAGES = {"en_us", "es_es", "ca_es", "fr_fr", "de_de", "it_it"}
CONCERNS = {
    "ageism", "lgbtiqphobia", "politics", "racism", "religion", "sexism", "xenophobia",
    "gender_ambiguity", "classism", "ableism",
}  # fmt: skip
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def library() -> Library:
    return load_library()


def test_it_covers_every_concern_in_every_language_with_enough_templates(library: Library) -> None:
    assert set(library.concerns) == CONCERNS
    assert set(library.languages) == LANGUAGES
    for code, pack in library.languages.items():
        per_concern = Counter(t.concern for t in pack.templates)
        assert len(pack.templates) >= 400, code
        assert min(per_concern[c] for c in CONCERNS) >= 30, (code, per_concern)
        kinds = Counter((t.concern, t.input_type, t.reflection_type) for t in pack.templates)
        for concern in CONCERNS:
            for input_type in ("constrained", "verbose"):
                for reflection in ("observational", "utopian"):
                    assert kinds[(concern, input_type, reflection)] > 0, (code, concern, input_type, reflection)
        operations = Counter(t.oracle.operation for t in pack.templates)
        assert operations["allSameValue"] >= 30 and operations["allEqualExpected"] >= 100, (code, operations)


def test_it_renders_every_instance_with_parity_and_no_problems(library: Library) -> None:
    result = report(library)
    assert result.problems == []
    assert result.instances > 6 * 400


def test_it_has_communities_names_and_definitions_for_every_concern_and_language(library: Library) -> None:
    for code, pack in library.languages.items():
        assert set(pack.communities) == CONCERNS, code
        assert all(len(members) >= 2 for members in pack.communities.values()), code
        for concern in library.concerns.values():
            assert concern.names.get(code) and concern.definitions.get(code), (code, concern.id)
        assert pack.refusal_phrases and pack.neutral_phrases, code


def test_it_localises_the_delimiter_sentence(library: Library) -> None:
    sentences = {pack.delimiter_sentence for pack in library.languages.values()}
    assert len(sentences) == len(library.languages)
    assert all('"""' in sentence for sentence in sentences)


def test_it_ships_a_default_scenario_that_selects_the_whole_library(library: Library) -> None:
    scenario = load_requirements(BUNDLED_LIBRARY.parent / "default_requirements.json")
    plan = plan_run(scenario, library)
    assert plan.warnings == []
    assert {t.template.id for t in plan.tests} == {t.id for t in library.templates}
    assert {r.concern.casefold() for r in scenario.requirements} == CONCERNS


def test_it_keeps_the_generated_library_page_up_to_date(library: Library) -> None:
    page = (ROOT / "docs" / "library.md").read_text(encoding="utf-8")
    assert page == library_markdown(library), "run: langbite library docs --out docs/library.md"


def test_it_has_judge_instructions_in_every_library_language(library: Library) -> None:
    for code in library.languages:
        texts = json.loads((BUNDLED_LIBRARY.parent / "judge" / f"{code}.json").read_text(encoding="utf-8"))
        assert texts["verdict_task"].format(prompt="p", expectation="e", answer="a")
        assert texts["bias_task"].format(prompt="p", answer="a")
