"""Prompt-template libraries: the canonical format, its validation, and its hashing.

A library is a folder (see docs/library-format.md):

    library.json                      name, version, languages, concerns with their markup root
    <language>/language.json          localised sentences and refusal phrases
    <language>/communities/<concern>.json   communities of a concern, with grammatical forms
    <language>/templates/<concern>.jsonl   one template per line

Every error names the file and line (or JSON path) and what is wrong; a library with any error
loads nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from langbite_core import markup
from langbite_core.markup import Community, MarkupError
from langbite_core.oracles import OracleError, OraclePrediction

FORMAT_NAME = "langbite-library"
FORMAT_VERSION = 1
INPUT_TYPES = ("constrained", "verbose")
REFLECTION_TYPES = ("observational", "utopian")
BUNDLED_LIBRARY = Path(__file__).parent / "data" / "library"
PHRASE_LISTS = ("@neutral", "@refusal")


class LibraryError(ValueError):
    """A library, or part of one, that cannot be loaded. Carries every problem found."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class Template:
    key: str  # the same key in every language names the same test, translated
    language: str
    concern: str
    input_type: str
    reflection_type: str
    task_prefix: str
    prompt: str
    output_formatting: str
    oracle: OraclePrediction
    origin: str = field(default="", compare=False)  # "file:line", for messages

    @property
    def id(self) -> str:
        """Content hash: any change to what is asked or how it is judged gives a new id."""
        payload = {**self.to_json(), "language": self.language, "concern": self.concern}
        del payload["key"]  # the key names a test across languages; it is not content
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode())
        return digest.hexdigest()[:16]

    @property
    def texts(self) -> list[str]:
        return [self.task_prefix, self.prompt]

    @property
    def markups(self) -> markup.MarkupSummary:
        return markup.summarise(self.texts)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "input_type": self.input_type,
            "reflection_type": self.reflection_type,
            "task_prefix": self.task_prefix,
            "prompt": self.prompt,
            "output_formatting": self.output_formatting,
            "oracle": self.oracle.to_json(),
        }


@dataclass(frozen=True)
class Concern:
    id: str
    markup: str
    names: dict[str, str] = field(default_factory=dict, hash=False)
    definitions: dict[str, str] = field(default_factory=dict, hash=False)
    aliases: tuple[str, ...] = ()

    def matches(self, name: str) -> bool:
        wanted = name.strip().casefold()
        candidates = {self.id, *self.aliases, *self.names.values()}
        return wanted in {c.casefold() for c in candidates}


@dataclass(frozen=True)
class LanguagePack:
    language: str
    name: str
    # The sentence between a task prefix and the quoted instance, in this language.
    delimiter_sentence: str
    refusal_phrases: tuple[str, ...]
    communities: dict[str, tuple[Community, ...]] = field(default_factory=dict, hash=False)
    templates: tuple[Template, ...] = ()
    concern_names: dict[str, str] = field(default_factory=dict, hash=False)
    concern_definitions: dict[str, str] = field(default_factory=dict, hash=False)
    forms: dict[str, str] = field(default_factory=dict, hash=False)
    neutral_phrases: tuple[str, ...] = ()

    def resolve_oracle(self, oracle: OraclePrediction) -> OraclePrediction:
        """The oracle with `@neutral` and `@refusal` expanded to this language's phrases."""
        if not any(v in PHRASE_LISTS for v in oracle.expected_value):
            return oracle
        expanded: list[str] = []
        for value in oracle.expected_value:
            if value == "@neutral":
                expanded.extend(self.neutral_phrases)
            elif value == "@refusal":
                expanded.extend(self.refusal_phrases)
            else:
                expanded.append(value)
        return replace(oracle, expected_value=tuple(dict.fromkeys(expanded)))


@dataclass(frozen=True)
class Library:
    name: str
    version: str
    concerns: dict[str, Concern] = field(hash=False)
    languages: dict[str, LanguagePack] = field(hash=False)

    @property
    def templates(self) -> list[Template]:
        return [t for pack in self.languages.values() for t in pack.templates]

    def concern(self, name: str) -> Concern | None:
        return next((c for c in self.concerns.values() if c.matches(name)), None)

    @property
    def hash(self) -> str:
        """Identifies the exact content: templates, communities and language settings."""
        digest = hashlib.sha256()
        for code in sorted(self.languages):
            pack = self.languages[code]
            digest.update(json.dumps(_language_json(pack), sort_keys=True).encode())
            digest.update(json.dumps(_communities_json(pack), sort_keys=True).encode())
            for template_id in sorted(t.id for t in pack.templates):
                digest.update(template_id.encode())
        return digest.hexdigest()[:16]

    def with_language(self, pack: LanguagePack) -> Library:
        languages = dict(self.languages)
        languages[pack.language] = pack
        return replace(self, languages=languages)


# --- reading ----------------------------------------------------------------------------------


def _read_json(path: Path, problems: list[str]) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        problems.append(f"{path}: file not found")
    except UnicodeDecodeError as exc:
        problems.append(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})")
    except json.JSONDecodeError as exc:
        problems.append(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}")
    return None


def _require_str(data: dict[str, Any], key: str, where: str, problems: list[str]) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        problems.append(f"{where}: '{key}' must be a non-empty string")
        return ""
    return value


def _read_concerns(data: Any, where: str, problems: list[str]) -> dict[str, Concern]:
    concerns: dict[str, Concern] = {}
    if not isinstance(data, dict) or not data:
        problems.append(f"{where}: 'concerns' must be a non-empty object")
        return concerns
    for concern_id, spec in data.items():
        at = f"{where}: concerns.{concern_id}"
        if not isinstance(spec, dict):
            problems.append(f"{at}: must be an object")
            continue
        root = _require_str(spec, "markup", at, problems)
        if root and not markup.MARKUP_RE.fullmatch("{" + root + "}"):
            problems.append(f"{at}.markup: {root!r} must be upper-case letters and underscores")
        aliases = spec.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            problems.append(f"{at}.aliases: must be a list of strings")
            aliases = []
        concerns[concern_id] = Concern(id=concern_id, markup=root, aliases=tuple(aliases))
    return concerns


def read_communities(data: dict[str, Any], where: str, problems: list[str]) -> dict[str, tuple[Community, ...]]:
    """Communities per concern; data maps each concern id to its list of community objects."""
    result: dict[str, tuple[Community, ...]] = {}
    for concern_id, items in data.items():
        if not isinstance(items, list):
            problems.append(f"{where}: must be a list of communities")
            continue
        communities: list[Community] = []
        for i, item in enumerate(items):
            at = f"{where}: [{i}]"
            if not isinstance(item, dict):
                problems.append(f"{at}: must be an object")
                continue
            community_id = _require_str(item, "id", at, problems)
            forms = item.get("forms")
            if not isinstance(forms, dict) or not all(isinstance(v, str) and v.strip() for v in forms.values()):
                problems.append(f"{at}.forms: must map form names to non-empty text")
                continue
            if "default" not in forms:
                problems.append(f"{at}.forms: needs a 'default' form")
                continue
            gender = item.get("gender")
            if gender is not None and not isinstance(gender, str):
                problems.append(f"{at}.gender: must be a string such as 'm', 'f' or 'n'")
                continue
            communities.append(Community(id=community_id, forms=dict(forms), gender=gender))
        ids = [c.id for c in communities]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            problems.append(f"{where}: duplicate community ids {duplicates}")
        form_sets = {frozenset(c.forms) for c in communities}
        if len(form_sets) > 1:
            problems.append(
                f"{where}: every community must have the same forms, found "
                + " vs ".join(sorted(",".join(sorted(s)) for s in form_sets))
            )
        result[concern_id] = tuple(communities)
    return result


def parse_template(data: Any, *, language: str, concern: str, origin: str) -> Template:
    """One template from its canonical JSON object; raises LibraryError naming the origin."""
    if not isinstance(data, dict):
        raise LibraryError([f"{origin}: a template must be a JSON object"])
    problems: list[str] = []
    allowed = {"key", "input_type", "reflection_type", "task_prefix", "prompt", "output_formatting", "oracle"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        problems.append(f"{origin}: unknown field(s) {', '.join(unknown)}")
    key = _require_str(data, "key", origin, problems)
    prompt = _require_str(data, "prompt", origin, problems)
    task_prefix = data.get("task_prefix", "")
    output_formatting = data.get("output_formatting", "")
    for label, value in (("task_prefix", task_prefix), ("output_formatting", output_formatting)):
        if not isinstance(value, str):
            problems.append(f"{origin}: '{label}' must be a string")
    input_type = data.get("input_type")
    if input_type not in INPUT_TYPES:
        problems.append(f"{origin}: input_type {input_type!r} must be one of {', '.join(INPUT_TYPES)}")
    reflection_type = data.get("reflection_type")
    if reflection_type not in REFLECTION_TYPES:
        problems.append(f"{origin}: reflection_type {reflection_type!r} must be one of {', '.join(REFLECTION_TYPES)}")
    try:
        oracle = OraclePrediction.from_json(data.get("oracle"))
    except OracleError as exc:
        problems.append(f"{origin}: oracle: {exc}")
    if problems:
        raise LibraryError(problems)
    return Template(
        key=key,
        language=language,
        concern=concern,
        input_type=str(input_type),
        reflection_type=str(reflection_type),
        task_prefix=str(task_prefix),
        prompt=prompt,
        output_formatting=str(output_formatting),
        oracle=oracle,
        origin=origin,
    )


def check_template(
    template: Template,
    concern: Concern | None,
    communities: tuple[Community, ...] | None,
) -> list[str]:
    """Problems with a parsed template in the context of its library (empty when fine)."""
    problems: list[str] = []
    where = template.origin or template.key
    try:
        summary = template.markups
        for text in (template.output_formatting,):
            if markup.find_markups(text):
                problems.append(f"{where}: output_formatting must not contain markups")
    except MarkupError as exc:
        return [f"{where}: {exc}"]
    if concern is None:
        return problems
    stray = summary.roots - {concern.markup}
    if stray:
        problems.append(
            f"{where}: markup {', '.join(sorted(stray))} does not belong to concern "
            f"{concern.id} (its markup is {concern.markup})"
        )
    if communities is None:
        return problems
    if summary.arity and len(communities) < summary.arity:
        problems.append(f"{where}: needs {summary.arity} communities, {concern.id} has {len(communities)}")
    text_markups = [m for text in template.texts for m in markup.find_markups(text)]
    available = set(communities[0].forms) if communities else {"default"}
    for m in text_markups:
        if m.choices:
            keys = {k for k, _ in m.choices}
            missing = {c.gender or "?" for c in communities} - keys
            if missing and "*" not in keys:
                problems.append(f"{where}: {m.text} has no choice for gender {', '.join(sorted(missing))}")
        elif (m.form or "default") not in available:
            problems.append(f"{where}: {m.text} uses form {m.form!r}, which {concern.id} communities lack")
    return problems


def read_templates_jsonl(path: Path, *, language: str, concern: str) -> tuple[list[Template], list[str]]:
    templates: list[Template] = []
    problems: list[str] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        return [], [f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})"]
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        origin = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{origin}: invalid JSON: {exc.msg} (column {exc.colno})")
            continue
        try:
            templates.append(parse_template(data, language=language, concern=concern, origin=origin))
        except LibraryError as exc:
            problems.extend(exc.problems)
    return templates, problems


@dataclass(frozen=True)
class LanguageSettings:
    name: str
    delimiter_sentence: str
    refusal_phrases: tuple[str, ...]
    concern_names: dict[str, str]
    concern_definitions: dict[str, str]
    forms: dict[str, str]  # form name -> what it is, for curators and the documentation page
    neutral_phrases: tuple[str, ...] = ()


def read_language_settings(data: Any, where: str, problems: list[str]) -> LanguageSettings:
    empty = LanguageSettings("", "", (), {}, {}, {})
    if not isinstance(data, dict):
        problems.append(f"{where}: must be a JSON object")
        return empty
    name = _require_str(data, "name", where, problems)
    delimiter = _require_str(data, "delimiter_sentence", where, problems)
    phrases = data.get("refusal_phrases")
    if not isinstance(phrases, list) or not phrases or not all(isinstance(p, str) and p.strip() for p in phrases):
        problems.append(f"{where}: 'refusal_phrases' must be a non-empty list of phrases")
        phrases = []
    names: dict[str, str] = {}
    definitions: dict[str, str] = {}
    concerns = data.get("concerns", {})
    if not isinstance(concerns, dict):
        problems.append(f"{where}: 'concerns' must map concern ids to a name and a definition")
        concerns = {}
    for concern_id, texts in concerns.items():
        if not isinstance(texts, dict):
            problems.append(f"{where}: concerns.{concern_id}: must be an object")
            continue
        names[concern_id] = _require_str(texts, "name", f"{where}: concerns.{concern_id}", problems)
        definitions[concern_id] = _require_str(texts, "definition", f"{where}: concerns.{concern_id}", problems)
    forms = data.get("forms", {})
    if not isinstance(forms, dict) or not all(isinstance(v, str) for v in forms.values()):
        problems.append(f"{where}: 'forms' must map form names to descriptions")
        forms = {}
    neutral = data.get("neutral_phrases", [])
    if not isinstance(neutral, list) or not all(isinstance(p, str) and p.strip() for p in neutral):
        problems.append(f"{where}: 'neutral_phrases' must be a list of phrases")
        neutral = []
    return LanguageSettings(name, delimiter, tuple(phrases), names, definitions, dict(forms), tuple(neutral))


def check_duplicates(templates: Iterable[Template]) -> list[str]:
    problems: list[str] = []
    seen_keys: dict[tuple[str, str], Template] = {}
    seen_ids: dict[str, Template] = {}
    for t in templates:
        if (t.language, t.key) in seen_keys:
            problems.append(f"{t.origin}: key {t.key!r} already used at {seen_keys[(t.language, t.key)].origin}")
        seen_keys.setdefault((t.language, t.key), t)
        if t.id in seen_ids:
            problems.append(f"{t.origin}: same template as {seen_ids[t.id].origin}")
        seen_ids.setdefault(t.id, t)
    return problems


def load_library(folder: Path | str = BUNDLED_LIBRARY) -> Library:
    """Loads and validates a canonical library folder; raises LibraryError listing every problem."""
    root = Path(folder)
    problems: list[str] = []
    manifest_path = root / "library.json"
    manifest = _read_json(manifest_path, problems)
    if problems:
        raise LibraryError(problems)
    if not isinstance(manifest, dict):
        raise LibraryError([f"{manifest_path}: must be a JSON object"])
    if manifest.get("format") != FORMAT_NAME or manifest.get("format_version") != FORMAT_VERSION:
        problems.append(f"{manifest_path}: expected format {FORMAT_NAME!r} version {FORMAT_VERSION}")
    name = _require_str(manifest, "name", str(manifest_path), problems)
    version = _require_str(manifest, "version", str(manifest_path), problems)
    concerns = _read_concerns(manifest.get("concerns"), str(manifest_path), problems)
    language_codes = manifest.get("languages")
    if not isinstance(language_codes, list) or not all(isinstance(c, str) for c in language_codes):
        problems.append(f"{manifest_path}: 'languages' must be a list of language codes")
        language_codes = []
    languages: dict[str, LanguagePack] = {}
    for code in language_codes:
        folder_path = root / code
        settings_path = folder_path / "language.json"
        settings = read_language_settings(_read_json(settings_path, problems), str(settings_path), problems)
        for concern_id in set(settings.concern_names) - set(concerns):
            problems.append(f"{settings_path}: concerns.{concern_id}: unknown concern")
        communities: dict[str, tuple[Community, ...]] = {}
        for communities_path in sorted((folder_path / "communities").glob("*.json")):
            data = _read_json(communities_path, problems)
            communities.update(read_communities({communities_path.stem: data}, str(communities_path), problems))
        for concern_id, members in communities.items():
            if concern_id not in concerns:
                problems.append(f"{folder_path / 'communities'}: {concern_id}.json: unknown concern")
            undeclared = {f for c in members for f in c.forms} - set(settings.forms)
            if settings.forms and undeclared:
                problems.append(
                    f"{folder_path / 'communities' / concern_id}.json: forms {', '.join(sorted(undeclared))} "
                    f"are not declared in {settings_path}"
                )
        templates: list[Template] = []
        template_dir = folder_path / "templates"
        for path in sorted(template_dir.glob("*.jsonl")):
            concern_id = path.stem
            if concern_id not in concerns:
                problems.append(f"{path}: file name must be a concern id, {concern_id!r} is not one")
                continue
            found, file_problems = read_templates_jsonl(path, language=code, concern=concern_id)
            problems.extend(file_problems)
            for template in found:
                problems.extend(check_template(template, concerns[concern_id], communities.get(concern_id)))
                if "@neutral" in template.oracle.expected_value and not settings.neutral_phrases:
                    problems.append(f"{template.origin}: uses @neutral but {settings_path} has no neutral_phrases")
            templates.extend(found)
        problems.extend(check_duplicates(templates))
        languages[code] = LanguagePack(
            language=code,
            name=settings.name,
            delimiter_sentence=settings.delimiter_sentence,
            refusal_phrases=settings.refusal_phrases,
            communities=communities,
            templates=tuple(templates),
            concern_names=settings.concern_names,
            concern_definitions=settings.concern_definitions,
            forms=settings.forms,
            neutral_phrases=settings.neutral_phrases,
        )
    if problems:
        raise LibraryError(problems)
    named = {
        concern_id: replace(
            concern,
            names={code: p.concern_names[concern_id] for code, p in languages.items() if concern_id in p.concern_names},
            definitions={
                code: p.concern_definitions[concern_id]
                for code, p in languages.items()
                if concern_id in p.concern_definitions
            },
        )
        for concern_id, concern in concerns.items()
    }
    return Library(name=name, version=version, concerns=named, languages=languages)


# --- writing ----------------------------------------------------------------------------------


def _language_json(pack: LanguagePack) -> dict[str, Any]:
    return {
        "name": pack.name,
        "delimiter_sentence": pack.delimiter_sentence,
        "refusal_phrases": list(pack.refusal_phrases),
        "neutral_phrases": list(pack.neutral_phrases),
        "forms": pack.forms,
        "concerns": {
            concern_id: {"name": name, "definition": pack.concern_definitions.get(concern_id, "")}
            for concern_id, name in pack.concern_names.items()
        },
    }


def _communities_json(pack: LanguagePack) -> dict[str, Any]:
    return {
        concern: [{"id": c.id, **({"gender": c.gender} if c.gender else {}), "forms": c.forms} for c in communities]
        for concern, communities in pack.communities.items()
    }


def write_text_atomic(path: Path, text: str) -> None:
    """Writes the whole file or nothing: a crash never leaves half a file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _dump(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def write_library(library: Library, folder: Path | str) -> None:
    root = Path(folder)
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "name": library.name,
        "version": library.version,
        "languages": sorted(library.languages),
        "concerns": {
            c.id: {
                "markup": c.markup,
                **({"aliases": list(c.aliases)} if c.aliases else {}),
            }
            for c in library.concerns.values()
        },
    }
    write_text_atomic(root / "library.json", _dump(manifest))
    for code, pack in library.languages.items():
        write_text_atomic(root / code / "language.json", _dump(_language_json(pack)))
        for concern_id, items in _communities_json(pack).items():
            write_text_atomic(root / code / "communities" / f"{concern_id}.json", _dump(items))
        by_concern: dict[str, list[Template]] = {}
        for template in pack.templates:
            by_concern.setdefault(template.concern, []).append(template)
        for concern_id, templates in by_concern.items():
            lines = [json.dumps(t.to_json(), ensure_ascii=False) for t in templates]
            write_text_atomic(root / code / "templates" / f"{concern_id}.jsonl", "\n".join(lines) + "\n")
