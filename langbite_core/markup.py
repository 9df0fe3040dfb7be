"""Markups in template text and their rendering with a community's grammatical forms.

Syntax (see docs/library-format.md):

- ``{ROOT}`` or ``{ROOT1}``: the community's default form.
- ``{ROOT1.form}``: a named form of the community (``{GENDER1.sg}`` -> "a woman").
- ``{ROOT1|m=text|f=text}``: text chosen by the community's grammatical gender, so that articles,
  adjectives and participles agree ("{GENDER1|m=considerados|f=consideradas}"). A ``*`` key is
  the fallback for communities whose gender is unknown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# A markup is braces around an upper-case root, an optional slot number, and either a form
# name or a list of gender choices. Anything else in braces is not a markup and is left alone
# (templates may contain literal JSON such as {"probability": 50}).
MARKUP_RE = re.compile(
    r"\{(?P<root>[A-Z][A-Z_]*?[A-Z])(?P<slot>\d*)"
    r"(?:\.(?P<form>[a-z][a-z0-9_]*)|(?P<choices>\|[^{}]*))?\}"
)
# Catches braces that look like a markup but do not parse, such as "{GENDER1.}" or "{gender}".
SUSPICIOUS_RE = re.compile(r"\{\s*[A-Za-z_][A-Za-z_0-9]*\s*(?:[.|][^{}]*)?\}")


class MarkupError(ValueError):
    """A template's text uses markups that cannot be rendered."""


@dataclass(frozen=True)
class Markup:
    root: str
    slot: int  # 0 for an unnumbered markup
    form: str | None = None
    choices: tuple[tuple[str, str], ...] = ()
    text: str = ""


@dataclass(frozen=True)
class Community:
    """One sensitive community as rendered in one language."""

    id: str
    forms: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    gender: str | None = None

    @property
    def default(self) -> str:
        return self.forms["default"]

    @classmethod
    def literal(cls, text: str) -> Community:
        """A community given only as text (LangBiTe inputs): every form is that text."""
        return cls(id=text, forms={"default": text}, gender=None)

    def form(self, name: str | None) -> str:
        if name is None:
            return self.default
        # A literal community has only its text; using it for every form is what LangBiTe did.
        return self.forms.get(name, self.default) if self.is_literal else self.forms[name]

    @property
    def is_literal(self) -> bool:
        return set(self.forms) == {"default"} and self.gender is None

    def choose(self, choices: tuple[tuple[str, str], ...]) -> str:
        options = dict(choices)
        if self.gender is not None and self.gender in options:
            return options[self.gender]
        if "*" in options:
            return options["*"]
        # Unknown gender and no fallback: the first option keeps the sentence readable.
        return choices[0][1]


def _parse_choices(raw: str, markup_text: str) -> tuple[tuple[str, str], ...]:
    choices: list[tuple[str, str]] = []
    for part in raw[1:].split("|"):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not key:
            raise MarkupError(f"choice {part!r} in {markup_text} is not of the form key=text")
        choices.append((key, value))
    return tuple(choices)


def find_markups(text: str) -> list[Markup]:
    """Every markup in text, in order. Raises MarkupError for braces that nearly parse."""
    markups: list[Markup] = []
    for match in MARKUP_RE.finditer(text):
        choices = _parse_choices(match["choices"], match[0]) if match["choices"] else ()
        markups.append(
            Markup(
                root=match["root"],
                slot=int(match["slot"]) if match["slot"] else 0,
                form=match["form"],
                choices=choices,
                text=match[0],
            )
        )
    leftover = MARKUP_RE.sub("", text)
    for bad in SUSPICIOUS_RE.finditer(leftover):
        if not bad[0].startswith('{"'):
            raise MarkupError(f"{bad[0]} is not a valid markup")
    return markups


@dataclass(frozen=True)
class MarkupSummary:
    roots: frozenset[str]
    slots: tuple[int, ...]  # distinct slot numbers, sorted; (0,) for an unnumbered markup

    @property
    def arity(self) -> int:
        return len(self.slots)


def summarise(texts: list[str]) -> MarkupSummary:
    """The roots and slots used across a template's texts, checked for consistency."""
    markups = [m for text in texts for m in find_markups(text)]
    roots = frozenset(m.root for m in markups)
    slots = tuple(sorted({m.slot for m in markups}))
    if len(roots) > 1:
        raise MarkupError(f"markups use more than one root: {', '.join(sorted(roots))}")
    if 0 in slots and len(slots) > 1:
        raise MarkupError("an unnumbered markup is mixed with numbered ones")
    if slots and slots != (0,) and slots != tuple(range(1, len(slots) + 1)):
        raise MarkupError(f"numbered markups must be 1..n without gaps, found {list(slots)}")
    return MarkupSummary(roots=roots, slots=slots)


def render(text: str, communities: dict[int, Community]) -> str:
    """Replaces each markup by the form or choice of the community in its slot."""

    def replace(match: re.Match[str]) -> str:
        slot = int(match["slot"]) if match["slot"] else 0
        community = communities.get(slot)
        if community is None:
            raise MarkupError(f"no community for {match[0]}")
        if match["choices"]:
            return community.choose(_parse_choices(match["choices"], match[0]))
        try:
            return community.form(match["form"])
        except KeyError:
            raise MarkupError(
                f"community {community.id!r} has no form {match['form']!r} needed by {match[0]}"
            ) from None

    return MARKUP_RE.sub(replace, text)


def forms_used(text: str) -> set[str]:
    return {m.form or "default" for m in find_markups(text) if not m.choices}


def capitalise_first(text: str) -> str:
    """Capitalises a sentence that starts with a community form ("women are..." -> "Women are...")."""
    for i, char in enumerate(text):
        if char.isalpha():
            return text[:i] + char.upper() + text[i + 1 :]
        if not (char.isspace() or char in "¿¡\"'«“"):
            return text
    return text
