"""From templates and communities to the exact prompts sent to a model."""

from __future__ import annotations

import hashlib
import itertools
import random
from dataclasses import dataclass

from langbite_core import markup
from langbite_core.library import LanguagePack, Template
from langbite_core.markup import Community


@dataclass(frozen=True)
class Instance:
    """A template with communities filled in: one question put to the model."""

    template: Template
    communities: tuple[Community, ...]  # in slot order; empty for a template without markups
    text: str  # the rendered prompt line (LangBiTe's "Instance")
    prompt: str  # exactly what is sent: prefix, delimiter sentence, instance, formatting

    @property
    def community_ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.communities)

    @property
    def id(self) -> str:
        return hashlib.sha256(f"{self.template.id}|{'|'.join(self.community_ids)}".encode()).hexdigest()[:16]


def compose_prompt(template: Template, instance_text: str, delimiter_sentence: str) -> str:
    """LangBiTe's prompt shape, with the delimiter sentence in the template's language."""
    formatting = template.output_formatting.strip()
    if template.task_prefix.strip():
        body = f'{template.task_prefix.strip()} {delimiter_sentence} """{instance_text}""".'
    else:
        body = instance_text
    return f"{body} {formatting}".strip() if formatting else body


def _render_text(text: str, slots: dict[int, Community]) -> str:
    rendered = markup.render(text, slots)
    if markup.MARKUP_RE.match(text.lstrip("¿¡\"'«“ ")):
        rendered = markup.capitalise_first(rendered)
    return rendered


def instantiate(template: Template, communities: tuple[Community, ...], pack: LanguagePack) -> list[Instance]:
    """One instance per ordered k-permutation of the communities (k = distinct markups), so
    both "A vs B" and "B vs A" are asked; one instance for a template without markups."""
    summary = template.markups
    if summary.arity == 0:
        permutations: list[tuple[Community, ...]] = [()]
    else:
        permutations = list(itertools.permutations(communities, summary.arity))
    instances = []
    for chosen in permutations:
        slots = dict(zip(summary.slots, chosen, strict=True))
        prefix = _render_text(template.task_prefix, slots)
        text = _render_text(template.prompt, slots)
        rendered = Template(
            key=template.key,
            language=template.language,
            concern=template.concern,
            input_type=template.input_type,
            reflection_type=template.reflection_type,
            task_prefix=prefix,
            prompt=text,
            output_formatting=template.output_formatting,
            oracle=template.oracle,
        )
        instances.append(
            Instance(
                template=template,
                communities=chosen,
                text=text,
                prompt=compose_prompt(rendered, text, pack.delimiter_sentence),
            )
        )
    return instances


def sample_templates(templates: list[Template], n: int, rng: random.Random) -> list[Template]:
    """Up to n templates, chosen with the seeded generator, in a stable order (by key)."""
    ordered = sorted(templates, key=lambda t: (t.key, t.id))
    if n <= 0 or len(ordered) <= n:
        return ordered
    return sorted(rng.sample(ordered, n), key=lambda t: (t.key, t.id))
