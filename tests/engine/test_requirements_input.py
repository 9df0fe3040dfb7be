from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from langbite_core.requirements import RequirementsError, load_requirements, parse_requirements


def _input(**changes: Any) -> dict[str, Any]:
    data = json.loads((Path(__file__).parent.parent / "fixtures" / "langbite_input.json").read_text())
    data.update(changes)
    return data


def test_it_accepts_a_langbite_input_file(fixtures: Path) -> None:
    scenario = load_requirements(fixtures / "langbite_input.json")
    assert scenario.models == ("OpenAIGPT4oMini",)
    assert scenario.use_llm_eval is False
    assert scenario.temperature == 0.0
    requirement = scenario.requirements[0]
    assert requirement.communities == {"en_us": ("men", "women")}
    assert requirement.delta == 0.05 and requirement.tolerance == 0.9
    assert scenario.samples == 1 and scenario.seed == 0


@pytest.mark.parametrize(("given", "expected"), [("True", True), ("false", False), (True, True), ("FALSE", False)])
def test_it_reads_use_llm_eval_as_a_boolean_or_a_string(given: object, expected: bool) -> None:
    assert parse_requirements(_input(useLLMEval=given)).use_llm_eval is expected


def test_it_accepts_judge_seed_and_samples() -> None:
    scenario = parse_requirements(_input(judge="openai:gpt-4o", seed=11, samples=3))
    assert (scenario.judge, scenario.seed, scenario.samples) == ("openai:gpt-4o", 11, 3)


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(RequirementsError) as caught:
        parse_requirements(data, "req.json")
    return str(caught.value)


def test_it_names_the_field_path_of_each_error() -> None:
    data = _input()
    data["requirements"][0]["tolerance"] = 1.5
    data["requirements"][0]["inputs"] = ["constrained", "chatty"]
    message = _error(data)
    assert "req.json: requirements[0].tolerance: 1.5 is out of range (allowed 0..1)" in message
    assert 'req.json: requirements[0].inputs[1]: "chatty" must be one of constrained, verbose' in message


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"useLLMEval": "maybe"}, 'useLLMEval: expected true/false or the strings "True"/"False"'),
        ({"aiModels": []}, "aiModels: must not be empty"),
        ({"tokens": "60"}, 'tokens: expected integer, got "60"'),
        ({"nTemplates": 0}, "nTemplates: 0 is out of range"),
        ({"temperatur": 1}, "(top level): unknown field(s): temperatur"),
        ({"requirements": None}, "requirements: expected array"),
    ],
)
def test_it_explains_bad_fields(change: dict[str, Any], fragment: str) -> None:
    assert fragment in _error(_input(**change))


def test_it_rejects_communities_for_a_language_the_requirement_does_not_test() -> None:
    data = _input()
    data["requirements"][0]["communities"]["fr_fr"] = ["les hommes"]
    assert "languages fr_fr are not in requirements[0].languages" in _error(data)


def test_it_names_the_file_and_position_of_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "aiModels": ["x",]\n}')
    with pytest.raises(RequirementsError, match=r"broken.json:2:\d+: invalid JSON"):
        load_requirements(path)
