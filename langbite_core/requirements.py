"""Ethical requirements and test scenario: LangBiTe's input JSON, validated with a JSON Schema."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from langbite_core.library import INPUT_TYPES, REFLECTION_TYPES

LANGUAGE_PATTERN = r"^[a-z]{2,3}_[a-z]{2}$"
BOOL_STRINGS = {"true": True, "false": False}

REQUIREMENTS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "LangBiTe ethical requirements and test scenario",
    "type": "object",
    "required": ["aiModels", "requirements"],
    "additionalProperties": False,
    "properties": {
        "timestamp": {"type": ["integer", "number", "string"]},
        "nTemplates": {"type": "integer", "minimum": 1},
        "nRetries": {"type": "integer", "minimum": 0},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "tokens": {"type": "integer", "minimum": 1, "maximum": 32768},
        "useLLMEval": {"anyOf": [{"type": "boolean"}, {"type": "string", "pattern": "^(?i:true|false)$"}]},
        "aiModels": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
        "judge": {"type": "string", "minLength": 1},
        "seed": {"type": "integer", "minimum": 0},
        "samples": {"type": "integer", "minimum": 1, "maximum": 100},
        "requirements": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "languages", "tolerance", "concern"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "rationale": {"type": "string"},
                    "languages": {
                        "type": "array",
                        "minItems": 1,
                        "items": {"type": "string", "pattern": LANGUAGE_PATTERN},
                    },
                    "tolerance": {"type": "number", "minimum": 0, "maximum": 1},
                    "delta": {"type": "number", "minimum": 0, "maximum": 1},
                    "concern": {"type": "string", "minLength": 1},
                    "markup": {"type": "string", "pattern": "^[A-Z][A-Z_]*[A-Z]$"},
                    "communities": {
                        "type": "object",
                        "propertyNames": {"pattern": LANGUAGE_PATTERN},
                        "additionalProperties": {
                            "type": "array",
                            "items": {"type": "string", "minLength": 1},
                        },
                    },
                    "inputs": {"type": "array", "minItems": 1, "items": {"enum": list(INPUT_TYPES)}},
                    "reflections": {"type": "array", "minItems": 1, "items": {"enum": list(REFLECTION_TYPES)}},
                },
            },
        },
    },
}
_VALIDATOR = jsonschema.Draft202012Validator(REQUIREMENTS_SCHEMA)


class RequirementsError(ValueError):
    """An input file that cannot be run; the message names the file and field."""


@dataclass(frozen=True)
class Requirement:
    name: str
    rationale: str
    languages: tuple[str, ...]
    tolerance: float
    delta: float
    concern: str
    markup: str | None
    communities: dict[str, tuple[str, ...]] = field(hash=False)
    inputs: tuple[str, ...]
    reflections: tuple[str, ...]


@dataclass(frozen=True)
class Scenario:
    models: tuple[str, ...]
    requirements: tuple[Requirement, ...]
    n_templates: int = 60
    n_retries: int = 1
    temperature: float = 1.0
    max_tokens: int = 60
    use_llm_eval: bool = False
    judge: str | None = None
    seed: int = 0
    samples: int = 1
    timestamp: Any = None

    def to_json(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "nTemplates": self.n_templates,
            "nRetries": self.n_retries,
            "temperature": self.temperature,
            "tokens": self.max_tokens,
            "useLLMEval": self.use_llm_eval,
            "aiModels": list(self.models),
            "judge": self.judge,
            "seed": self.seed,
            "samples": self.samples,
            "requirements": [
                {
                    "name": r.name,
                    "rationale": r.rationale,
                    "languages": list(r.languages),
                    "tolerance": r.tolerance,
                    "delta": r.delta,
                    "concern": r.concern,
                    "markup": r.markup,
                    "communities": {k: list(v) for k, v in r.communities.items()},
                    "inputs": list(r.inputs),
                    "reflections": list(r.reflections),
                }
                for r in self.requirements
            ],
        }


def _path_of(error: jsonschema.ValidationError) -> str:
    path = ""
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(top level)"


def _explain(error: jsonschema.ValidationError) -> str:
    validator = error.validator
    if validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return f"unknown field(s): {', '.join(extra)}"
    if validator == "required":
        return error.message.replace("is a required property", "is required")
    if validator == "type":
        return f"expected {error.validator_value}, got {json.dumps(error.instance)[:60]}"
    if validator in ("minimum", "maximum"):
        low, high = error.schema.get("minimum", "-"), error.schema.get("maximum", "-")
        return f"{error.instance} is out of range (allowed {low}..{high})"
    if validator == "enum":
        return f"{json.dumps(error.instance)} must be one of {', '.join(map(str, error.validator_value))}"
    if validator == "pattern" and isinstance(error.instance, str):
        return f"{error.instance!r} does not match the expected form {error.validator_value}"
    if validator == "anyOf" and error.schema is REQUIREMENTS_SCHEMA["properties"]["useLLMEval"]:
        return f'expected true/false or the strings "True"/"False", got {json.dumps(error.instance)}'
    if validator == "minItems":
        return "must not be empty"
    return error.message


def parse_requirements(data: Any, source: str = "<input>") -> Scenario:
    """A Scenario from LangBiTe's input JSON (already decoded); raises RequirementsError."""
    errors = sorted(_VALIDATOR.iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.validator))
    if errors:
        lines = [f"{source}: {_path_of(e)}: {_explain(e)}" for e in errors[:20]]
        raise RequirementsError("\n".join(lines))
    use_llm_eval = data.get("useLLMEval", False)
    if isinstance(use_llm_eval, str):
        use_llm_eval = BOOL_STRINGS[use_llm_eval.lower()]
    requirements = []
    names = set()
    for i, r in enumerate(data["requirements"]):
        if r["name"] in names:
            raise RequirementsError(f"{source}: requirements[{i}].name: {r['name']!r} is used twice")
        names.add(r["name"])
        unknown_languages = sorted(set(r.get("communities", {})) - set(r["languages"]))
        if unknown_languages:
            raise RequirementsError(
                f"{source}: requirements[{i}].communities: languages {', '.join(unknown_languages)} "
                f"are not in requirements[{i}].languages"
            )
        requirements.append(
            Requirement(
                name=r["name"],
                rationale=r.get("rationale", ""),
                languages=tuple(dict.fromkeys(r["languages"])),
                tolerance=float(r["tolerance"]),
                delta=float(r.get("delta", 0.0)),
                concern=r["concern"],
                markup=r.get("markup"),
                communities={k: tuple(v) for k, v in r.get("communities", {}).items()},
                inputs=tuple(dict.fromkeys(r.get("inputs", INPUT_TYPES))),
                reflections=tuple(dict.fromkeys(r.get("reflections", REFLECTION_TYPES))),
            )
        )
    return Scenario(
        models=tuple(dict.fromkeys(data["aiModels"])),
        requirements=tuple(requirements),
        n_templates=data.get("nTemplates", 60),
        n_retries=data.get("nRetries", 1),
        temperature=float(data.get("temperature", 1.0)),
        max_tokens=data.get("tokens", 60),
        use_llm_eval=bool(use_llm_eval),
        judge=data.get("judge"),
        seed=data.get("seed", 0),
        samples=data.get("samples", 1),
        timestamp=data.get("timestamp"),
    )


def load_requirements(path: Path | str) -> Scenario:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise RequirementsError(f"{file}: file not found") from None
    except UnicodeDecodeError as exc:
        raise RequirementsError(f"{file}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise RequirementsError(f"{file}: cannot be read: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequirementsError(f"{file}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    return parse_requirements(data, str(file))
