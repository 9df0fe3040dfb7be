"""LangBiTe's tab-separated prompt libraries: one file per language, columns read by position."""

from __future__ import annotations

import json
from pathlib import Path

from langbite_core.library import (
    INPUT_TYPES,
    REFLECTION_TYPES,
    LanguagePack,
    Library,
    LibraryError,
    Template,
    check_duplicates,
    check_template,
    write_text_atomic,
)
from langbite_core.oracles import OracleError, OraclePrediction

COLUMNS = (
    "prompt_id",
    "concern",
    "input_type",
    "reflection_type",
    "task_prefix",
    "prompt",
    "output_formatting",
    "oracle",
    "oracle_prediction",
)
ORACLE_KINDS = ("expected value", "same value")


def _parse_row(cells: list[str], origin: str, language: str, library: Library | None) -> Template:
    problems: list[str] = []
    if len(cells) not in (9, 10):
        raise LibraryError([f"{origin}: expected 9 or 10 tab-separated columns, found {len(cells)}"])
    key, concern_name, input_type, reflection_type, prefix, prompt, formatting, oracle_kind, prediction = (
        c.strip() for c in cells[:9]
    )
    if not key:
        problems.append(f"{origin}: prompt_id is empty")
    if not concern_name:
        problems.append(f"{origin}: concern is empty")
    if not prompt:
        problems.append(f"{origin}: prompt is empty")
    if input_type not in INPUT_TYPES:
        problems.append(f"{origin}: input_type {input_type!r} must be one of {', '.join(INPUT_TYPES)}")
    if reflection_type not in REFLECTION_TYPES:
        problems.append(f"{origin}: reflection_type {reflection_type!r} must be one of {', '.join(REFLECTION_TYPES)}")
    if oracle_kind not in ORACLE_KINDS:
        problems.append(f"{origin}: oracle {oracle_kind!r} must be one of {', '.join(ORACLE_KINDS)}")
    oracle: OraclePrediction | None = None
    try:
        oracle = OraclePrediction.from_json(json.loads(prediction))
    except json.JSONDecodeError as exc:
        problems.append(f"{origin}: oracle_prediction is not valid JSON: {exc.msg} (column {exc.colno})")
    except OracleError as exc:
        problems.append(f"{origin}: oracle_prediction: {exc}")
    if oracle is not None and oracle_kind in ORACLE_KINDS and oracle.oracle_kind != oracle_kind:
        problems.append(f"{origin}: oracle {oracle_kind!r} does not fit operation {oracle.operation!r}")
    if problems or oracle is None:
        raise LibraryError(problems)
    concern = library.concern(concern_name) if library else None
    return Template(
        key=key,
        language=language,
        concern=concern.id if concern else concern_name.casefold(),
        input_type=input_type,
        reflection_type=reflection_type,
        task_prefix=prefix,
        prompt=prompt,
        output_formatting=formatting,
        oracle=oracle,
        origin=origin,
    )


def read_langbite_tsv(path: Path | str, language: str, library: Library | None = None) -> LanguagePack:
    """Reads a LangBiTe library file for one language.

    Language settings (refusal phrases, the localised delimiter sentence, communities with their
    forms) come from `library` when it has the language, so instances of the TSV's templates read
    as well as those of the library's own.
    """
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise LibraryError([f"{file}: cannot be read: {exc.strerror}"]) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LibraryError([f"{file}: not UTF-8 ({exc.reason} at byte {exc.start})"]) from None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    problems: list[str] = []
    if not lines or [c.strip() for c in lines[0].split("\t")][:9] != list(COLUMNS):
        problems.append(f"{file}:1: header must start with {', '.join(COLUMNS)} (tab-separated)")
        raise LibraryError(problems)
    templates: list[Template] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        origin = f"{file}:{number}"
        try:
            template = _parse_row(line.split("\t"), origin, language, library)
        except LibraryError as exc:
            problems.extend(exc.problems)
            continue
        # The TSV's own markup roots are checked against the requirement when a run is
        # planned (LangBiTe names the root there); here only their syntax and consistency.
        problems.extend(check_template(template, None, None))
        templates.append(template)
    problems.extend(check_duplicates(templates))
    if problems:
        raise LibraryError(problems)
    if not templates:
        raise LibraryError([f"{file}: no templates"])
    base = library.languages.get(language) if library else None
    if base is None and library is not None and "en_us" in library.languages:
        # An unknown language still gets refusal detection; English phrases are the most
        # common in answers of models that fall back to English.
        base = library.languages["en_us"]
    return LanguagePack(
        language=language,
        name=base.name if base and base.language == language else language,
        delimiter_sentence=base.delimiter_sentence if base else 'The sentence is delimited by """.',
        refusal_phrases=base.refusal_phrases if base else ("I cannot", "I can't", "as an AI"),
        communities=dict(base.communities) if base and base.language == language else {},
        templates=tuple(templates),
    )


def write_langbite_tsv(templates: list[Template], path: Path | str) -> None:
    """Writes templates as a LangBiTe library file (UTF-8, CRLF, header, no quoting)."""
    rows = ["\t".join(COLUMNS)]
    for t in templates:
        cells = [
            t.key,
            t.concern,
            t.input_type,
            t.reflection_type,
            t.task_prefix,
            t.prompt,
            t.output_formatting,
            t.oracle.oracle_kind,
            json.dumps(t.oracle.to_json(), ensure_ascii=False),
        ]
        for cell in cells:
            if "\t" in cell or "\n" in cell or "\r" in cell:
                raise LibraryError([f"{t.origin or t.key}: a tab or line break cannot be written to a TSV cell"])
        rows.append("\t".join(cells))
    write_text_atomic(Path(path), "\r\n".join(rows) + "\r\n")
